#!/usr/bin/env bash
# Every file path the docs name exists: README.md, the guide's pages in
# docs/, BENCHMARKS.md, the crates' READMEs and every module doc (`//!`);
# and every relative Markdown link of README.md and docs/ (`[text](page.md)`,
# `[text](page.md#heading)`, `[text](#heading)`) reaches a file and, with a
# `#`, a heading of that file (GitHub's anchors). A path is a backquoted word
# with a slash and a file extension or a trailing slash (`socket/tests.rs`,
# `crates/throng/tests/`), read from the repository root, from the doc's
# own folder, or, for a module doc, from its crate's src/ and its own
# folder. Globs and placeholders are skipped. Exits 1 listing the stale ones.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import os, re, subprocess, sys
files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
tracked = set(files)
dirs = {os.path.dirname(f) for f in files}
while True:
    more = {os.path.dirname(d) for d in dirs} - dirs
    if not more: break
    dirs |= more
suffixes = set()
for f in list(tracked) + list(dirs):
    parts = f.split("/")
    for i in range(1, len(parts)):
        suffixes.add("/".join(parts[i:]))
def exists(p):
    p = os.path.normpath(p)
    return p in tracked or p in dirs or p in suffixes or os.path.exists(p)
# backquoted, with a slash, ending in .ext or /; no spaces, globs or placeholders
PATH = re.compile(r"`([A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+(?:\.[a-z]{1,5}|/))`")
# other projects' files (Phoenix's Elixir, Go, C, pusher-js's TypeScript, the SDKs' PHP, Ruby, Java), cited as references
SKIP = re.compile(r"(://|^/|^\.\./\.\./|\*|<|\{|^[a-z]+/[a-z]+$|\.(ex|exs|go|h|c|cc|erl|ts|php|rb|java|kt|swift|dart)$)")
docs = [f for f in files if f.endswith(".md") and not f.startswith(("node_modules/", "fuzz/corpus"))]
# The guide: README.md and docs/*.md, tracked or about to be.
guide = ["README.md"] + sorted("docs/" + f for f in os.listdir("docs") if f.endswith(".md"))
docs += [g for g in guide if g not in docs]
bad = []
def anchors(doc):
    """GitHub's anchors of a Markdown file's headings (fenced code skipped)."""
    out, fence = set(), False
    for line in open(doc).read().splitlines():
        if re.match(r"\s*```", line): fence = not fence; continue
        m = None if fence else re.match(r"#+ (.*)", line)
        if m: out.add(re.sub(r"[^a-z0-9 _-]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out
LINK = re.compile(r"\]\(([^)\s]+)\)")
def check_links(doc):
    text = re.sub(r"```.*?```", "", open(doc).read(), flags=re.S)
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target): continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(dest):
            bad.append(f"{doc}: link ({target}): no such file")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{doc}: link ({target}): {dest} has no heading #{anchor}")
for doc in guide:
    check_links(doc)
def check(doc, text, roots):
    for m in PATH.finditer(text):
        p = m.group(1)
        if SKIP.search(p): continue
        if not any(exists(os.path.join(r, p)) for r in roots):
            bad.append(f"{doc}: `{p}`")
for doc in docs:
    if doc.startswith("benchmarks/runs/"): continue
    check(doc, open(doc).read(), ["", os.path.dirname(doc)])
for src in files:
    if not src.endswith(".rs"): continue
    lines = [l[3:] for l in open(src).read().splitlines() if l.startswith("//!")]
    if not lines: continue
    parts = src.split("/")
    crate_src = "/".join(parts[:parts.index("src") + 1]) if "src" in parts else os.path.dirname(src)
    crate_dir = os.path.dirname(crate_src)
    here = os.path.dirname(src)
    roots = ["", crate_src, crate_dir, here, os.path.join(crate_src, "transport"), os.path.dirname(here)]
    check(src, "\n".join(lines), roots)
if bad:
    print("stale paths in docs (no such file or folder):")
    print("\n".join("  " + b for b in bad))
    sys.exit(1)
print(f"doc paths: all exist ({len(docs)} markdown files and the module docs)")
PY
