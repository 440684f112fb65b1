"""Restart ms (median of every round) and events acknowledged per round, per build, over ab/drills-*.md."""
import glob, os, statistics

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ab')
for build in ('base', 'head'):
    restarts, acknowledged, lost_or_duplicated = [], [], 0
    for path in glob.glob(f'{here}/drills-{build}-*.md'):
        for line in open(path):
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if len(cells) == 10 and cells[0].isdigit():
                acknowledged.append(int(cells[1]))
                lost_or_duplicated = max(lost_or_duplicated, int(cells[5]) + int(cells[6]))
                restarts.append(float(cells[7]))
    print(f'{build}: restart median {statistics.median(restarts):g} ms over {len(restarts)}, '
          f'acknowledged per round median {statistics.median(acknowledged):g}, lost+duplicated {lost_or_duplicated}')
