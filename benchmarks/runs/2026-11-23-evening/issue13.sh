#!/usr/bin/env bash
# Issue 13 after adaptive arrival's stall tolerance (85b5b88) and recovery fix (9256892):
# the bare commands again (quiet machine, after `throng tune --apply`).
set -u
T=/work/main/target/release/throng
for i in 1 2; do
  timeout 900 $T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json bare-19k-$i.json > bare-19k-$i.txt 2>&1
done
timeout 1800 $T bench --connections 1000000 --broadcasts 3 --heartbeat 0 --dashboard-port 0 --json bare-1m-hb0.json > bare-1m-hb0.txt 2>&1
