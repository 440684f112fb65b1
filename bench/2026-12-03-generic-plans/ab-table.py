import re,glob,statistics,sys
d=sys.argv[1]; pre=sys.argv[2]
rows={}
for f in sorted(glob.glob(f"{d}/{pre}-*-*.md")):
    b,i=re.match(rf".*/{pre}-(\w+)-(\d)\.md",f).groups()
    for line in open(f):
        c=[x.strip() for x in line.split("|")[1:-1]]
        if len(c)==11 and c[1].isdigit():
            key=(c[0],int(c[1]))
            rows.setdefault(key,{}).setdefault(b,[]).append((int(i),float(c[4]),float(c[6]),int(c[9])+int(c[10])))
print("| scenario | writers | base2 events/s | new events/s | base2 p95 ms | new p95 ms | base2 CPU µs/event | new CPU µs/event | events/s new/base2 | CPU new/base2 |")
print("|---|---:|---|---|---|---|---|---|---:|---:|")
for (s,w),v in rows.items():
    if 'base2' not in v or 'new' not in v: continue
    B=sorted(v['base2']); N=sorted(v['new'])
    f=lambda L,k: ", ".join(f"{x[k]:.0f}" if k!=2 else f"{x[k]:.2f}" for x in L)
    med=lambda L,k: statistics.median(x[k] for x in L)
    print(f"| {s} | {w} | {f(B,1)} | {f(N,1)} | {f(B,2)} | {f(N,2)} | {f(B,3)} | {f(N,3)} | {med(N,1)/med(B,1):.2f} | {med(N,3)/med(B,3):.2f} |")
