#!/usr/bin/env bash
# Issue 13, 2026-11-24: the literal bare command with phoenix.js's heartbeats, after the idle-close fix.
# Quiet machine. Each 1,000,000 run sampled /proc/net/softnet_stat and the run's namespace TCP counters
# every 20 s (*-counters.txt) and logged the server's idle sweeps (THRONG_LOG below).
set -u
T=/work/main/target/release/throng
$T tune --apply      # (before 0882b5b tune lacked netdev_max_backlog: set by hand, the same 262144)
# the input backlog at 100,000 (Debian's 1,000, then 65,536):
$T bench --connections 100000 --broadcasts 3 --heartbeat 3 --dashboard-port 0 --json backlog-100k-debian-1000.json > backlog-100k-debian-1000.txt 2>&1
sysctl -w net.core.netdev_max_backlog=65536
$T bench --connections 100000 --broadcasts 3 --heartbeat 3 --dashboard-port 0 --json backlog-100k-65536-1.json > backlog-100k-65536-1.txt 2>&1
sysctl -w net.core.netdev_max_backlog=262144
# before the fix (bb2b64f; before-1m-2-diag with TCP_INFO printed at each idle close, on both ends):
THRONG_LOG="warn,throng_server::transport=info" $T bench --connections 1000000 --broadcasts 3 --dashboard-port 0 --json before-1m-1.json > before-1m-1.txt 2>&1
# after the fix (3929e66; bare-1m-2 and -3 also with 0882b5b; bare-1m-4 at b91815f, after its own `throng tune --apply`):
THRONG_LOG="warn,throng_server::transport=info" $T bench --connections 1000000 --broadcasts 3 --dashboard-port 0 --json bare-1m-1.json > bare-1m-1.txt 2>&1
# the same at 19,000 in one process
$T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json bare-19k-1.json > bare-19k-1.txt 2>&1
# after the review (861c171), tuned, twice; and once on Debian's settings (final-19k.txt)
$T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json final-19k-tuned-1.json > final-19k-tuned-1.txt 2>&1
# GET /, old against new, alternated five times (Debian's settings)
#   for b in old new; do $b serve --port 4310 --bind 127.0.0.1 & ...; wrk -t2 -c64 -d10s http://127.0.0.1:4310/; done
# The floor over the same heartbeats (fd51e0b: floor sockets heartbeat on their users' schedule, writers answer;
# floorhb-1m-1 and floorhb-19k-1 at fd51e0b; floorhb-1m-2/3 and floorhb-19k-2/3 at 764c5e9, the short-read mend), tuned, quiet machine:
$T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json floorhb-19k-1.json > floorhb-19k-1.txt 2>&1
THRONG_LOG="warn,throng_server::transport=info" $T bench --connections 1000000 --broadcasts 3 --dashboard-port 0 --json floorhb-1m-1.json > floorhb-1m-1.txt 2>&1
for i in 2 3; do THRONG_LOG="warn,throng_server::transport=info" $T bench --connections 1000000 --broadcasts 3 --dashboard-port 0 --json floorhb-1m-$i.json > floorhb-1m-$i.txt 2>&1; done
for i in 2 3 4 5; do $T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json floorhb-19k-$i.json > floorhb-19k-$i.txt 2>&1; done
for i in 1 2 3 4; do $T bench --connections 19000 --broadcasts 1 --dashboard-port 0 --json floorhb-19k-one-$i.json > floorhb-19k-one-$i.txt 2>&1; done
# and once on Debian's settings (after restoring them): $T bench --connections 19000 --broadcasts 3 --dashboard-port 0 > floorhb-19k-debian.txt 2>&1
# after the review (53073a8..696d9e7: the agent's write loop now one shared helper), Debian's settings, twice:
for i in 1 2; do $T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json review-19k-debian-$i.json > review-19k-debian-$i.txt 2>&1; done
