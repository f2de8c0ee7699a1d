#!/usr/bin/env bash
# A cluster-scale run on one machine: a local redis-server, `throng serve
# --workers W --redis ...` (W from the connection count and the per-process
# open-files limit), and `throng bench --target` with as many agents as the
# count needs. Besides bench's own report (which includes the kernel's Slab
# per connection) it samples, every 2 s, what bench cannot see of a server it
# did not start: RSS of every worker plus Redis, and CPU seconds per process kind.
#
# Usage: scripts/cluster-bench.sh CONNECTIONS [extra `throng bench` args...]
#   e.g. scripts/cluster-bench.sh 1000000 --arrival-rate 20000 --hold 120 --broadcasts 3 --broadcast-interval 5
# Output: target/cluster-bench/<CONNECTIONS>/{bench.txt,bench.json,report.html,samples.csv,summary.txt}
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: scripts/cluster-bench.sh CONNECTIONS [bench args...]}; shift
out=target/cluster-bench/$n
rm -rf "$out"; mkdir -p "$out"
command -v redis-server >/dev/null || { echo "redis-server not found: apt-get install redis-server" >&2; exit 1; }
cargo build --release -p throng --quiet
bin=$PWD/target/release/throng

# The OS settings this run needs (throng tune; `throng tune --revert` undoes them), plus connection tracking, which on a box with
# netfilter loaded caps loopback connections at nf_conntrack_max.
"$bin" tune --apply --connections "$n" >/dev/null
if [ -w /proc/sys/net/netfilter/nf_conntrack_max ]; then
  want=$(( n * 2 + 100000 ))
  [ "$(cat /proc/sys/net/netfilter/nf_conntrack_max)" -ge "$want" ] || sysctl -qw net.netfilter.nf_conntrack_max=$want
fi

per_worker=$(( $(ulimit -Hn) - 600 ))
workers=$(( (n + per_worker - 1) / per_worker ))
port=${CLUSTER_PORT:-4500}
rport=${CLUSTER_REDIS_PORT:-6395}

redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
redis=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$rport) 2>/dev/null && break; sleep 0.1; done
"$bin" serve --port "$port" --bind 127.0.0.1 --workers "$workers" --redis "redis://127.0.0.1:$rport" \
  --idle-timeout 0 >"$out/serve.out" 2>"$out/serve.err" &
super=$!
cleanup() { kill "$super" 2>/dev/null || true; wait "$super" 2>/dev/null || true; kill "$redis" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 600); do
  kill -0 "$super" 2>/dev/null || { echo "throng serve exited:" >&2; tail -5 "$out/serve.err" >&2; exit 1; }
  [ "$(grep -c '^worker ' "$out/serve.out" 2>/dev/null || true)" -ge "$workers" ] && break
  sleep 0.1
done
mapfile -t wpids < <(awk '/^worker / {print $4}' "$out/serve.out")
echo "redis pid $redis, supervisor pid $super, $workers workers: ${wpids[*]}"

rss_of() { local t=0; for p in "$@"; do [ -r /proc/$p/statm ] && t=$(( t + $(awk '{print $2}' /proc/$p/statm) * 4096 )); done; echo $t; }
cpu_of() { local t=0; for p in "$@"; do [ -r /proc/$p/stat ] && t=$(( t + $(awk '{print $14+$15}' /proc/$p/stat) )); done; echo $t; }
agents() { pgrep -f "$bin agent" || true; }

base_rss=$(rss_of "${wpids[@]}" "$redis")
echo "t,server_rss,redis_rss,workers_cpu,redis_cpu,agents_cpu,agents_rss" >"$out/samples.csv"
(
  t0=$(date +%s)
  while kill -0 "$super" 2>/dev/null; do
    mapfile -t apids < <(agents)
    echo "$(( $(date +%s) - t0 )),$(rss_of "${wpids[@]}"),$(rss_of "$redis"),$(cpu_of "${wpids[@]}"),$(cpu_of "$redis"),$(cpu_of "${apids[@]}"),$(rss_of "${apids[@]}")" >>"$out/samples.csv"
    sleep 2
  done
) &
sampler=$!

"$bin" bench --target "127.0.0.1:$port" --connections "$n" --json "$out/bench.json" --report "$out/report.html" \
  --dashboard-port 0 "$@" 2>"$out/bench.err" | tee "$out/bench.txt"
sleep 2
kill "$sampler" 2>/dev/null || true

python3 - "$out" "$n" "$base_rss" "$workers" <<'PY' | tee "$out/summary.txt"
import csv, json, sys, os
out, n, base_rss, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = list(csv.DictReader(open(os.path.join(out, "samples.csv"))))
b = json.load(open(os.path.join(out, "bench.json")))
peak = max(rows, key=lambda r: int(r["server_rss"]))
hz = os.sysconf("SC_CLK_TCK")
srv = int(peak["server_rss"]) + int(peak["redis_rss"])
conn = b["connections"]["connected"]
print(f"connections: target {n}, connected {conn}, errors {b['errors']['total']}")
print(f"workers: {workers} (+ redis)")
print(f"server RSS at peak (all workers + redis): {srv/2**20:.0f} MiB; over baseline {(srv-base_rss)/max(conn,1):.0f} B per connection")
print(f"kernel Slab: {b['kernel']['bytes_per_conn']:.0f} B per connection (bench's figure; both ends of each loopback connection)")
print(f"agents RSS at peak: {int(peak['agents_rss'])/2**20:.0f} MiB in all = {int(peak['agents_rss'])/max(conn,1):.0f} B per connection, each process's baseline included (bench.json agent.bytes_per_conn is the slope)")
last = rows[-1]
agents_cpu = max(int(r["agents_cpu"]) for r in rows)
print(f"CPU seconds over the run: workers {int(last['workers_cpu'])/hz:.1f}, redis {int(last['redis_cpu'])/hz:.1f}, agents {agents_cpu/hz:.1f} (at their last sample)")
PY
