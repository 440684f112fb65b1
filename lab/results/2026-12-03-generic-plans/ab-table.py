# ab-table.py DIR SET [A B]: the table of DIR/SET-<build>-<pair>.md runs of
# builds A (default base2) and B (default new), with the ratios of B's
# medians to A's.
import re, glob, statistics, sys
d, pre = sys.argv[1], sys.argv[2]
a, b = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else ("base2", "new")
rows = {}
for f in sorted(glob.glob(f"{d}/{pre}-*-*.md")):
    build, i = re.match(rf".*/{pre}-(\w+)-(\d)\.md", f).groups()
    for line in open(f):
        c = [x.strip() for x in line.split("|")[1:-1]]
        if len(c) == 11 and c[1].isdigit():
            rows.setdefault((c[0], int(c[1])), {}).setdefault(build, []).append(
                (int(i), float(c[4]), float(c[6]), int(c[9]) + int(c[10])))
print(f"| scenario | writers | {a} events/s | {b} events/s | {a} p95 ms | {b} p95 ms | {a} CPU µs/event | {b} CPU µs/event | events/s {b}/{a} | CPU {b}/{a} |")
print("|---|---:|---|---|---|---|---|---|---:|---:|")
for (s, w), v in rows.items():
    if a not in v or b not in v:
        continue
    A, B = sorted(v[a]), sorted(v[b])
    f = lambda L, k: ", ".join(f"{x[k]:.2f}" if k == 2 else f"{x[k]:.0f}" for x in L)
    med = lambda L, k: statistics.median(x[k] for x in L)
    print(f"| {s} | {w} | {f(A,1)} | {f(B,1)} | {f(A,2)} | {f(B,2)} | {f(A,3)} | {f(B,3)} | {med(B,1)/med(A,1):.2f} | {med(B,3)/med(A,3):.2f} |")
