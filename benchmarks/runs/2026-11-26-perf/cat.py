import sys, subprocess, collections
# categorise perf samples: outermost syscall, and whether inside net_rx_action (packet delivery on loopback)
out = subprocess.run(["perf","script","-i",sys.argv[1],"-F","ip,sym,dso"],capture_output=True,text=True).stdout
cnt = collections.Counter(); tot=0; user=collections.Counter()
for block in out.split("\n\n"):
    lines=[l.strip() for l in block.strip().splitlines() if l.strip()]
    if not lines: continue
    tot+=1
    syms=[l.split(None,1)[1] if len(l.split(None,1))>1 else l for l in lines]
    sysc=None
    for s in syms:
        if "__x64_sys_" in s: sysc=s.split("__x64_sys_")[1].split()[0]; break
    soft = any("net_rx_action" in s for s in syms)
    if sysc is None:
        leaf=syms[0]
        k = "user:"+("throng" if "throng" in leaf else ("libc" if "libc" in leaf else leaf.split()[0][:40]))
        if "[kernel" in leaf: k="kernel-other:"+leaf.split()[0][:40]
        cnt[k]+=1
        if "throng" in leaf or "libc" in leaf:
            # innermost named frame from throng
            for s in syms:
                if "throng" in s and not s.startswith("0x") and "unknown" not in s:
                    user[s.split()[0][:90]]+=1; break
            else: user[leaf[:60]]+=1
    else:
        cnt[sysc+(" (packet delivery)" if soft else "")]+=1
for k,v in cnt.most_common(30): print(f"{100*v/tot:6.2f}%  {k}")
print("samples", tot)
if len(sys.argv)>2:
    for k,v in user.most_common(40): print(f"{100*v/tot:6.2f}%  {k}")
