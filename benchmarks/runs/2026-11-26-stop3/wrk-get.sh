#!/usr/bin/env bash
# GET / with wrk: BASE and NEW alternated, ROUNDS times each, one server at a time.
# Prints req/s and the server's CPU per request (utime+stime over the run / requests).
set -u
BASE=$1; NEW=$2; ROUNDS=${3:-3}; PORT=${PORT:-47913}
hz=$(getconf CLK_TCK)
run() {
  local bin=$1 name=$2
  "$bin" serve --port "$PORT" --bind 127.0.0.1 --api-bind none >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local c0; c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  local out; out=$(timeout 30 wrk -t2 -c64 -d10s http://127.0.0.1:$PORT/)
  local c1; c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  kill "$pid"; wait "$pid" 2>/dev/null
  local reqs; reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  local rps; rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  local us; us=$(awk -v a="$c1" -v b="$c0" -v hz="$hz" -v n="$reqs" 'BEGIN {printf "%.2f", (a-b)/hz*1e6/n}')
  echo "$name load=$load req/s=$rps requests=$reqs server_cpu_us_per_req=$us $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr '\n' ' ')"
}
for i in $(seq "$ROUNDS"); do
  run "$BASE" base
  run "$NEW" new
done
