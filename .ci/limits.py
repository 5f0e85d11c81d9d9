#!/usr/bin/env python3
"""The size gates (docs/architecture.md, "Limits"), each failing with what passed it:

- files: every `.rs` file under src/application at most 500 lines, under src/adapters 600;
- adapter functions over 60 lines: only those in .ci/long_functions.txt, none longer than
  listed there, and no stale entry (the list only shrinks: a function that got shorter is
  struck from it);
- ports: a trait under src/application/ports at most 8 methods (split a capability);
- lib.rs's Layout names every module folder and file of src/, and every job's name;
- docs/architecture.md's table of the worker's loops has a row for every job;
- the edges name their causes by type: no `Result<_, String>` in src/adapters or the ports
  (`BrokenAnswer`, `SetupError`, `TossError`, `RefusedHost`, the ports' errors), except where
  the text is a message's dead-letter reason (the wire contracts and consumers under
  src/adapters/messaging; their connection set-up is typed too).

`python3 .ci/limits.py` from the repository's root.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from function_length import long_functions  # noqa: E402

FILE_LIMITS = {'src/application': 500, 'src/adapters': 600}
FUNCTION_LIMIT = 60
PORT_METHODS = 8
LIST = '.ci/long_functions.txt'

failures = []


def rust_files(root):
    for d, _, fs in os.walk(root):
        for f in sorted(fs):
            if f.endswith('.rs'):
                yield os.path.join(d, f)


def files():
    for root, limit in FILE_LIMITS.items():
        for p in rust_files(root):
            n = len(open(p).read().rstrip('\n').split('\n'))
            if n > limit:
                failures.append(f"{p} is {n} lines (at most {limit} under {root})")


def adapter_functions():
    listed = {}
    for line in open(LIST):
        line = line.split('#')[0].strip()
        if line:
            where, n = line.rsplit(' ', 1)
            listed[where] = int(n)
    found = {f"{p}:{name}": n for n, p, name, _ in long_functions('src/adapters', FUNCTION_LIMIT)}
    for where, n in sorted(found.items()):
        if where not in listed:
            failures.append(f"{where} is {n} lines: a new adapter function over {FUNCTION_LIMIT} (split it)")
        elif n > listed[where]:
            failures.append(f"{where} grew to {n} lines ({LIST} allows {listed[where]}; the list only shrinks)")
    for where, n in sorted(listed.items()):
        if where not in found:
            failures.append(f"{where} is no longer over {FUNCTION_LIMIT} lines: strike it from {LIST}")
        elif found[where] < n:
            failures.append(f"{where} shrank to {found[where]} lines: write that in {LIST}")


def ports():
    for p in rust_files('src/application/ports'):
        text = open(p).read().split('#[cfg(test)]')[0]
        for m in re.finditer(r'^pub trait (\w+)[^{]*\{\n(.*?)^\}', text, re.S | re.M):
            methods = re.findall(r'^    (?:async )?fn \w+', m.group(2), re.M)
            if len(methods) > PORT_METHODS:
                failures.append(f"{p}: port {m.group(1)} has {len(methods)} methods (at most {PORT_METHODS})")


def job_names():
    names = []
    for p in rust_files('src'):
        text = open(p).read().split('#[cfg(test)]')[0]
        for m in re.finditer(r'impl (?:crate::application::jobs::)?PeriodicJob for \w+ \{\s*fn name\(&self\) -> &\'static str \{\s*"([^"]+)"', text):
            names.append(m.group(1))
    return names


def layout():
    lib = open('src/lib.rs').read()
    doc = '\n'.join(line[3:] for line in lib.split('\n') if line.startswith('//!'))
    named = set(re.findall(r'`([\w/.]+?)/?`', doc))
    for layer in ('domain', 'application', 'adapters'):
        for entry in sorted(os.listdir(f'src/{layer}')):
            stem = entry[:-3] if entry.endswith('.rs') else entry
            if stem in ('mod', 'tests') or entry.startswith('.'):
                continue
            if stem not in named:
                failures.append(f"src/lib.rs's Layout does not name src/{layer}/{entry}")
            sub = f'src/{layer}/{entry}'
            if layer == 'adapters' and os.path.isdir(sub):
                for inner in sorted(os.listdir(sub)):
                    istem = inner[:-3] if inner.endswith('.rs') else inner
                    if istem in ('mod', 'tests'):
                        continue
                    if istem not in named:
                        failures.append(f"src/lib.rs's Layout does not name {sub}/{inner}")
    folders = set(re.findall(r'`(\w+)/`', doc))
    every = {d for d, _, _ in os.walk('src')}
    for folder in sorted(folders):
        if not any(path.endswith('/' + folder) for path in every) and not os.path.isdir(folder):
            failures.append(f"src/lib.rs's Layout names a folder `{folder}/` that src/ does not have")
    architecture = open('docs/architecture.md').read()
    for name in job_names():
        if f'"{name}"' not in doc:
            failures.append(f'src/lib.rs does not list the job "{name}"')
        if f'| {name} |' not in architecture:
            failures.append(f'docs/architecture.md does not list the job "{name}"')


# Where an `Err` of text is the message's dead-letter reason (what goes on the DLQ): the
# wire contracts and the consumers that read headers. Their connection set-up is not.
DEAD_LETTER_READERS = 'src/adapters/messaging/'
TYPED_THERE_TOO = ('src/adapters/messaging/amqp/connection.rs',)


def typed_edges():
    for root in ('src/adapters', 'src/application/ports'):
        for p in rust_files(root):
            if p.startswith(DEAD_LETTER_READERS) and p not in TYPED_THERE_TOO:
                continue
            for n, line in enumerate(open(p).read().split('\n'), 1):
                if re.search(r'Result<[^;{]*,\s*String>', line):
                    failures.append(f"{p}:{n}: a cause as text at an edge (a typed error, please)")


files()
typed_edges()
adapter_functions()
ports()
layout()
for f in failures:
    print(f)
if failures:
    sys.exit(1)
print("limits: files, typed edges, adapter functions, ports, lib.rs's Layout and the jobs hold")
