#!/usr/bin/env bash
# Runs the Autobahn TestSuite cases (via kosoku, no Docker) against `throng serve --echo`.
# Usage: scripts/autobahn.sh [sections...]   e.g. scripts/autobahn.sh        (1-7, 10, and 12-13: permessage-deflate)
#                                                 scripts/autobahn.sh '9.*'  (limits/performance)
# Prints a count of behaviours per section and fails if any case is not OK/NON-STRICT/INFORMATIONAL.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v kosoku >/dev/null || python3 -m pip install --quiet kosoku
cargo build --release -p throng --quiet
port=${AUTOBAHN_PORT:-9101}
out=${AUTOBAHN_OUT:-target/autobahn}
rm -rf "$out"
# --control-rate 0: sections 12 and 13 send 1,000 messages in 256-byte
# fragments (32,000 frames under 1 KiB in seconds), which the control budget
# rightly stops with 1008 on a production socket.
target/release/throng serve --port "$port" --bind 127.0.0.1 --echo --api-bind none --control-rate 0 \
  --max-message-bytes 20000000 --max-outbound-bytes 40000000 >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
args=()
if [ $# -eq 0 ]; then args=(-x '9.*'); else for s in "$@"; do args+=(-i "$s"); done; fi
timeout 1800 kosoku "${args[@]}" -o "$out" "ws://127.0.0.1:$port/echo" | tail -2
python3 - "$out/index.json" <<'PY'
import json, sys, collections
d = json.load(open(sys.argv[1]))
counts, bad = collections.Counter(), []
for cases in d.values():
    for case, v in cases.items():
        counts[(case.split('.')[0], v['behavior'])] += 1
        if v['behavior'] not in ('OK', 'NON-STRICT', 'INFORMATIONAL') or v.get('behaviorClose') not in ('OK', 'INFORMATIONAL'):
            bad.append((case, v['behavior'], v.get('behaviorClose')))
for (section, behavior), n in sorted(counts.items(), key=lambda kv: (int(kv[0][0]), kv[0][1])):
    print(f"section {section:>2}: {n:3} {behavior}")
if bad:
    print("FAILED:", bad)
    sys.exit(1)
PY
