#!/usr/bin/env bash
# Issue 13, night of 2026-11-23: the literal bare command with phoenix.js's heartbeats.
# Quiet machine, after `throng tune --apply`. One run per code change (see BENCHMARKS.md).
set -u
T=/work/main/target/release/throng
# What 33,000 heartbeats/s cost by process count and grid (Debian's default buffers; before tune):
$T bench --connections 100000 --arrival-rate 10000 --heartbeat 3 --hold 40 --floor off --dashboard-port 0 --json hb100k-6x6.json > hb100k-6x6.txt 2>&1
$T bench --connections 100000 --arrival-rate 10000 --heartbeat 3 --hold 40 --floor off --agents 53 --dashboard-port 0 --json hb100k-6x53.json > hb100k-6x53.txt 2>&1
# 52 workers: an external server, as the bench starts one at 1,000,000
redis-server --port 6391 --save '' --appendonly no & RP=$!
$T serve --port 4101 --workers 52 --redis redis://127.0.0.1:6391 & SP=$!
sleep 3
$T bench --target 127.0.0.1:4101 --connections 100000 --arrival-rate 10000 --heartbeat 3 --hold 40 --floor off --agents 53 --dashboard-port 0 --json hb100k-52x53.json > hb100k-52x53.txt 2>&1   # before the grid
# hb100k-52x53-grid20.* and hb100k-52x53-grid100.*: the same command after the grid (20 ms, then 100 ms)
kill $SP; sleep 2; kill $RP
$T tune --apply
# the literal command (bare-1m*.txt, one per code change; bare-1m-5 and -6 with THRONG_LOG="warn,throng_server::transport=info")
timeout 2400 $T bench --connections 1000000 --broadcasts 3 --dashboard-port 0 --json bare-1m.json --report bare-1m.html > bare-1m.txt 2>&1
# the same at 19,000 in one process
timeout 900 $T bench --connections 19000 --broadcasts 3 --dashboard-port 0 --json bare-19k-train-1.json > bare-19k-train-1.txt 2>&1
