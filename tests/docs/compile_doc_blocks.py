#!/usr/bin/env python3
"""Compiles the ```cpp code blocks of Markdown files against the public headers.

    tests/docs/compile_doc_blocks.py [--cxx g++] [-I DIR]... FILE.md...

The rule for a ```cpp (or ```c++) block in the documentation:

- A block that defines `main` is a whole program and is compiled as it
  stands.
- Any other block is a fragment: statements as they would appear inside a
  function. It is compiled as the body of a function, after
  `#include <dtensor/dtensor.h>` and `using namespace dtensor;`; its own
  `#include` lines are moved above the function. Nothing else is declared
  for it: a fragment declares every variable it uses, so that a reader can
  copy it as it is.
- A fragment that defines functions or types at namespace scope starts with
  the line `// doc-test: namespace scope` and is compiled at namespace scope
  instead.
- A block whose first line is `// doc-test: not C++` is not compiled. It is
  meant only for a block that is deliberately not C++ (pseudo-code); a block
  that is meant to be C++ must compile.

Blocks fenced as anything else (```cmake, a bare ```) are not looked at.

Each block is checked with `CXX -std=c++20 -fsyntax-only -I DIR...` (no -I:
the include/ folder next to tests/). The fragments of one file share one
compiler run (one function each); programs get a run of their own. `#line`
directives make the compiler's messages name the Markdown file and line.

Exit status: 0 when every block compiles, 1 when one does not, 2 on bad
usage (no such file, no compiler, no block at all).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

NOT_CPP = "// doc-test: not C++"
NAMESPACE_SCOPE = "// doc-test: namespace scope"
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
MAIN = re.compile(r"\bint\s+main\s*\(")
INCLUDE = re.compile(r"^\s*#\s*include\b")


class Block:
    def __init__(self, path, first_line, lines):
        self.path = path
        self.first_line = first_line  # line number of the block's first code line
        self.lines = lines
        head = lines[0].strip() if lines else ""
        if head == NOT_CPP:
            self.kind = "skipped"
        elif any(MAIN.search(line) for line in lines):
            self.kind = "program"
        elif head == NAMESPACE_SCOPE:
            self.kind = "namespace"
        else:
            self.kind = "fragment"

    @property
    def last_line(self):
        return self.first_line + len(self.lines) - 1

    def where(self):
        return f"{self.path}:{self.first_line}"


def extract_blocks(path):
    """The ```cpp / ```c++ blocks of a Markdown file, with their line numbers."""
    with open(path, encoding="utf-8") as f:
        text = f.read().splitlines()
    blocks = []
    i = 0
    while i < len(text):
        m = FENCE.match(text[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        body = []
        j = i + 1
        while j < len(text):
            close = FENCE.match(text[j])
            if (close and close.group(2)[0] == fence[0] and len(close.group(2)) >= len(fence)
                    and not close.group(3)):
                break
            line = text[j]
            # Blocks inside list items are indented like their fence.
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            j += 1
        if lang in ("cpp", "c++"):
            blocks.append(Block(path, i + 2, body))
        i = j + 1
    return blocks


def line_directive(n, path):
    return f'#line {n} "{path}"'


def fragment_unit(blocks):
    """One translation unit for the fragments (and namespace-scope blocks) of a file."""
    includes = ["#include <dtensor/dtensor.h>"]
    parts = []
    for k, b in enumerate(blocks):
        body = []
        for n, line in enumerate(b.lines):
            if INCLUDE.match(line):
                includes += [line_directive(b.first_line + n, b.path), line]
                body.append("")  # keeps the line numbers of what follows
            else:
                body.append(line)
        if b.kind == "namespace":
            parts += [line_directive(b.first_line, b.path)] + body
        else:
            parts += [f"[[maybe_unused]] static void doc_block_{k}() {{",
                      line_directive(b.first_line, b.path)] + body + ["}"]
    return "\n".join(includes + ["using namespace dtensor;"] + parts) + "\n"


def program_unit(block):
    return "\n".join([line_directive(block.first_line, block.path)] + block.lines) + "\n"


def compile_unit(cxx, include_dirs, source):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(source)
        name = f.name
    try:
        cmd = [cxx, "-std=c++20", "-fsyntax-only"] + [f"-I{d}" for d in include_dirs] + [name]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return r.returncode, r.stdout
    finally:
        os.unlink(name)


def failing_blocks(blocks, output):
    """The blocks that the compiler's error lines point into."""
    hit = []
    for m in re.finditer(r"^(.*?):(\d+):(?:\d+:)? (?:fatal )?error", output, re.M):
        path, line = m.group(1), int(m.group(2))
        for b in blocks:
            if b.path == path and b.first_line <= line <= b.last_line and b not in hit:
                hit.append(b)
    return hit


def main():
    parser = argparse.ArgumentParser(
        description="Compile the ```cpp blocks of Markdown files (rules: see the script's top).")
    parser.add_argument("files", nargs="+", help="Markdown files")
    parser.add_argument("--cxx", default="g++", help="C++ compiler (default g++)")
    parser.add_argument("-I", dest="include_dirs", action="append", default=[],
                        help="include directory (repeatable; default: the repository's include/)")
    args = parser.parse_args()
    include_dirs = args.include_dirs or [
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")]

    units = []  # (label, blocks, source)
    total = 0
    for path in args.files:
        if not os.path.isfile(path):
            print(f"compile_doc_blocks: {path}: no such file", file=sys.stderr)
            return 2
        blocks = extract_blocks(path)
        total += len(blocks)
        for b in blocks:
            if b.kind == "skipped":
                print(f"skip {b.where()} (marked: not C++)")
        fragments = [b for b in blocks if b.kind in ("fragment", "namespace")]
        if fragments:
            units.append((f"{path}: {len(fragments)} fragment(s)", fragments,
                          fragment_unit(fragments)))
        for b in blocks:
            if b.kind == "program":
                units.append((f"{b.where()}: program", [b], program_unit(b)))
    if total == 0:
        print("compile_doc_blocks: no ```cpp block in " + ", ".join(args.files), file=sys.stderr)
        return 2

    failed = 0
    for label, blocks, source in units:
        try:
            rc, output = compile_unit(args.cxx, include_dirs, source)
        except OSError as e:
            print(f"compile_doc_blocks: cannot run {args.cxx}: {e}", file=sys.stderr)
            return 2
        if rc == 0:
            print(f"ok   {label}")
            continue
        bad = failing_blocks(blocks, output)
        failed += max(1, len(bad))
        names = ", ".join(b.where() for b in bad) or "(no block named: see the output)"
        print(f"FAIL {label}: {names}\n{output}")
    print(f"{total} block(s) in {len(args.files)} file(s); {failed} failed to compile")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
