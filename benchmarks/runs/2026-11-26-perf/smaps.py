import sys,re
def regions(pid):
    out={}; cur=None
    for l in open(f"/proc/{pid}/smaps"):
        if re.match(r'^[0-9a-f]+-[0-9a-f]+ ', l):
            parts=l.split(); cur=(parts[0], parts[5] if len(parts)>5 else "[anon]"); out[cur]=0
        elif l.startswith("Rss:"): out[cur]=int(l.split()[1])
    return out
import json
if sys.argv[1]=="snap": json.dump({f"{k[0]} {k[1]}":v for k,v in regions(sys.argv[2]).items()}, open(sys.argv[3],"w"))
else:
    a=json.load(open(sys.argv[2])); b=json.load(open(sys.argv[3])); n=int(sys.argv[4])
    rows=[]
    for k,v in b.items():
        d=v-a.get(k,0)
        if abs(d)>=16: rows.append((d,k,v))
    for d,k,v in sorted(rows,reverse=True): print(f"{d:8d} kB  {d*1024/n:7.1f} B/conn  now {v} kB  {k}")
    print("total", sum(b.values())-sum(a.values()), "kB", (sum(b.values())-sum(a.values()))*1024/n, "B/conn")
