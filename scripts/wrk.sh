#!/usr/bin/env bash
# `GET /` with wrk at 1..64 connections against a fresh `throng serve`,
# as the seed's HTTP benchmark did (an MVC page with no database call).
# Prints wrk's requests/s and latency percentiles, and the server's CPU
# (seconds used during each run) so it is clear which side saturated.
# Usage: scripts/wrk.sh [seconds-per-run] [connection counts...]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }
cargo build --release -p throng --quiet
secs=${1:-10}; shift || true
counts=("$@"); [ ${#counts[@]} -gt 0 ] || counts=(1 2 4 8 16 32 64)
port=${WRK_PORT:-4300}
target/release/throng serve --port "$port" --bind 127.0.0.1 >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
hz=$(getconf CLK_TCK)
printf "%-5s %12s %9s %9s %9s %9s %14s\n" conns req/s p50 p90 p99 max server-cpu%
for c in "${counts[@]}"; do
  t=$(( c < 2 ? 1 : 2 ))
  before=$(cpu)
  out=$(wrk -t"$t" -c"$c" -d"${secs}s" --latency "http://127.0.0.1:$port/")
  after=$(cpu)
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out"); p90=$(awk '$1=="90%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out"); max=$(awk '/Latency/ && !/Distribution/ {print $4; exit}' <<<"$out")
  pct=$(awk -v a="$after" -v b="$before" -v s="$secs" -v hz="$hz" 'BEGIN {printf "%.0f", (a-b)/hz/s*100}')
  printf "%-5s %12s %9s %9s %9s %9s %13s%%\n" "$c" "$rps" "$p50" "$p90" "$p99" "$max" "$pct"
done
