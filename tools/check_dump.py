#!/usr/bin/env python3
"""Checks a `dtensor-conv --dump DIR` directory against PyTorch.

A dtensor-conv dump is a convolution dump whose meta.json names no operator;
check_op_dump.py (beside this file) replays it as dtensor-op's "conv":
torch.nn.functional.conv{1,2,3}d in float64 (asymmetric padding: F.pad
first), the gradients with autograd from the dumped grad_output, and compares
every dumped result, printing the max abs error and the tolerance of each.

Usage: check_dump.py DIR [--quiet]
Exit status: 0 all within tolerance, 1 a tensor over tolerance (or missing),
2 bad usage or an unreadable dump, 77 PyTorch or numpy not importable (the
conventional "skipped" status).

Works with Debian 12's python3-torch 1.13 and python3-numpy.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check_op_dump  # noqa: E402  (found beside this file)

if __name__ == "__main__":
    sys.exit(check_op_dump.main(sys.argv, prog="check_dump.py", default_op="conv"))
