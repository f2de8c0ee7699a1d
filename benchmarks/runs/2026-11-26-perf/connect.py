#!/usr/bin/env python3
"""Server CPU per connect+join by schedstat.
usage: connect.py BIN N RATE [embedded|target] [extra bench args...]
target: starts `BIN serve` itself, bench --target; embedded: the bench's own server.
Prints: schedstat us/join over [start, all joined], wake-ups per join (the
threads' times put on a CPU), the bench's us/join, joins/s.
Environment: BENCH_BIN (the bench's binary, default BIN), DONE_METRIC (the
counter that ends the window, default throng_joins_total: throng_websockets
for connect-only.xml), PIN_SHARDS=1 (each shard thread on its own CPU),
SYSCALLS=1 (system calls per connection from perf stat)."""
import os, sys, subprocess, time, json, glob, urllib.request, re, tempfile

def sched(pid, field=0):
    t = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try: t += int(open(f).read().split()[field])
        except Exception: pass
    return t

def metric(port, name):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except Exception: return None
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None

binp, n, rate, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
extra = sys.argv[5:]
js = tempfile.mktemp(suffix=".json")
args = [os.environ.get("BENCH_BIN", binp), "bench", "--connections", str(n), "--heartbeat", "0", "--hold", "2",
        "--floor", "off", "--dashboard-port", "0", "--json", js, "--report", "/dev/null"]
if rate != "adaptive": args += ["--arrival-rate", rate]
srv = None
if mode == "target":
    port = 4700 + os.getpid() % 200
    srv = subprocess.Popen([binp, "serve", "--port", str(port), "--bind", "127.0.0.1", "--public-metrics",
                            "--api-bind", "none", "--idle-timeout", "0"] + [a[len("--server-arg="):] for a in extra if a.startswith("--server-arg=")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    spid = srv.pid
    if os.environ.get("PIN_SHARDS"):
        # each shard thread on its own CPU: throng-shard-N on CPU N mod the CPUs
        for t in glob.glob(f"/proc/{spid}/task/*"):
            name = open(t + "/comm").read().strip()
            if name.startswith("throng-shard-"):
                cpu = int(name.rsplit("-", 1)[1]) % os.cpu_count()
                os.sched_setaffinity(int(t.rsplit("/", 1)[1]), {cpu})
    args += ["--target", f"127.0.0.1:{port}"]
    extra = [a for a in extra if not a.startswith("--server-arg=")]
bench = subprocess.Popen(args + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if mode != "target":
    spid = None; port = None
    while spid is None:
        time.sleep(0.02)
        out = subprocess.run(["pgrep", "-P", str(bench.pid)], capture_output=True, text=True).stdout.split()
        for p in out:
            try:
                if b"serve" in open(f"/proc/{p}/cmdline","rb").read(): spid = int(p)
            except Exception: pass
    while port is None:
        time.sleep(0.02)
        o = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
        for l in o.splitlines():
            if f"pid={spid}," in l: port = int(l.split()[3].rsplit(":",1)[1])
pf = None
if os.environ.get("SYSCALLS"):
    ev = []
    for n_ in ["accept4","recvfrom","sendto","epoll_wait","epoll_ctl","close"]:
        ev += ["-e", f"syscalls:sys_enter_{n_}"]
    ev += ["-e", "syscalls:sys_exit_accept4", "--filter", "ret < 0", "-e", "syscalls:sys_exit_recvfrom", "--filter", "ret < 0"]
    ev += ["-e", "context-switches", "-e", "cpu-migrations"]
    pf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", js + ".perf", "-p", str(spid)] + ev)
    time.sleep(0.3)
s0 = sched(spid, 2); c0 = sched(spid); t0 = time.time()
cpu_all = None
while bench.poll() is None:
    time.sleep(0.2)
    j = metric(port, os.environ.get("DONE_METRIC", "throng_joins_total"))
    if j is not None and j >= n:
        cpu_all = sched(spid) - c0; slices = sched(spid, 2) - s0; t_all = time.time() - t0
        if pf: pf.send_signal(2); pf.wait()
        break
bench.wait()
if srv: srv.terminate(); srv.wait()
r = json.load(open(js)); os.unlink(js)
sc = {}
if pf:
    for l in open(js + ".perf"):
        p_ = l.strip().split(",")
        if len(p_) > 3 and p_[0].replace(".","").isdigit(): sc[p_[2].split(":")[-1]] = round(float(p_[0]) / n, 3)
a = r.get("arrival", {})
print(json.dumps({"sched_us_per_join": round(cpu_all/1000/n,2) if cpu_all else None, "wakes_per_join": round(slices / n, 2) if cpu_all else None, "secs": round(t_all,2) if cpu_all else None,
      "bench_us_per_join": r["arrival"].get("server_cpu_us_per_join"), "joins_per_s": round(r["arrival"]["per_sec"]),
      "joined": r["connections"]["joined"], "errors": r["errors"]["total"], "server_B_per_conn": r["server"].get("bytes_per_conn"),
      "kernel_B_per_conn": r.get("kernel",{}).get("bytes_per_conn"), "agent_B_per_conn": r.get("agent",{}).get("bytes_per_conn"), "syscalls_per_conn": sc, "connect_p50": r["connect"]["p50_ms"], "join_p50": r["join"]["p50_ms"]}))
