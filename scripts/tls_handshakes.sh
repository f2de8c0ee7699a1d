#!/usr/bin/env bash
# TLS handshakes a second and server CPU per handshake, for an ECDSA P-256
# and an RSA 2048 certificate, full and resumed: `throng serve --tls-cert`
# on 1 shard, CLIENTS `openssl s_time` processes against it for SECS
# seconds each; CPU from /proc (user+system of the server process), the
# count from its /metrics. Usage: scripts/tls_handshakes.sh [SECS] [CLIENTS]
set -euo pipefail
SECS=${1:-10}
CLIENTS=${2:-2}
# e.g. VERSION=-tls1_2 (openssl s_time resumes TLS 1.2 sessions; its -reuse does not resume TLS 1.3)
VERSION=${VERSION:-}
BIN=${THRONG_BIN:-target/release/throng}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -keyout "$dir/ec.key" -out "$dir/ec.crt" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -keyout "$dir/rsa.key" -out "$dir/rsa.crt" 2>/dev/null
tick=$(getconf CLK_TCK)
for kind in ec rsa; do
  "$BIN" serve --port 0 --bind 127.0.0.1 --api-bind 127.0.0.1:0 --shards 1 \
    --tls-cert "$dir/$kind.crt" --tls-key "$dir/$kind.key" >"$dir/out" 2>/dev/null &
  pid=$!
  until grep -q '^listening on' "$dir/out"; do sleep 0.1; done
  port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$dir/out")
  api=$(sed -n 's/^api at \(.*\)$/\1/p' "$dir/out")
  for mode in new reuse; do
    count() { curl -s "http://$api/metrics" | awk -v m="throng_tls_${1}_total" '$1==m{print $2}'; }
    cpu() { awk '{print $14+$15}' "/proc/$pid/stat"; }
    h0=$(count handshakes); r0=$(count resumptions); c0=$(cpu)
    for _ in $(seq "$CLIENTS"); do
      openssl s_time -connect "127.0.0.1:$port" -"$mode" $VERSION -time "$SECS" >/dev/null 2>&1 &
    done
    wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
    h1=$(count handshakes); r1=$(count resumptions); c1=$(cpu)
    n=$((h1 - h0))
    awk -v k="$kind" -v m="$mode" -v n="$n" -v r=$((r1 - r0)) -v s="$SECS" -v c=$((c1 - c0)) -v t="$tick" -v v="${VERSION:-any}" \
      'BEGIN{printf "%-3s %-5s %-7s %7d handshakes (%d resumed) in %ss: %6.0f/s, server CPU %6.0f us per handshake\n", k, m, v, n, r, s, n/s, n ? c/t*1e6/n : 0}'
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
