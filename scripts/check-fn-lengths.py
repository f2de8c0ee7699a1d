#!/usr/bin/env python3
"""No function over 100 lines in any crate's source: every `.rs` file under
`crates/*/src/`. Tests do not count: files under a `tests/` folder, files
named `tests.rs`, and the functions inside a `#[cfg(test)] mod ... { }`
block of a source file. No crate holds generated code today (no build
script writes Rust), so nothing else is left out. A function's length runs
from its `fn` line to its closing brace, signature included, doc comments
and attributes not. Braces in strings (raw ones too), character literals
and comments do not count.

A few long functions predate the check: ALLOWED below lists each with its
length when it was listed. Such a function may shrink but not grow; once
it is split (100 lines or fewer, or gone) its entry must go too.

    scripts/check-fn-lengths.py              # every crate's src/, at most 100 lines
    scripts/check-fn-lengths.py --max 80 crates/throng-bench/src/storm

Exits 1 listing the functions over the limit (split each into steps: a
function with one job and a one-line doc each) and the stale entries of
ALLOWED, 2 when a file cannot be read as Rust (an unclosed string, comment
or brace).
"""
import argparse
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CRATES = "crates"
LIMIT = 100

# Functions over LIMIT lines that predate the check: (path, fn name) ->
# their length when listed. Each may shrink, not grow; remove its entry once
# it is split.
ALLOWED = {
    ("crates/throng-server/src/scrape.rs", "render"): 189,  # to split: issue 39 item 6 (the metrics registry); +5 for the Pusher webhooks, cache and Redis link lines
    ("crates/throng-server/src/lib.rs", "start_with_presence"): 191,  # to split: issue 39 item 6; +7 for the Pusher webhooks and cache channels
}


class Unreadable(Exception):
    pass


def tokens(src):
    """The code's tokens as (line, text): identifiers and keywords, and the
    punctuation `{ } ( ) [ ] ;`; strings, characters and comments dropped."""
    i, line, n = 0, 1, len(src)
    out = []
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif src.startswith("//", i):
            while i < n and src[i] != "\n":
                i += 1
        elif src.startswith("/*", i):
            # Rust's block comments nest.
            depth, start = 0, line
            while i < n:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                    if depth == 0:
                        break
                else:
                    line += src[i] == "\n"
                    i += 1
            if depth:
                raise Unreadable(f"line {start}: a block comment never closes")
        elif c in "br" and re.match(r'b?r#*"', src[i:]) and not _ident_before(src, i):
            # r"...", r#"..."#, br#"..."#: no escapes; ends at the quote and as many #.
            m = re.match(r'b?r(#*)"', src[i:])
            close = '"' + m.group(1)
            end = src.find(close, i + len(m.group(0)))
            if end < 0:
                raise Unreadable(f"line {line}: a raw string never closes")
            line += src.count("\n", i, end)
            i = end + len(close)
        elif c == '"':
            start, i = line, i + 1
            while i < n and src[i] != '"':
                if src[i] == "\\":
                    i += 1
                line += i < n and src[i] == "\n"
                i += 1
            if i >= n:
                raise Unreadable(f"line {start}: a string never closes")
            i += 1
        elif c == "'":
            # A character ('{', '\n', '\u{7b}') or a lifetime or label ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\\n])'", src[i:])
            i += len(m.group(0)) if m else 1
        elif c.isalpha() or c == "_":
            m = re.match(r"\w+", src[i:])
            out.append((line, m.group(0)))
            i += len(m.group(0))
        elif c in "{}()[];":
            out.append((line, c))
            i += 1
        else:
            i += 1
    return out


def _ident_before(src, i):
    """Whether `src[i]` continues an identifier (`r` in `bar"` opens no raw
    string)."""
    return i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")


def _closing(toks, j):
    """The index of the bracket closing the one opened at `toks[j]`, or None."""
    pair = {"{": "}", "(": ")", "[": "]"}[toks[j][1]]
    opener, depth = toks[j][1], 0
    while j < len(toks):
        t = toks[j][1]
        depth += (t == opener) - (t == pair)
        if depth == 0:
            return j
        j += 1
    return None


def test_modules(toks):
    """The token ranges (first, last) of each `#[cfg(test)] mod name { ... }`
    block: the tests a source file keeps inline."""
    ranges = []
    for k in range(len(toks) - 5):
        if [t for _, t in toks[k : k + 6]] != ["[", "cfg", "(", "test", ")", "]"]:
            continue
        j = k + 6
        while j < len(toks) and toks[j][1] == "[":  # further attributes
            end = _closing(toks, j)
            if end is None:
                break
            j = end + 1
        if j < len(toks) and toks[j][1] == "pub":
            j += 1
        if j + 2 < len(toks) and toks[j][1] == "mod" and toks[j + 2][1] == "{":
            end = _closing(toks, j + 2)
            if end is not None:
                ranges.append((j + 2, end))
    return ranges


def functions(src):
    """Each function with a body outside a `#[cfg(test)]` module: (name,
    first line, last line)."""
    toks = tokens(src)
    skipped = test_modules(toks)
    found = []
    for k, (line, text) in enumerate(toks):
        if text != "fn" or k + 1 >= len(toks) or not re.match(r"[A-Za-z_]\w*$", toks[k + 1][1]):
            continue  # `fn(u8) -> u8`, a function pointer type
        if any(a < k < b for a, b in skipped):
            continue
        # The body opens at the first `{` outside the signature's brackets;
        # a `;` there first means no body (a trait's declaration).
        depth, j = 0, k + 2
        while j < len(toks):
            t = toks[j][1]
            if t in "([":
                depth += 1
            elif t in ")]":
                depth -= 1
            elif depth == 0 and t in "{;":
                break
            j += 1
        if j >= len(toks) or toks[j][1] == ";":
            continue
        braces = 0
        while j < len(toks):
            t = toks[j][1]
            braces += (t == "{") - (t == "}")
            if braces == 0:
                break
            j += 1
        if braces:
            raise Unreadable(f"line {line}: fn {toks[k + 1][1]} never closes its brace")
        found.append((toks[k + 1][1], line, toks[j][0]))
    return found


def is_test_file(p):
    """Whether a file holds only tests: under a `tests/` folder or named
    `tests.rs`."""
    parts = p.split(os.sep)
    return parts[-1] == "tests.rs" or "tests" in parts[:-1]


def files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for d, _, names in sorted(os.walk(p)):
            for f in sorted(names):
                if f.endswith(".rs") and not is_test_file(os.path.join(d, f)):
                    yield os.path.join(d, f)


def default_files():
    """Every crate's `src/` files but the tests."""
    srcs = [os.path.join(CRATES, c, "src") for c in sorted(os.listdir(CRATES))]
    return list(files([d for d in srcs if os.path.isdir(d)]))


def self_test():
    """The tokenizer on what trips a brace counter: a failure here means the
    check itself is wrong, not the code it checks."""
    src = '''
fn a() {
    let s = "{ not a brace";
    let r = r#"also "{ not" one"#;
    let c = '{';
    let e = '\\'';
    let u = '\\u{7b}';
    // a { comment
    /* a { block /* nested } */ comment */
    let b = b"{";
    let br = br#"{"#;
}
fn b<'x>(v: &'x [u8; 4]) -> &'x u8 where u8: Copy { loop { break &v[0]; } }
trait T { fn decl(&self); fn with_body(&self) {} }
type F = fn(u8) -> u8;
#[cfg(test)]
#[allow(clippy::all)]
mod tests { fn in_tests() {} }
#[cfg(feature = "x")]
mod kept { fn counted() {} }
fn after() {}
'''
    got = functions(src)
    want = [("a", 2, 12), ("b", 13, 13), ("with_body", 14, 14), ("counted", 20, 20), ("after", 21, 21)]
    assert got == want, f"self-test: {got} != {want}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, default=LIMIT, help="the most lines a function may take")
    ap.add_argument("paths", nargs="*", help="files or folders (default: the ones above)")
    args = ap.parse_args()
    os.chdir(ROOT)
    self_test()
    paths = list(files(args.paths)) if args.paths else default_files()
    if not paths:
        print("check-fn-lengths: no Rust file found under " + " ".join(args.paths or [CRATES]), file=sys.stderr)
        return 2
    lengths, count = {}, 0
    for p in paths:
        try:
            fns = functions(open(p, encoding="utf-8").read())
        except Unreadable as e:
            print(f"check-fn-lengths: {p}: {e}: is it valid Rust?", file=sys.stderr)
            return 2
        count += len(fns)
        for name, first, last in fns:
            key = (p.replace(os.sep, "/"), name)
            if last - first + 1 > lengths.get(key, (0, 0))[0]:
                lengths[key] = (last - first + 1, first)
    return report(lengths, count, len(paths), args.max, not args.paths)


def report(lengths, count, nfiles, limit, whole_tree):
    """Print the functions over `limit` (those ALLOWED within their listed
    length pass) and, over the whole tree, the stale ALLOWED entries; the
    exit code."""
    long = [(n, p, first, name) for (p, name), (n, first) in lengths.items() if n > max(limit, ALLOWED.get((p, name), 0))]
    stale = [k for k in ALLOWED if lengths.get(k, (0, 0))[0] <= limit] if whole_tree else []
    if long:
        print(f"functions over {limit} lines (split each into steps: a function with one job and a one-line doc):")
        for n, p, first, name in sorted(long, reverse=True):
            allowed = ALLOWED.get((p, name))
            grew = f" (listed in ALLOWED at {allowed}: it may not grow)" if allowed else ""
            print(f"  {p}:{first}: fn {name}: {n} lines{grew}")
    if stale:
        print(f"ALLOWED lists functions now at most {limit} lines or gone: remove their entries from scripts/check-fn-lengths.py:")
        for p, name in sorted(stale):
            print(f"  {p}: fn {name}")
    if long or stale:
        return 1
    listed = sum(1 for k in ALLOWED if k in lengths)
    print(f"function lengths: all {count} functions in {nfiles} files at most {limit} lines ({listed} listed in ALLOWED)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
