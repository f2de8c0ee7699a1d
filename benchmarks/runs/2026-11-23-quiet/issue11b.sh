#!/usr/bin/env bash
# Issue 11, part 2: a fixed arrival schedule, presence off / count mode, in turn.
set -u
T=/work/main/target/release/throng
while kill -0 12668 2>/dev/null; do sleep 2; done
for r in 10000 5000; do
  timeout 900 $T bench --connections 100000 --arrival-rate $r --dashboard-port 0 --json off-100k-$r.json > off-100k-$r.txt 2>&1
  timeout 900 $T bench --connections 100000 --arrival-rate $r --presence 'rooms:lobby=param:user/count' --dashboard-port 0 --json count-100k-$r.json > count-100k-$r.txt 2>&1
done
