#!/bin/bash
# $1 binary, $2 label, $3 port, $4 conns
B=$1; L=$2; P=$3; N=${4:-18000}
$B serve --port $P --bind 127.0.0.1 --public-metrics --api-bind none --idle-timeout 0 $EXTRA > /tmp/mem-serve-$L.log 2>&1 & S=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$P/metrics && break; sleep 0.1; done
sleep 1
python3 benchmarks/runs/2026-11-26-perf/smaps.py snap $S /tmp/mem-a-$L.json
$B bench --target 127.0.0.1:$P --connections $N --arrival-rate 6000 --heartbeat 0 --hold 25 --floor off --dashboard-port 0 > /tmp/mem-bench-$L.txt 2>&1 & BB=$!
for i in $(seq 300); do j=$(curl -s http://127.0.0.1:$P/metrics | grep -E '^throng_channels_joined ' | awk '{print $2}'); [ "${j%.*}" = "$N" ] && break; sleep 0.2; done
sleep 3
python3 benchmarks/runs/2026-11-26-perf/smaps.py snap $S /tmp/mem-b-$L.json
grep VmRSS /proc/$S/status
python3 benchmarks/runs/2026-11-26-perf/smaps.py diff /tmp/mem-a-$L.json /tmp/mem-b-$L.json $N | head -12
kill $BB; wait $BB; kill $S; wait $S
