#!/usr/bin/env python3
"""docs/architecture.md's file map against src/, file for file.

`--check` (CI): every `.rs` file under src/ has its row under "## Every file", and every
row names a file that exists; prints what differs and fails. `--draft` prints the map drawn
from each file's own `//!` summary (its first sentence), to paste and edit.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DOC = os.path.join(ROOT, "docs", "architecture.md")
HEADING = "## Every file"


def files():
    out = set()
    for dirpath, _, names in os.walk(os.path.join(ROOT, "src")):
        for name in names:
            if name.endswith(".rs"):
                out.add(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return out


def mapped():
    text = open(DOC, encoding="utf-8").read()
    if HEADING not in text:
        sys.exit(f"docs/architecture.md has no '{HEADING}' section")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    folder, rows = None, []
    for line in section.splitlines():
        m = re.match(r"^### `(src/[^`]*)`", line)
        if m:
            folder = m.group(1).rstrip("/")
            continue
        m = re.match(r"^\| `([^`]+\.rs)` \|", line)
        if m:
            if folder is None:
                sys.exit(f"a row before any folder heading: {line}")
            rows.append(f"{folder}/{m.group(1)}")
    return rows


def summary(path):
    lines = []
    for line in open(os.path.join(ROOT, path), encoding="utf-8"):
        if not line.startswith("//!"):
            break
        text = line[3:].strip()
        if not text:
            break
        lines.append(text)
    text = " ".join(lines)
    m = re.match(r"(.+?\.)(\s|$)", text)
    text = m.group(1) if m else text
    if len(text) > 240:
        text = text[:240].rsplit(" ", 1)[0] + " …"
    return text.replace("|", "\\|") or "tests"


def draft():
    by_folder = {}
    for path in sorted(files()):
        by_folder.setdefault(os.path.dirname(path), []).append(path)
    for folder in sorted(by_folder):
        print(f"\n### `{folder}/`\n\n| file | holds |\n|---|---|")
        for path in by_folder[folder]:
            print(f"| `{os.path.basename(path)}` | {summary(path)} |")


def check():
    rows = mapped()
    have = files()
    twice = sorted({r for r in rows if rows.count(r) > 1})
    missing = sorted(have - set(rows))
    stale = sorted(set(rows) - have)
    for path in missing:
        print(f"not in docs/architecture.md: {path}")
    for path in stale:
        print(f"in docs/architecture.md, not in src/: {path}")
    for path in twice:
        print(f"twice in docs/architecture.md: {path}")
    if missing or stale or twice:
        sys.exit(1)
    print(f"docs/architecture.md maps all {len(have)} files of src/")


if __name__ == "__main__":
    draft() if "--draft" in sys.argv else check()
