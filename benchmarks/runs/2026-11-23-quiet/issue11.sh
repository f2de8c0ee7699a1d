#!/usr/bin/env bash
# Issue 11: 100,000 joining one topic, presence off / count mode, in turn (quiet machine, after `throng tune --apply`).
set -u
T=/work/main/target/release/throng
for i in 1 2; do
  timeout 900 $T bench --connections 100000 --dashboard-port 0 --json off-100k-$i.json > off-100k-$i.txt 2>&1
  timeout 900 $T bench --connections 100000 --presence 'rooms:lobby=param:user/count' --dashboard-port 0 --json count-100k-$i.json > count-100k-$i.txt 2>&1
done
timeout 900 $T bench --connections 100000 --arrival-rate 10000 --dashboard-port 0 --json off-100k-10k.json > off-100k-10k.txt 2>&1
timeout 900 $T bench --connections 100000 --arrival-rate 10000 --presence 'rooms:lobby=param:user/count' --dashboard-port 0 --json count-100k-10k.json > count-100k-10k.txt 2>&1
