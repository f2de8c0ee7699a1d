#!/usr/bin/env python3
"""No import cycles between the modules of any crate.

For every crate under crates/, reads the module tree from lib.rs/main.rs
(`mod x;` -> x.rs or x/mod.rs; modules under `#[cfg(test)]` are left out)
and every path each module names: `use` trees (nested groups, `self`,
`super::super::`, aliases) and paths in code (`crate::a::f()`,
`super::b::T`, `self::c::X`, `$crate::`). Comments, doc comments, string
literals and `#[cfg(test)]` items are ignored. A path through a re-export
(`pub use node::Node` in lib.rs, then `crate::Node`) counts as a reference
to the module that defines the item.

A reference from module a/x to a/y is an edge x -> y among the children of
a (the siblings under their closest common parent); a cycle is a strongly
connected component of those edges. Each cycle is printed with one example
reference (file:line) per edge. Exit 1 if any cycle is not in KNOWN.

Usage: scripts/check-import-cycles.py [--layers] [crate-dir ...]   (default: crates/*)
--layers also prints each module's children by layer (1: uses no sibling).
"""
import bisect
import os
import re
import sys

# Cycles known and left for now. A (crate, parent module) pair: cycles
# among that module's children are printed but do not fail. A (crate,
# parent, members): a cycle among those members (or some of them) is
# printed but does not fail; one with any other member does. Shrink or
# remove an entry as its cycles go.
KNOWN = set()  # none left


LAYERS = False
KNOWN_SEEN = []
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


LITERAL = re.compile(
    r"//[^\n]*"  # line and doc comments
    r"|/\*[\s\S]*?\*/"  # block comments (not nested)
    r'|(?<![\w])b?r(#*)"[\s\S]*?"\1'  # raw strings
    r'|b?"(?:\\[\s\S]|[^"\\])*"'  # strings
    r"|'(?:\\[^']{1,10}|[^\\'\n])'"  # chars, not lifetimes
)


def strip(src):
    """Comments and string/char literals become spaces (newlines kept)."""
    return LITERAL.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), src)


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")


def drop_test_items(src):
    """Blanks every item under #[cfg(test)]; returns (src, test module names)."""
    test_mods = set()
    while m := CFG_TEST.search(src):
        i = m.end()
        # further attributes
        while a := re.match(r"\s*#\s*\[", src[i:]):
            j, depth = i + a.end(), 1
            while depth:
                depth += {"[": 1, "]": -1}.get(src[j], 0)
                j += 1
            i = j
        if mm := re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", src[i:]):
            test_mods.add(mm.group(1))
        j, depth = i, 0
        while j < len(src):
            ch = src[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == ";" and depth == 0:
                j += 1
                break
            elif ch == "{" and depth == 0:
                d = 0
                while j < len(src):
                    d += {"{": 1, "}": -1}.get(src[j], 0)
                    j += 1
                    if d == 0:
                        break
                break
            j += 1
        src = src[:m.start()] + re.sub(r"[^\n]", " ", src[m.start():j]) + src[j:]
    return src, test_mods


TOKEN = re.compile(r"\$?" + IDENT + r"|::|[{},;*]|\S")


class Module:
    def __init__(self, path, file, text):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.text = text
        starts = [i for i, c in enumerate(text) if c == "\n"]
        self.toks = [(t.group(), bisect.bisect(starts, t.start()) + 1) for t in TOKEN.finditer(text)]
        self.imports = {}  # bound name -> full path (tuple)
        self.globs = []  # full paths of `use x::*`
        self.defs = set(re.findall(
            r"\b(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+(" + IDENT + r")", text))
        self.refs = []  # (full path, line)


def load_crate(src_dir):
    mods = {}
    root = next(f for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src_dir, f)))

    def load(path, file, child_dir):
        text, test_mods = drop_test_items(strip(open(file).read()))
        mods[path] = Module(path, file, text)
        for name in re.findall(r"(?:^|[;}\s])mod\s+(" + IDENT + r")\s*;", text):
            if name in test_mods:
                continue
            flat = os.path.join(child_dir, name + ".rs")
            nested = os.path.join(child_dir, name, "mod.rs")
            f = flat if os.path.exists(flat) else nested
            if os.path.exists(f):
                load(path + (name,), f, os.path.join(child_dir, name))

    load((), os.path.join(src_dir, root), src_dir)
    return mods


def parse_tree(toks, i, prefix, cur):
    """Parses a path tree at toks[i]; returns ([(path, bound name, line)], next i)."""
    out = []
    path = list(prefix)
    bound = None
    first = True
    while i < len(toks):
        t, line = toks[i]
        if t == "{":
            i += 1
            while i < len(toks) and toks[i][0] != "}":
                sub, i = parse_tree(toks, i, path, cur)
                out += sub
                if i < len(toks) and toks[i][0] == ",":
                    i += 1
            return out, i + 1
        if t == "*":
            out.append((tuple(path), "*", line))
            return out, i + 1
        if not re.fullmatch(r"\$?" + IDENT, t):
            break
        if t in ("crate", "$crate") and first:
            path = []
        elif t == "super":
            path = list(cur if first else path)[:-1]
        elif t == "self":
            if first and not prefix:
                path = list(cur)
            bound = path[-1] if path else None
        else:
            path.append(t)
            bound = t
        first = False
        i += 1
        if i < len(toks) and toks[i][0] == "::":
            i += 1
            continue
        break
    if i < len(toks) and toks[i][0] == "as":
        bound = toks[i + 1][0]
        i += 2
    out.append((tuple(path), bound, toks[i - 1][1] if i else 0))
    return out, i


def scan(mods):
    for m in mods.values():
        toks = m.toks
        i = 0
        while i < len(toks):
            t = toks[i][0]
            prev = toks[i - 1][0] if i else ""
            is_use = t == "use"
            starts = t in ("crate", "$crate", "super", "self") and i + 1 < len(toks) and toks[i + 1][0] == "::"
            if is_use:
                j = i + 1
                if j < len(toks) and toks[j][0] == "::":
                    j += 1
                first = toks[j][0] if j < len(toks) else ""
                if first in ("crate", "$crate", "super", "self", "{") or m.path + (first,) in mods:
                    prefix = m.path if (first == "{" or m.path + (first,) in mods) else ()
                    items, i = parse_tree(toks, j, prefix, m.path)
                    for path, bound, line in items:
                        if bound == "*":
                            m.globs.append(path)
                        elif bound:
                            m.imports[bound] = path
                        m.refs.append((path, line))
                    continue
                i = j
                continue
            if starts and prev != "::" and not (prev == "in" and i >= 2 and toks[i - 2][0] == "("):
                items, i = parse_tree(toks, i, (), m.path)
                for path, _, line in items:
                    m.refs.append((path, line))
                continue
            i += 1


def resolve(mods, path, depth=0):
    """The module that defines what `path` names."""
    m = ()
    for k, seg in enumerate(path):
        if m + (seg,) in mods:
            m = m + (seg,)
            continue
        if depth > 8:
            return m
        mod = mods[m]
        if seg in mod.defs:
            return m
        if seg in mod.imports and mod.imports[seg] != m + (seg,):
            return resolve(mods, mod.imports[seg] + tuple(path[k + 1:]), depth + 1)
        for g in mod.globs:
            target = resolve(mods, g, depth + 1)
            if g and target in mods and (seg in mods[target].defs or seg in mods[target].imports
                                         or target + (seg,) in mods):
                return resolve(mods, g + tuple(path[k:]), depth + 1)
        return m
    return m


def sccs(graph):
    index, low, stack, on, res = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
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
                res.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return res


def check_crate(crate_dir):
    name = os.path.basename(os.path.normpath(crate_dir))
    mods = load_crate(os.path.join(crate_dir, "src"))
    scan(mods)
    # (parent, from child, to child) -> first example (file, line, path)
    edges = {}
    for m in mods.values():
        for path, line in m.refs:
            target = resolve(mods, path)
            a, b = m.path, target
            k = 0
            while k < len(a) and k < len(b) and a[k] == b[k]:
                k += 1
            if k >= len(a) or k >= len(b):
                continue  # a parent and its descendant
            edges.setdefault((a[:k], a[k], b[k]), (m.file, line, "::".join(path) or "crate"))
    by_parent = {}
    for parent, x, y in edges:
        by_parent.setdefault(parent, {}).setdefault(x, set()).add(y)
    if LAYERS:
        for parent in sorted(by_parent):
            g = by_parent[parent]
            names = set(g) | {y for ys in g.values() for y in ys}
            level = {}

            def depth(x, seen=()):
                if x not in level:
                    below = [depth(y, seen + (x,)) for y in g.get(x, ()) if y not in seen]
                    level[x] = 1 + max(below, default=0)
                return level[x]

            print(f"{name} {'::'.join(parent) or '(crate root)'}:")
            for k in range(1, max(map(depth, names)) + 1):
                print(f"  {k}. {', '.join(sorted(x for x in names if level[x] == k))}")
    failed = 0
    for parent in sorted(by_parent):
        for comp in sccs(by_parent[parent]):
            where = "::".join(parent) or "(crate root)"
            where_ = "::".join(parent)
            known = (name, where_) in KNOWN or any(
                len(k) == 3 and k[:2] == (name, where_) and set(comp) <= k[2] for k in KNOWN)
            label = "known cycle (KNOWN in this script)" if known else "import cycle"
            print(f"{name}: {label} among the modules of {where}: {', '.join(comp)}")
            for x in comp:
                for y in sorted(by_parent[parent].get(x, ())):
                    if y in comp:
                        f, line, p = edges[(parent, x, y)]
                        print(f"  {x} -> {y}   {f}:{line}  ({p})")
            failed += not known
            if known:
                KNOWN_SEEN.append(comp)
    return failed


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    global LAYERS
    args = sys.argv[1:]
    LAYERS = "--layers" in args
    args = [a for a in args if a != "--layers"]
    crates = args or sorted(
        os.path.join("crates", c) for c in os.listdir("crates") if os.path.isdir(os.path.join("crates", c, "src")))
    failed = sum(check_crate(c) for c in crates)
    if failed:
        print(f"{failed} import cycle(s): move the item that points back into the lower module "
              "(each crate's lib.rs/main.rs lists its layers)", file=sys.stderr)
        sys.exit(1)
    known = f" ({len(KNOWN_SEEN)} known, printed above: KNOWN)" if KNOWN_SEEN else ""
    print(f"no new import cycles in {len(crates)} crates{known}")


if __name__ == "__main__":
    main()
