#!/bin/bash
# lag.sh OLD NEW: projection lag at 1,000 events/s over 8 tenants, two runs
# of each binary alternated (`memd bench project --sizes 1000 --embed-sizes 0
# --embedder none`). Results: /tmp/lag/lag-{old,new}-{1,2}.md.
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p /tmp/lag
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then bin=$1; else bin=$2; fi
    psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 5
    "$bin" bench project --sizes 1000 --embed-sizes 0 --embedder none \
      --out /tmp/lag/lag-$v-$i.md > /tmp/lag/lag-$v-$i.log 2>&1
  done
done
