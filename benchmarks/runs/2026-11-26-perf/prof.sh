#!/bin/bash
# prof.sh BIN OUT N RATE SECS: perf over the ramp-up only (bench holds 6 s)
BIN=$1; OUT=$2; N=${3:-18000}; RATE=${4:-6000}; SECS=${5:-3.5}
PORT=$((4800 + RANDOM % 100))
$BIN serve --port $PORT --bind 127.0.0.1 --public-metrics --api-bind none --idle-timeout 0 >/tmp/perf-h/srv.log 2>&1 &
SP=$!
sleep 0.5
$BIN bench --target 127.0.0.1:$PORT --connections $N --arrival-rate $RATE --heartbeat 0 --hold 6 --floor off --dashboard-port 0 --report /dev/null >/tmp/perf-h/bench.log 2>&1 &
B=$!
perf record -e cpu-clock -F 4999 -g -p $SP -o $OUT -- sleep $SECS >/dev/null 2>&1
curl -s 127.0.0.1:$PORT/metrics | grep -E "^throng_joins_total"
wait $B
kill $SP; wait $SP
