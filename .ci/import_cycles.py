#!/usr/bin/env python3
"""Fails when two or more files of one crate of the workspace import each other in a cycle.

Every crate's source folder is checked: the service (`src/`, its `bin/` aside: each binary
is a crate of one file), the bench harness, the fake Toss and the migrations. Each
`use crate::a::b::...` or `use super::...` (and `crate::`/`super::` paths in code) is
resolved to the file of the longest module path that exists; a file depending on its own
child module (mod.rs on its children) does not count. Prints every cycle found.
"""
import os
import re
import sys

WORKSPACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["src", "bench/src", "fake-toss/src", "migrations/src"]


def cycles(root):
    def module_of(path):
        rel = os.path.relpath(path, root)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main") and (rel[-1] == "mod" or len(rel) == 1):
            rel = rel[:-1]
        return tuple(rel)

    files = {}
    for dirpath, _, names in os.walk(root):
        if os.path.relpath(dirpath, root).split(os.sep)[0] == "bin":
            continue
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[module_of(path)] = path

    def resolve(parts):
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in files:
                return tuple(parts[:n])
        return None

    edges = {m: set() for m in files}
    for module, path in files.items():
        text = open(path, encoding="utf-8").read()
        # Only non-test code: cut at the first `#[cfg(test)]` module.
        text = text.split("#[cfg(test)]\nmod tests")[0]
        for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
            head, tail = m.group(1), m.group(2).strip(":").split("::")
            if head == "crate":
                target = resolve(tail)
            else:
                # `super` is the parent module (for a mod.rs, the module above its folder).
                target = resolve(list(module[:-1]) + tail)
            if target and target != module and target[: len(module)] != module:
                edges[module].add(target)

    # Strongly connected components (Tarjan).
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in edges:
        if v not in index:
            strong(v)
    # A module's parent `mod.rs` re-exporting it is not a cycle: drop components where
    # every module is an ancestor or descendant of another.
    real = []
    for comp in sccs:
        names = ["::".join(c) or "crate root" for c in comp]
        if all(any(a != b and (b[: len(a)] == a) for b in comp) for a in comp if a):
            continue
        real.append(sorted(names))
    return real


sys.setrecursionlimit(10000)
found = 0
for crate in CRATES:
    root = os.path.join(WORKSPACE, crate)
    if not os.path.isdir(root):
        print(f"import cycles: no {crate}", file=sys.stderr)
        sys.exit(1)
    for comp in cycles(root):
        found += 1
        print(f"import cycle in {crate}:", " <-> ".join(comp))
    if not found:
        print(f"{crate}: no import cycle")
sys.exit(1 if found else 0)
