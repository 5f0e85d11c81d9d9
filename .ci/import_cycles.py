#!/usr/bin/env python3
"""Fails when two or more files under src/ import each other in a cycle.

Each `use crate::a::b::...` or `use super::...` (and `crate::`/`super::` paths in code) is
resolved to the file of the longest module path that exists; a file depending on its own
child module (mod.rs on its children) does not count. Prints every cycle found.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


files = {}
for dirpath, _, names in os.walk(ROOT):
    if os.sep + "bin" in dirpath:
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
    is_dir = os.path.basename(path) == "mod.rs"
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
        head, tail = m.group(1), m.group(2).strip(":").split("::")
        if head == "crate":
            target = resolve(tail)
        else:
            # `super` is the parent module (for a mod.rs, the module above its folder).
            parent = list(module[:-1])
            target = resolve(parent + tail)
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


sys.setrecursionlimit(10000)
for v in edges:
    if v not in index:
        strong(v)
# A module's parent `mod.rs` re-exporting it is not a cycle: drop pairs where one is an
# ancestor of the other.
real = []
for comp in sccs:
    names = ["::".join(c) or "lib" for c in comp]
    if all(any(a != b and (b[: len(a)] == a) for b in comp) for a in comp if a):
        continue
    real.append(sorted(names))
for comp in real:
    print("import cycle:", " <-> ".join(comp))
sys.exit(1 if real else 0)
