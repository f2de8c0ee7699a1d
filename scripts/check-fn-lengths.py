#!/usr/bin/env python3
"""No function over 100 lines in throng-bench's controller, report and
summary code: `crates/throng-bench/src/controller/`, `crates/throng-bench/src/report/`
(the report, its summary table and HTML page) and every other `report.rs`
or `summary.rs` of the crate (the storm's, the hooks scenario's). A
function's length runs from its `fn` line to its closing brace, signature
included, doc comments and attributes not. Braces in strings (raw ones
too), character literals and comments do not count.

    scripts/check-fn-lengths.py              # the files above, at most 100 lines
    scripts/check-fn-lengths.py --max 80 crates/throng-bench/src/storm

Exits 1 listing the functions over the limit (split each into steps: a
function with one job and a one-line doc each), 2 when a file cannot be
read as Rust (an unclosed string, comment or brace).
"""
import argparse
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BENCH_SRC = "crates/throng-bench/src"
DEFAULT_DIRS = [f"{BENCH_SRC}/controller", f"{BENCH_SRC}/report"]
DEFAULT_NAMES = {"report.rs", "summary.rs"}
LIMIT = 100


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


def functions(src):
    """Each function with a body: (name, first line, last line)."""
    toks = tokens(src)
    found = []
    for k, (line, text) in enumerate(toks):
        if text != "fn" or k + 1 >= len(toks) or not re.match(r"[A-Za-z_]\w*$", toks[k + 1][1]):
            continue  # `fn(u8) -> u8`, a function pointer type
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


def files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for d, _, names in sorted(os.walk(p)):
            for f in sorted(names):
                if f.endswith(".rs"):
                    yield os.path.join(d, f)


def default_files():
    picked = list(files(DEFAULT_DIRS))
    for d, _, names in sorted(os.walk(BENCH_SRC)):
        for f in sorted(names):
            p = os.path.join(d, f)
            if f in DEFAULT_NAMES and p not in picked:
                picked.append(p)
    return picked


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
'''
    got = functions(src)
    want = [("a", 2, 12), ("b", 13, 13), ("with_body", 14, 14)]
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
        print("check-fn-lengths: no Rust file found under " + " ".join(args.paths or DEFAULT_DIRS), file=sys.stderr)
        return 2
    long, count = [], 0
    for p in paths:
        try:
            fns = functions(open(p, encoding="utf-8").read())
        except Unreadable as e:
            print(f"check-fn-lengths: {p}: {e}: is it valid Rust?", file=sys.stderr)
            return 2
        count += len(fns)
        long += [(last - first + 1, p, first, name) for name, first, last in fns if last - first + 1 > args.max]
    if long:
        print(f"functions over {args.max} lines (split each into steps: a function with one job and a one-line doc):")
        for n, p, first, name in sorted(long, reverse=True):
            print(f"  {p}:{first}: fn {name}: {n} lines")
        return 1
    print(f"function lengths: all {count} functions in {len(paths)} files at most {args.max} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
