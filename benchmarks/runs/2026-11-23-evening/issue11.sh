#!/usr/bin/env bash
# Issue 11 after the count-mode census, the count fan-out bound and adaptive arrival's
# stall tolerance: 100,000 joining one topic, presence off / count mode, in turn
# (quiet machine, after `throng tune --apply`). first/: the same before the census's
# per-owner maps (c520970); second/: before the recovery fix and the count-mode settle (cd0bc8a).
set -u
T=/work/main/target/release/throng
for i in 1 2 3; do
  timeout 900 $T bench --connections 100000 --dashboard-port 0 --json off-100k-$i.json > off-100k-$i.txt 2>&1
  timeout 900 $T bench --connections 100000 --presence 'rooms:lobby=param:user/count' --dashboard-port 0 --json count-100k-$i.json > count-100k-$i.txt 2>&1
done
for r in 10000 5000; do
  timeout 900 $T bench --connections 100000 --arrival-rate $r --dashboard-port 0 --json off-100k-$r.json > off-100k-$r.txt 2>&1
  timeout 900 $T bench --connections 100000 --arrival-rate $r --presence 'rooms:lobby=param:user/count' --dashboard-port 0 --json count-100k-$r.json > count-100k-$r.txt 2>&1
done
