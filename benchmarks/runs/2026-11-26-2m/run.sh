#!/bin/bash
# One step of the 2,000,000-connection attempt (issue 30 item 3), as the
# Phoenix team's benchmark ran it: every client joins rooms:lobby, sends no
# heartbeat (so the server's idle timeout is off), the load generator on
# this machine; then one broadcast to all, timed to the last receiver and
# compared with the kernel's floor. One step per invocation, bounded:
#
#   run.sh 300000     # validation
#   run.sh 1200000    # then 1500000, 1800000, 2000000 while the last step left room
#
# Before the run: `throng tune --apply --connections N` (tcp_mem, file-max,
# nf_conntrack_max, somaxconn, netdev_max_backlog); after it, whatever
# happened, `throng tune --revert`. The bench stops the ramp-up itself when
# MemAvailable falls under MIN_AVAIL (--min-available) and still broadcasts
# to the users connected, so a step that does not fit ends with its count.
#
# Environment: THRONG (the binary; default target/release/throng, build it
# with `cargo build --release -p throng`), OUT (output folder; default this
# script's), MIN_AVAIL (default: 1.5 GiB plus 256 B a connection for the
# handshakes in flight while the guard watches; see README.md), RATE
# (arrival rate, 8000).
#
# Writes OUT/N.json, N.html, N.log (the bench's stderr), N-closes.txt (the
# server's close and refusal counters at the plateau), N-mem.tsv
# (MemAvailable, Slab, socket pages and conntrack entries every second),
# N-slab0.txt / N-slab1.txt (/proc/slabinfo before and at the plateau) and
# prints MemAvailable before / lowest / at the plateau, the kernel's slab
# growth per connection by cache, and the bench's summary.
#
# Do not list /proc/PID/fd of the workers or agents while it runs: each
# listed descriptor costs the kernel ~890 B of slab.
set -u
N=${1:?usage: run.sh CONNECTIONS}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
THRONG=${THRONG:-$ROOT/target/release/throng}
OUT=${OUT:-$HERE}
RATE=${RATE:-8000}
# 1.5 GiB to spare, plus 256 B a connection: the ramp-up's handshakes in
# flight (up to ~35,000 socket pages at 200,000) are gone by the plateau,
# and a broadcast's queued frames were too few to see (README.md here).
MIN_AVAIL=${MIN_AVAIL:-$((1610612736 + N * 256))}
mkdir -p "$OUT"
[ -x "$THRONG" ] || { echo "no binary at $THRONG: cargo build --release -p throng, or set THRONG" >&2; exit 2; }

meminfo() { awk -v k="$1:" '$1==k {printf "%.0f\n", $2*1024}' /proc/meminfo; }
echo "step: $N connections, min-available $((MIN_AVAIL >> 20)) MiB, $(date -u +%FT%TZ), $(nproc) cores"
echo "MemAvailable before: $(( $(meminfo MemAvailable) >> 20 )) MiB of $(( $(meminfo MemTotal) >> 20 )) MiB"

"$THRONG" tune --apply --connections "$N" > "$OUT/$N-tune.txt" 2>&1
grep -E "set |cannot" "$OUT/$N-tune.txt"
trap '"$THRONG" tune --revert > "$OUT/$N-tune-revert.txt" 2>&1; echo "tune reverted (see $OUT/$N-tune-revert.txt)"' EXIT

cat /proc/slabinfo > "$OUT/$N-slab0.txt"
grep -E "^(MemAvailable|Slab|SReclaimable|SUnreclaim|PageTables|AnonPages)" /proc/meminfo > "$OUT/$N-mem0.txt"

# The workers' close and refusal counters, summed (each worker's /metrics,
# on its API port inside the run's network namespace): why the server ended
# the connections it ended during the ramp-up.
server_closes() {
  local pid ports
  pid=$(pgrep -f "throng serve" | head -n 1)
  [ -n "$pid" ] || { echo "no server worker found"; return; }
  ports=$(nsenter -t "$pid" -n ss -Hltnp 2>/dev/null | grep '"throng"' \
    | awk '{n=split($4,a,":"); print a[n]}' | sort -u)
  for p in $ports; do
    nsenter -t "$pid" -n curl -s --max-time 5 "http://127.0.0.1:$p/metrics" 2>/dev/null
  done | awk '/^throng_process_cpu_seconds_total/ { read++ }
    /^throng_[a-z_]*(closes|timeouts|refused|errors)[a-z_]*(_total)?[{ ]/ && $NF > 0 {
      k=$1; v[k]+=$NF }
    END { for (k in v) printf "%s %d\n", k, v[k]
      printf "(counters above 0, summed over the %d /metrics read at the plateau)\n", read }' | sort
}

# The sampler: one line a second until the bench ends; at the first hold
# line (the plateau, before the broadcast) a copy of /proc/slabinfo.
: > "$OUT/$N.log"
(
  echo -e "t\tmem_available\tslab\tsreclaimable\ttcp_pages\tconntrack\tphase"
  t0=$(date +%s); snap=0
  while :; do
    phase=$(tail -n 1 "$OUT/$N.log" 2>/dev/null | awk '{print $1}')
    if [ $snap = 0 ] && grep -q "^hold " "$OUT/$N.log" 2>/dev/null; then
      cat /proc/slabinfo > "$OUT/$N-slab1.txt"
      grep -E "^(MemAvailable|Slab|SReclaimable|SUnreclaim|PageTables|AnonPages)" /proc/meminfo > "$OUT/$N-mem1.txt"
      server_closes > "$OUT/$N-closes.txt" 2>&1
      snap=1
    fi
    tcp=$(awk '$1=="TCP:" {for(i=2;i<NF;i++) if($i=="mem") print $(i+1)}' /proc/net/sockstat)
    ct=$(cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo -)
    echo -e "$(( $(date +%s) - t0 ))\t$(meminfo MemAvailable)\t$(meminfo Slab)\t$(meminfo SReclaimable)\t$tcp\t$ct\t$phase"
    sleep 1
  done
) > "$OUT/$N-mem.tsv" &
SAMPLER=$!

"$THRONG" bench --connections "$N" --arrival-rate "$RATE" --heartbeat 0 \
  --broadcast-after 30 --broadcasts 1 --hold 90 --min-available "$MIN_AVAIL" \
  --dashboard-port 0 --json "$OUT/$N.json" --report "$OUT/$N.html" \
  > "$OUT/$N.txt" 2>> "$OUT/$N.log"
RC=$?
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null
echo "bench exit status $RC (1: a criterion failed, such as a ramp-up stopped by --min-available)"
cat "$OUT/$N.txt"
echo "server's closes and refusals at the plateau:"; cat "$OUT/$N-closes.txt" 2>/dev/null

python3 - "$N" "$OUT" <<'PY'
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
def slab(p):
    d = {}
    for l in open(p).readlines()[2:]:
        f = l.split()
        d[f[0]] = (int(f[1]), int(f[3]))  # active objects, object size
    return d
def mem(p):
    return {l.split(':')[0]: int(l.split()[1]) * 1024 for l in open(p)}
rows = [l.rstrip('\n').split('\t') for l in open(f"{out}/{n}-mem.tsv")][1:]
avail = [int(float(r[1])) for r in rows if r[1]]
try:
    j = json.load(open(f"{out}/{n}.json"))
except Exception:
    j = {}
joined = j.get('connections', {}).get('joined') or n
m0 = mem(f"{out}/{n}-mem0.txt")
print(f"MemAvailable: before {m0['MemAvailable'] >> 20} MiB, lowest {min(avail) >> 20} MiB, after {avail[-1] >> 20} MiB")
try:
    m1 = mem(f"{out}/{n}-mem1.txt")
except FileNotFoundError:
    print("no plateau snapshot (the run ended before its hold)")
    sys.exit(0)
print(f"at the plateau ({joined} joined): MemAvailable {m1['MemAvailable'] >> 20} MiB; per connection: "
      + ", ".join(f"{k} {(m0[k] - m1[k] if k == 'MemAvailable' else m1[k] - m0[k]) / joined:.0f} B" for k in m0))
a, b = slab(f"{out}/{n}-slab0.txt"), slab(f"{out}/{n}-slab1.txt")
total = 0
print("kernel slab growth per connection (both ends), by cache:")
for k, (objs, size) in sorted(b.items(), key=lambda kv: -(kv[1][0] - a.get(kv[0], (0, 0))[0]) * kv[1][1]):
    grew = (objs - a.get(k, (0, 0))[0]) * size / joined
    if grew >= 4:
        total += grew
        print(f"  {grew:7.0f} B  {(objs - a.get(k, (0, 0))[0]) / joined:5.2f} x {size:5d} B  {k}")
print(f"  {total:7.0f} B  in the caches above")
srv, agt = j.get('server', {}), j.get('agent', {})
print(f"server {srv.get('bytes_per_conn') or 0:.0f} B ({srv.get('private_bytes_per_conn') or 0:.0f} B without the binary's shared code pages), generator {agt.get('bytes_per_conn') or 0:.0f} B per connection (RSS growth)")
b = j.get('broadcast', {})
print(f"broadcast: receivers {b.get('receivers')}, last receiver {b.get('last_ms')} ms, floor ratio {b.get('floor_ratio')}")
stop = j.get('arrival', {}).get('stopped_by_memory')
if stop:
    print(f"ramp-up stopped by --min-available at {stop['connected']} connected ({stop['mem_available'] >> 20} MiB available)")
PY
