#!/usr/bin/env python3
"""Fails when a module of a Rust crate imports, directly or through others, a module that
imports it (docs/ARCHITECTURE.md: no import circles). Run by tests/all.sh.

Modules are files (`foo.rs`, `foo/mod.rs`); an edge A -> B exists when A names a path into B
(`use crate::b::..`, `crate::b::..`, `super::..`, `self::..`, or a relative `b::..` naming a
child, resolved to B's file). The crate root (lib.rs/main.rs) is the crate's facade: its
re-exports are not counted as dependencies. `mod b;`
declarations are not edges (a parent owns its children); `#[cfg(test)]` test modules are
skipped, since tests may reach anywhere.

    tests/arch/import_cycles.py broker/store broker/server operator ...
"""
import re
import sys
from pathlib import Path

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
RELATIVE_RE = re.compile(r"(?<![A-Za-z0-9_:])([a-z_][a-z0-9_]*)::")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}", re.S)


def module_files(src: Path):
    """Maps module path tuples to files for a crate's src/ (lib.rs and main.rs are roots)."""
    mods = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts in (["lib"], ["main"]):
            parts = []
        if parts and parts[-1] == "tests":
            continue  # unit-test modules
        mods.setdefault(tuple(parts), f)
    return mods


def strip(text: str) -> str:
    """Drops comments, string literals and #[cfg(test)] blocks."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    out, i = [], 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k = text.find("{", j)
        semi = text.find(";", j)
        if k < 0 or (0 <= semi < k):
            i = semi + 1
            continue
        depth, k2 = 0, k
        while k2 < len(text):
            if text[k2] == "{":
                depth += 1
            elif text[k2] == "}":
                depth -= 1
                if depth == 0:
                    break
            k2 += 1
        i = k2 + 1
    return "".join(out)


def resolve(mods, here, anchor, segs):
    """The deepest module named by anchor::segs seen from module `here`."""
    if anchor == "crate":
        base = []
    elif anchor == "self":
        base = list(here)
    else:
        base = list(here)
        while segs and segs[0] == "super":
            segs = segs[1:]
            base = base[:-1]
        base = base[:-1]
    path = base + [s for s in segs if s != "super"]
    best = None
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            best = tuple(path[:n])
            break
    return best


def edges_of(mods, here, text):
    out = set()
    for m in USE_GROUP_RE.finditer(text):
        anchor, prefix, inner = m.group(1), m.group(2), m.group(3)
        pre = [s for s in prefix.split("::") if s]
        for item in re.split(r"[,{}]", inner):
            item = item.strip().split(" as ")[0].strip()
            if not item or item == "self":
                target = resolve(mods, here, anchor, pre)
            else:
                target = resolve(mods, here, anchor, pre + item.split("::"))
            if target is not None:
                out.add(target)
    for m in PATH_RE.finditer(text):
        anchor = m.group(1)
        segs = [s for s in m.group(2).split("::") if s]
        target = resolve(mods, here, anchor, segs)
        if target is not None:
            out.add(target)
    # Relative paths (`child::item`, `use child::Item;`) name the module's own children.
    for m in RELATIVE_RE.finditer(text):
        child = here + (m.group(1),)
        if child in mods:
            out.add(child)
    return {t for t in out if t != here}


def find_cycle(graph):
    WHITE, GREY, BLACK = 0, 1, 2
    color = {n: WHITE for n in graph}
    stack = []

    def visit(n):
        color[n] = GREY
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if color.get(m, WHITE) == GREY:
                return stack[stack.index(m):] + [m]
            if color.get(m, WHITE) == WHITE:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        color[n] = BLACK
        return None

    for n in sorted(graph):
        if color[n] == WHITE:
            c = visit(n)
            if c:
                return c
    return None


def name(m):
    return "crate::" + "::".join(m) if m else "crate"


def main(crates):
    failed = False
    for crate in crates:
        src = Path(crate) / "src"
        mods = module_files(src)
        graph = {}
        for here, f in mods.items():
            edges = edges_of(mods, here, strip(f.read_text()))
            # The crate root only declares and re-exports: its edges are not dependencies.
            graph[here] = set() if here == () else {e for e in edges if e != ()}
            if here != () and () in edges_of(mods, here, strip(f.read_text())):
                graph[here].add(())
        cycle = find_cycle(graph)
        if cycle:
            failed = True
            print(f"FAIL {crate}: import circle " + " -> ".join(name(m) for m in cycle))
        else:
            print(f"ok   {crate}: {len(mods)} modules, no import circle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
