#!/bin/bash
# The after binary at 100,000 (6 workers + Redis), lifecycle events off against on (the trivial backend).
cd "$(dirname "$0")"
AFTER=${AFTER:-/work/wt/regress/target/ci/throng}
python3 events-backend.py 4591 & bk=$!
sleep 1
for i in ${1:-1}; do
  for side in off on; do
    extra=(); [ $side = on ] && extra=(--server-arg=--hook-url=http://127.0.0.1:4591 --server-arg=--hook-events)
    echo "== events-$side 100k run $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    timeout 600 $AFTER bench --connections 100000 --arrival-rate 5000 --broadcasts 2 --broadcast-interval 5 --dashboard-port 0 "${extra[@]}" \
      --json events-$side-100k-5000-$i.json --report /tmp/regress-events-$side-100k-$i.html > events-$side-100k-5000-$i.txt 2>&1
    echo "rc=$? backend took $(curl -s http://127.0.0.1:4591/) events so far"
  done
done
kill $bk; wait $bk 2>/dev/null
