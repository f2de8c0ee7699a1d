#!/usr/bin/env bash
# Issue 9, server only: the same (current) load generator against b853199's server and main's, alternated.
set -u
B=/work/wt/before/target/release/throng
A=/work/main/target/release/throng
F="--connections 19000 --arrival-rate 20000 --agents 2 --broadcasts 5 --broadcast-interval 1 --dashboard-port 0"
serve() { # $1 binary, $2 port, rest: extra flags
  local bin=$1 port=$2; shift 2
  $bin serve --port $port --bind 127.0.0.1 "$@" >/dev/null 2>&1 & echo $!
}
for i in 1 2; do
  p=$(serve $B 4411); sleep 1
  timeout 600 $A bench $F --target 127.0.0.1:4411 --json before-target-$i.json > before-target-$i.txt 2>&1
  kill $p; wait $p 2>/dev/null
  p=$(serve $A 4412 --public-metrics --api-bind none); sleep 1
  timeout 600 $A bench $F --target 127.0.0.1:4412 --json after-target-$i.json > after-target-$i.txt 2>&1
  kill $p; wait $p 2>/dev/null
done
