#!/usr/bin/env bash
# Prints the import graph of src/core and of src/server (or of the folders
# under src/ given as arguments): one line per module, the modules it imports
# with `use`, then the import cycles among them. Exits 1 if there is a cycle,
# so a layering check can run it.
#
# An edge comes from a `use` (or `pub use`) of `crate::…`, `super::…`,
# `self::…` or of a child module by its bare name; the core reaches its
# siblings with `super::`, so `crate::` alone would miss most of it. Paths
# written out in code without a `use` are not edges. A module is a file;
# inline modules (`mod tests { … }`) count as the file they are in, so their
# `use super::*` is no edge. Test-only imports count like the others.
#
#   scripts/import-graph.sh                  # src/core and src/server
#   scripts/import-graph.sh src/core         # the core only
set -euo pipefail

cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || set -- src/core src/server

exec python3 - "$@" <<'PY'
import os
import re
import sys

SRC = "src"


def module_of(path):
    """crate-relative module path of a source file: src/core/holders/mod.rs -> core::holders."""
    rel = os.path.relpath(path, SRC)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod" or rel == ["lib"]:
        rel = rel[:-1]
    return "::".join(rel)


# Comments, strings and char literals, so braces and `use` inside them are not read.
NOISE = re.compile(
    r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\\\'\n])\'',
    re.S,
)
TOKENS = re.compile(r"\bmod\s+(\w+)\s*\{|\{|\}|\buse\s+([^;]+);")


def split_tree(text):
    """`a::{b, c::{d}}` -> ["a::b", "a::c::d"]."""
    text = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", text))
    brace = text.find("{")
    if brace < 0:
        return [re.sub(r"(::)?\*$", "", text)]
    prefix, inner = text[:brace], text[brace + 1 : text.rindex("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in filter(None, parts):
        for sub in split_tree(part):
            sub = re.sub(r"(^|::)self$", "", sub)
            out.append(prefix + sub if sub else prefix.rstrip(":"))
    return out


files = {}
for root, _, names in os.walk(SRC):
    for name in names:
        if name.endswith(".rs"):
            path = os.path.join(root, name)
            files[module_of(path)] = path
modules = set(files)


def children(module):
    depth = module.count("::") + 1 if module else 0
    return {
        m.split("::")[-1]
        for m in modules
        if m.startswith(module + "::" if module else "") and m.count("::") + 1 == depth + 1
    }


def resolve(here, path):
    """The file module a `use` path names, or None for another crate."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    base = here.split("::") if here else []
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif segs[0] not in children("::".join(base)):
        return None  # std, another crate, or a name declared in this module
    full = base + segs
    for n in range(len(full), -1, -1):
        candidate = "::".join(full[:n])
        if candidate in modules:
            return candidate
    return None


def imports(module):
    text = NOISE.sub(" ", open(files[module], encoding="utf-8").read())
    inline, depth, found = [], 0, set()
    for m in TOKENS.finditer(text):
        if m.group(1):
            depth += 1
            inline.append((m.group(1), depth))
        elif m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            if inline and inline[-1][1] == depth:
                inline.pop()
            depth -= 1
        else:
            here = "::".join(filter(None, [module] + [name for name, _ in inline]))
            for path in split_tree(m.group(2)):
                target = resolve(here, path)
                if target is not None and target != module:
                    found.add(target)
    return found


graph = {m: imports(m) for m in modules}


def cycles(nodes):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def simple_cycles(scc, limit=20):
    """The cycles of a component, each from its first module in name order."""
    out = []
    for i, start in enumerate(scc):
        allowed = set(scc[i:])

        def walk(path):
            for w in sorted(graph[path[-1]] & allowed):
                if len(out) >= limit:
                    return
                if w == start:
                    out.append(path + [start])
                elif w not in path:
                    walk(path + [w])

        walk([start])
    return out


def owner(cycle):
    """The module whose own tree holds the whole cycle, if it is one of its members."""
    for m in cycle:
        if all(n == m or n.startswith(m + "::") for n in cycle):
            return m
    return None


found_any = False
for folder in sys.argv[1:]:
    top = module_of(os.path.join(folder.rstrip("/"), "mod.rs"))
    tree = {m for m in modules if m == top or m.startswith(top + "::")}
    if not tree:
        sys.exit(f"import-graph: no Rust modules under {folder}")
    print(f"== {folder}: {len(tree)} modules ==")
    for m in sorted(tree):
        print(f"{m} -> {', '.join(sorted(graph[m])) or '(nothing)'}")
    found = cycles(tree)
    found_any = found_any or bool(found)
    if not found:
        print("cycles: none")
    for scc in found:
        for cycle in simple_cycles(scc):
            inside = owner(cycle)
            note = f"  (within {inside} and its submodules)" if inside else ""
            print(f"cycle: {' -> '.join(cycle)}{note}")
    print()
sys.exit(1 if found_any else 0)
PY
