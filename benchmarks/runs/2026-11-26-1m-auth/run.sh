#!/bin/bash
# Issue 30 item 4 with auth on: 1,000,000 sockets, each its own user with
# its own JWT (the bench's --auth jwt), heartbeats on each client's own
# 30 s phase, two broadcasts to all. Tune before, revert after.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
THRONG=${THRONG:-$ROOT/target/release/throng}
AUTH=${AUTH:-jwt}
TAG=${TAG:-$AUTH}   # the output files' name: 1m-TAG.*
RATE=${RATE:-8000}  # joins per second offered; "adaptive": the bench's default (as many as the server takes)
if [ "$RATE" = adaptive ]; then ARRIVAL=(); else ARRIVAL=(--arrival-rate "$RATE"); fi
"$THRONG" tune --apply --connections 1000000 > "$HERE/tune-$TAG.txt" 2>&1
trap '"$THRONG" tune --revert > "$HERE/tune-revert-$TAG.txt" 2>&1' EXIT
"$THRONG" bench --connections 1000000 "${ARRIVAL[@]}" --heartbeat-grid 0 \
  --broadcast-after 60 --broadcasts 2 --broadcast-interval 30 --hold 130 --auth "$AUTH" \
  --dashboard-port 0 --json "$HERE/1m-$TAG.json" --report "$HERE/1m-$TAG.html" \
  > "$HERE/1m-$TAG.txt" 2> "$HERE/1m-$TAG.log"
echo "bench exit status $?"
cat "$HERE/1m-$TAG.txt"
