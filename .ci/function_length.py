#!/usr/bin/env python3
"""Fails when a function under a folder is longer than a limit (its signature to its closing
brace): `python3 .ci/function_length.py src/application 60`. A file's own `#[cfg(test)]`
module is not counted; its tests in a file of their own are.
"""
import os
import re
import sys

FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(async\s+)?fn\s+(\w+)')


def long_functions(root, limit):
    """(lines, path, name, first line) of every function under `root` longer than `limit`."""
    out = []
    for d, _, fs in os.walk(root):
        for f in fs:
            if not f.endswith('.rs'):
                continue
            p = os.path.join(d, f)
            lines = open(p).read().split('\n')
            i = 0
            while i < len(lines):
                line = lines[i]
                if line.startswith('#[cfg(test)]'):
                    break
                m = FN.match(line)
                if m:
                    indent = len(m.group(1))
                    name = m.group(5)
                    # the line that opens its body, then the brace that closes it at its indent
                    j = i
                    while j < len(lines) and not lines[j].rstrip().endswith('{') and not lines[j].rstrip().endswith(';'):
                        j += 1
                    if j < len(lines) and lines[j].rstrip().endswith(';'):
                        i = j + 1
                        continue
                    k = j + 1
                    while k < len(lines) and not (lines[k].startswith(' ' * indent + '}') and len(lines[k].rstrip()) == indent + 1):
                        k += 1
                    n = k - i + 1
                    if n > limit:
                        out.append((n, p, name, i + 1))
                    i = k + 1
                    continue
                i += 1
    return sorted(out, reverse=True)


if __name__ == '__main__':
    root, limit = sys.argv[1], int(sys.argv[2])
    found = long_functions(root, limit)
    for n, p, name, line in found:
        print(f"{p}:{line}: {name} is {n} lines (at most {limit})")
    if found:
        sys.exit(1)
    print(f"{root}: no function over {limit} lines")
