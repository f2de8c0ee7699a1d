#!/usr/bin/env bash
# Issue 9 before/after on a quiet machine: b853199 (before the restructure) and main, alternated.
set -u
B=/work/wt/before/target/release/throng
A=/work/main/target/release/throng
F="--connections 19000 --arrival-rate 20000 --agents 2 --broadcasts 5 --broadcast-interval 1 --dashboard-port 0"
for i in 1 2; do
  timeout 600 $B bench $F --json before-19k-$i.json > before-19k-$i.txt 2>&1
  timeout 600 $A bench $F --json after-19k-$i.json > after-19k-$i.txt 2>&1
done
