#!/usr/bin/env python3
"""The house's numbers (README, "The layout"), read from the import graph.

rooms: top-level modules of src/; floors: the longest chain of rooms that
import one another (a room with no crate imports is floor 1); arrows up:
imports against tests/it/layers.rs's order; circles: groups of files that
import one another round a cycle (Tarjan's strongly connected components over
the file graph); largest room: its share of src/'s lines.
Usage: python3 scripts/layout.py [SRC]   (default: src)
"""
import os, re, sys

src = sys.argv[1] if len(sys.argv) > 1 else "src"
files = {}
for root, _, names in os.walk(src):
    for n in names:
        if n.endswith(".rs") or n.endswith(".cpp"):
            p = os.path.join(root, n)
            files[p] = open(p, encoding="utf-8").read()

def module_of(path):
    rel = os.path.relpath(path, src)
    parts = rel[:-3].split(os.sep) if rel.endswith(".rs") else rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts

def room_of(path):
    parts = module_of(path)
    return parts[0] if parts else "lib"

by_module = {tuple(module_of(p)): p for p in files if p.endswith(".rs")}
edges = {p: set() for p in files}
room_edges = {}
for p, text in files.items():
    here = module_of(p)
    for m in re.finditer(r"\b(crate|super)::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
        parts = m.group(2).split("::")
        if m.group(1) == "super":
            parts = here[:-1] + parts
        target = None
        for k in range(len(parts), 0, -1):
            if tuple(parts[:k]) in by_module:
                target = by_module[tuple(parts[:k])]
                break
        if target and target != p:
            edges[p].add(target)
            a, b = room_of(p), room_of(target)
            if a != b and a not in ("lib", "main"):
                room_edges.setdefault(a, set()).add(b)

rooms = sorted({room_of(p) for p in files} - {"lib", "main"})
memo = {}
def floor(r, seen=()):
    if r in memo:
        return memo[r]
    if r in seen:
        return 0
    f = 1 + max([floor(d, seen + (r,)) for d in room_edges.get(r, ())] or [0])
    memo[r] = f
    return f

layers_rs = open(os.path.join(os.path.dirname(src) or ".", "tests/it/layers.rs")).read()
order = re.findall(r'"([a-z_:]+)"', layers_rs.split("];")[0])
def rank(mod):
    # the longest LAYERS entry that is a prefix of the module path
    best = None
    for i, l in enumerate(order):
        lp = l.split("::")
        if mod[: len(lp)] == lp and (best is None or len(lp) > len(order[best].split("::"))):
            best = i
    return best
up = 0
for p, ts in edges.items():
    rp = rank(module_of(p))
    for t in ts:
        rt = rank(module_of(t))
        if rp is not None and rt is not None and rt > rp:
            up += 1

index = {}; low = {}; stack = []; on = set(); sccs = []; counter = [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(comp)
for v in files:
    if v not in index:
        strong(v)

lines = {r: 0 for r in rooms}
loose = 0
for p, text in files.items():
    r = room_of(p)
    if r in lines:
        lines[r] += text.count("\n")
    if os.path.dirname(p) == src and r not in ("lib", "main"):
        loose += 1
total = sum(lines.values())
big = max(rooms, key=lambda r: lines[r])
print(f"rooms: {len(rooms)} ({loose} loose files at {src}/)")
print(f"floors: {max(floor(r) for r in rooms)}")
print(f"arrows up: {up}")
print(f"circles: {len(sccs)} ({sum(len(c) for c in sccs)} files)")
for c in sccs:
    print("   ", " -> ".join(sorted(os.path.relpath(x, src) for x in c)))
print(f"largest room: {big}/ {lines[big]} of {total} lines ({100 * lines[big] / total:.1f}%)")
