#!/bin/bash
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
for i in 1 2; do
  for v in g2 new; do
    psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 5
    if [ $v = g2 ]; then MEMD_PROBE_GATHER_MS=2 /tmp/memd-probe bench project --sizes 1000 --embed-sizes 0 --embedder none --out /tmp/g2/lag-$v-$i.md > /tmp/g2/lag-$v-$i.log 2>&1
    else /tmp/memd-listen bench project --sizes 1000 --embed-sizes 0 --embedder none --out /tmp/g2/lag-$v-$i.md > /tmp/g2/lag-$v-$i.log 2>&1; fi
  done
done
echo done > /tmp/g2/lagdone
