#!/bin/bash
# pairs.sh SET PAIRS: rounds of `memd bench append`: the probe build at a
# 10 ms gather window (three listening sessions) against the shared-listener
# build (10 ms by default), order alternating.
set=$1; pairs=$2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p /tmp/$set
run() {
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  case $1 in
    three) MEMD_PROBE_GATHER_MS=10 /tmp/memd-probe bench append --seconds 5 --embedder none --out /tmp/$set/$set-three-$2.md > /tmp/$set/$set-three-$2.log 2>&1 ;;
    one) /tmp/memd-listen bench append --seconds 5 --embedder none --out /tmp/$set/$set-one-$2.md > /tmp/$set/$set-one-$2.log 2>&1 ;;
  esac
}
for pair in $(seq 1 "$pairs"); do
  if (( pair % 2 )); then run three $pair; run one $pair; else run one $pair; run three $pair; fi
done
echo done > /tmp/$set/done
