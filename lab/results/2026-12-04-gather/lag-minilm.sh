#!/bin/bash
# Projection and embedding lag with MiniLM beside, before (2 ms) and after.
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
for i in 1 2; do
  for v in g2 new; do
    if (( i == 2 )); then v=$([ $v = g2 ] && echo new || echo g2); fi
    psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 5
    if [ $v = g2 ]; then bin=/tmp/memd-probe; else bin=/tmp/memd-listen; fi
    MEMD_PROBE_GATHER_MS=2 $bin bench project --embedder minilm --model-dir /work/main/.models/all-minilm-l6-v2 --sizes 1000 --embed-sizes 0 --seconds 10 --out /tmp/g2/lag-minilm-$v-$i.md > /tmp/g2/lag-minilm-$v-$i.log 2>&1
  done
done
