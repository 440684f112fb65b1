"""Medians (and ranges) of head and base over the A/B rounds, figure by figure.

Usage: python3 abtable.py STEP [DIR]   (DIR: where ab.sh wrote STEP-BUILD-ROUND.md; default ab/ beside this file)
"""
import glob, os, re, statistics, sys
from collections import defaultdict

def tables(path):
    """Yield (header, row) cells of every markdown table in a file."""
    header = None
    for line in open(path):
        line = line.rstrip('\n')
        if not line.startswith('|'):
            header = None
            continue
        cells = [c.strip() for c in line.strip('|').split('|')]
        if header is None:
            header = cells
        elif set(line) <= set('|-: '):
            continue
        else:
            yield header, cells

def num(s):
    m = re.match(r'^-?[\d.]+$', s.replace(',', ''))
    return float(s.replace(',', '')) if m else None

step = sys.argv[1]
root = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ab')
# key columns: text cells identify the row; numeric cells are figures
vals = defaultdict(lambda: defaultdict(list))
for path in sorted(glob.glob(f'{root}/{step}-*-*.md')):
    build = path.split('/')[-1][len(step)+1:].split('-')[0]
    for header, cells in tables(path):
        key = tuple(c for h, c in zip(header, cells) if num(c) is None or h in ('events', 'clients', 'round', 'vectors', 'size'))
        for h, c in zip(header, cells):
            v = num(c)
            if v is not None and h not in ('events', 'clients', 'round', 'vectors', 'size'):
                vals[(key, h)][build].append(v)
print(f'| {step}: row | figure | base (8829b8c): median (range) | head | head/base of medians |')
print('|---|---|---:|---:|---:|')
for (key, h), d in vals.items():
    if 'head' not in d or 'base' not in d:
        continue
    b, n = statistics.median(d['base']), statistics.median(d['head'])
    ratio = f'{n / b:.2f}' if b else '-'
    rb = f"{min(d['base']):g}–{max(d['base']):g}"
    rn = f"{min(d['head']):g}–{max(d['head']):g}"
    print(f"| {' · '.join(key)} | {h} | {b:g} ({rb}) | {n:g} ({rn}) | {ratio} |")
