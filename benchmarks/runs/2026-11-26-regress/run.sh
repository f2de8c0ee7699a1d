#!/bin/bash
# Before (ef4a6ed) against after (regress HEAD), alternated, in one run.
# BEFORE and AFTER are the two `cargo build --profile ci -p throng` binaries.
set -u
BEFORE=${BEFORE:-/work/wt/regress-before/target/ci/throng}
AFTER=${AFTER:-/work/wt/regress/target/ci/throng}
OUT=${OUT:-$(dirname "$0")}
what=${1:-19k}
case $what in
19k)   # the bench's default run at 19,000, 3 broadcasts; rounds ${2:-1 2 3}
  for i in ${2:-1 2 3}; do
    for side in before after; do
      b=BEFORE; [ $side = after ] && b=AFTER
      echo "== $side 19k run $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
      timeout 300 ${!b} bench --connections 19000 --broadcasts 3 --dashboard-port 0 \
        --json $OUT/$side-19k-$i.json --report /tmp/regress-$side-19k-$i.html > $OUT/$side-19k-$i.txt 2>&1
      echo "rc=$?"
    done
  done ;;
100k)  # past one process's open files: the bench starts redis-server and serve --workers
  for i in ${2:-1}; do
    for side in before after; do
      b=BEFORE; [ $side = after ] && b=AFTER
      echo "== $side 100k run $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
      timeout 600 ${!b} bench --connections 100000 --arrival-rate ${RATE:-10000} --broadcasts 2 --broadcast-interval 5 \
        --dashboard-port 0 --json $OUT/$side-100k-${RATE:-10000}-$i.json --report /tmp/regress-$side-100k-${RATE:-10000}-$i.html > $OUT/$side-100k-${RATE:-10000}-$i.txt 2>&1
      echo "rc=$?"
    done
  done ;;
events) # the after binary with lifecycle events on (a trivial backend) against off; rounds ${2:-1 2}
  python3 $OUT/events-backend.py 4591 & bk=$!
  sleep 1
  for i in ${2:-1 2}; do
    for side in off on; do
      extra=(); [ $side = on ] && extra=(--server-arg=--hook-url=http://127.0.0.1:4591 --server-arg=--hook-events)
      echo "== events-$side 19k run $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
      timeout 300 $AFTER bench --connections 19000 --broadcasts 3 --dashboard-port 0 "${extra[@]}" \
        --json $OUT/events-$side-19k-$i.json --report /tmp/regress-events-$side-$i.html > $OUT/events-$side-19k-$i.txt 2>&1
      echo "rc=$? backend took $(curl -s http://127.0.0.1:4591/) events so far"
    done
  done
  kill $bk; wait $bk 2>/dev/null ;;
wrk)   # GET / with wrk, 64 connections, 6 alternated rounds
  for i in 1 2 3 4 5 6; do
    for side in before after; do
      b=BEFORE; [ $side = after ] && b=AFTER
      ${!b} serve --port 4580 --bind 127.0.0.1 --api-bind none > /tmp/regress-serve-$side.log 2>&1 & s=$!
      for t in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:4580/ && break; sleep 0.1; done
      echo "$side $i $(wrk -t2 -c64 -d5s http://127.0.0.1:4580/ | grep Requests/sec) load $(cut -d' ' -f1 /proc/loadavg)"
      kill $s; wait $s 2>/dev/null
    done
  done | tee $OUT/wrk-64.txt ;;
esac
