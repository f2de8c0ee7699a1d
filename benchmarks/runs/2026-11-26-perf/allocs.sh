#!/bin/bash
# allocs.sh BIN N: malloc/calloc/realloc calls in the server per connect+join
BIN=$1; N=${2:-4000}
PORT=$((4900 + RANDOM % 90))
$BIN serve --port $PORT --bind 127.0.0.1 --public-metrics --api-bind none --idle-timeout 0 >/dev/null 2>&1 &
SP=$!
sleep 0.5
perf stat -e probe_libc:malloc,probe_libc:calloc,probe_libc:realloc -p $SP -o /tmp/perf-h/allocs.txt &
PS=$!
sleep 0.3
$BIN bench --target 127.0.0.1:$PORT --connections $N --arrival-rate 2000 --heartbeat 0 --hold 4 --floor off --dashboard-port 0 --report /dev/null >/dev/null 2>&1 &
B=$!
for i in $(seq 1 100); do sleep 0.2; j=$(curl -s 127.0.0.1:$PORT/metrics | grep "^throng_joins_total" | cut -d' ' -f2); [ "$j" = "$N" ] && break; done
kill -INT $PS; wait $PS
wait $B; kill $SP; wait $SP
grep probe /tmp/perf-h/allocs.txt
