#!/usr/bin/env python3
"""abtable.py SET: the medians over rounds of each `bench acb` figure of
ab.sh's runs in /tmp/SET, head against base (ratio head/base)."""
import glob
import re
import statistics
import sys
from collections import defaultdict

set_name = sys.argv[1]
figures = defaultdict(lambda: defaultdict(list))  # (scenario, clients) -> label -> [(rate, p50, p95)]
for path in sorted(glob.glob(f"/tmp/{set_name}/{set_name}-*-*.md")):
    label = re.match(rf".*/{set_name}-(\w+)-\d+\.md", path).group(1)
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 12 and cells[0].isdigit():
                scenario, clients = cells[1], int(cells[2])
                figures[(scenario, clients)][label].append(
                    (float(cells[4]), float(cells[5]), float(cells[6])))
print("| scenario | clients | base bundles/s | head bundles/s | ratio | base p50 | head p50 | base p95 | head p95 | p95 ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (scenario, clients), runs in figures.items():
    med = {label: [statistics.median(x[i] for x in values) for i in range(3)]
           for label, values in runs.items()}
    if "base" not in med or "head" not in med:
        continue
    b, h = med["base"], med["head"]
    print(f"| {scenario} | {clients} | {b[0]:.0f} | {h[0]:.0f} | {h[0] / b[0]:.2f} | "
          f"{b[1]:.2f} | {h[1]:.2f} | {b[2]:.2f} | {h[2]:.2f} | {h[2] / b[2]:.2f} |")
print(f"\nRounds: {', '.join(f'{k}: {len(v)}' for k, v in next(iter(figures.values())).items())}")
