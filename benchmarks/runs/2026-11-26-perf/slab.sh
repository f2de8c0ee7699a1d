#!/bin/bash
# slab.sh BIN N: /proc/slabinfo growth per connection at the plateau (both ends on loopback)
BIN=$1; N=${2:-18000}
PORT=$((4900 + RANDOM % 90))
$BIN serve --port $PORT --bind 127.0.0.1 --public-metrics --api-bind none --idle-timeout 0 >/dev/null 2>&1 &
SP=$!
sleep 0.5
cat /proc/slabinfo > /tmp/perf-h/slab0.txt; grep -E "^(Slab|SUnreclaim|SReclaimable)" /proc/meminfo > /tmp/perf-h/mem0.txt
$BIN bench --target 127.0.0.1:$PORT --connections $N --arrival-rate 6000 --heartbeat 0 --hold 10 --floor off --dashboard-port 0 --report /dev/null >/dev/null 2>&1 &
B=$!
for i in $(seq 1 100); do sleep 0.2; j=$(curl -s 127.0.0.1:$PORT/metrics | grep "^throng_joins_total" | cut -d' ' -f2); [ "$j" = "$N" ] && break; done
sleep 1
cat /proc/slabinfo > /tmp/perf-h/slab1.txt; grep -E "^(Slab|SUnreclaim|SReclaimable)" /proc/meminfo > /tmp/perf-h/mem1.txt
wait $B; kill $SP; wait $SP
python3 - $N <<'PY'
import sys
n=int(sys.argv[1])
def rd(p):
    d={}
    for l in open(p).readlines()[2:]:
        f=l.split(); d[f[0]]=(int(f[2]),int(f[3]))  # num_objs, objsize
    return d
a=rd('/tmp/perf-h/slab0.txt'); b=rd('/tmp/perf-h/slab1.txt')
rows=[]
for k,(no,sz) in b.items():
    d=(no-a.get(k,(0,0))[0])*sz
    if d>n*4: rows.append((d/n,k,(no-a.get(k,(0,0))[0])/n,sz))
tot=0
for bpc,k,objs,sz in sorted(rows,reverse=True):
    tot+=bpc; print(f"{bpc:8.0f} B/conn  {objs:5.2f} objs/conn x {sz:5d} B  {k}")
print(f"{tot:8.0f} B/conn in the caches listed")
m0={l.split(':')[0]:int(l.split()[1]) for l in open('/tmp/perf-h/mem0.txt')}
m1={l.split(':')[0]:int(l.split()[1]) for l in open('/tmp/perf-h/mem1.txt')}
for k in m0: print(k, round((m1[k]-m0[k])*1024/n), "B/conn")
PY
