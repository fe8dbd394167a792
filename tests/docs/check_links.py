#!/usr/bin/env python3
"""Every relative link of the project's Markdown resolves: the file exists
and, where the link names a heading (#anchor), the file has that heading
(GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens,
a repeated heading numbered -1, -2, ...).

Usage: check_links.py FILE.md...   (exit 1 and one line per broken link)
"""
import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose_lines(path: Path):
    """(line number, line) for every line outside fenced code blocks."""
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            yield number, line


def anchors(path: Path) -> set:
    found, seen = set(), {}
    for _, line in prose_lines(path):
        if not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        text = re.sub(r"`([^`]*)`", r"\1", text)  # code spans keep their text
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links their label
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(path: Path):
    for number, line in prose_lines(path):
        line = re.sub(r"`[^`]*`", "", line)  # links inside code spans are text
        for target in LINK.findall(line):
            yield number, target


def main(files) -> int:
    broken = []
    cache = {}
    for name in files:
        path = Path(name)
        for number, target in links(path):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else (path.parent / file_part)
            if not dest.exists():
                broken.append(f"{path}:{number}: {target}: no such file")
                continue
            if anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    broken.append(f"{path}:{number}: {target}: no heading #{anchor}")
    for b in broken:
        print(b)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
