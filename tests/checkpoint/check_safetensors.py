#!/usr/bin/env python3
"""Checks a safetensors file against raw expected bytes, independently of libdtensor.

    check_safetensors.py FILE.safetensors MANIFEST.json

MANIFEST lists {"name", "dtype", "shape", "file"} per tensor; each file holds
the tensor's raw little-endian bytes. The safetensors file is parsed here by
hand (json + struct + numpy) following the format's rules: an 8-byte
little-endian header length, a JSON header, data offsets that tile the data
buffer exactly. When the `safetensors` package is importable, it reads the
file too. Prints "N tensors match" and exits 0, or names the first
difference and exits 1.
"""

import json
import os
import struct
import sys

import numpy as np

NUMPY = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16}
SIZE = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2}


def fail(msg):
    print(f"check_safetensors: {msg}")
    sys.exit(1)


def main():
    path, manifest_path = sys.argv[1], sys.argv[2]
    manifest = json.load(open(manifest_path))
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    header.pop("__metadata__", None)
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    at = 0
    for b, e in spans:
        if b != at:
            fail(f"data offsets leave a hole or overlap at {b}")
        at = e
    if at != len(data):
        fail(f"data offsets end at {at}, the buffer holds {len(data)} bytes")
    if set(header) != {t["name"] for t in manifest}:
        fail(f"tensors {sorted(header)} != expected {sorted(t['name'] for t in manifest)}")
    for t in manifest:
        h = header[t["name"]]
        if h["dtype"] != t["dtype"] or h["shape"] != t["shape"]:
            fail(f"{t['name']}: {h['dtype']} {h['shape']} != {t['dtype']} {t['shape']}")
        b, e = h["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64))
        if e - b != count * SIZE[t["dtype"]]:
            fail(f"{t['name']}: {e - b} bytes for {count} elements")
        got = np.frombuffer(data[b:e], dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
        raw = open(os.path.join(os.path.dirname(manifest_path), t["file"]), "rb").read()
        want = np.frombuffer(raw, dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
        # Bit for bit: compare the bytes, then the values where numpy has the type.
        if got.tobytes() != want.tobytes():
            fail(f"{t['name']}: bytes differ")
        if t["dtype"] != "BF16" and not np.array_equal(got, want):
            fail(f"{t['name']}: values differ")
    try:
        from safetensors import safe_open
    except ImportError:
        print("check_safetensors: the safetensors package is not installed; hand parser only")
    else:
        with safe_open(path, framework="numpy") as f:
            for t in manifest:
                if t["dtype"] == "BF16":
                    continue  # numpy has no bfloat16
                raw = open(os.path.join(os.path.dirname(manifest_path), t["file"]), "rb").read()
                want = np.frombuffer(raw, dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
                if f.get_tensor(t["name"]).tobytes() != want.tobytes():
                    fail(f"{t['name']}: safetensors reads other bytes")
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:  # bfloat16 through PyTorch, compared as raw 16-bit words
            with safe_open(path, framework="pt") as f:
                for t in manifest:
                    if t["dtype"] != "BF16":
                        continue
                    raw = open(os.path.join(os.path.dirname(manifest_path), t["file"]), "rb").read()
                    got = f.get_tensor(t["name"]).contiguous().view(torch.int16).numpy().tobytes()
                    if got != raw:
                        fail(f"{t['name']}: safetensors (pt) reads other bytes")
        print("check_safetensors: the safetensors package reads it too")
    print(f"{len(manifest)} tensors match")


if __name__ == "__main__":
    main()
