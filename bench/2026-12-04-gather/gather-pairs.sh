#!/bin/bash
# pairs.sh SET PAIRS G...: PAIRS rounds of `memd bench append` with the probe
# build at each gather window G (ms), order rotated each round.
set=$1; pairs=$2; shift 2; gs=("$@")
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p /tmp/$set
run() {
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  MEMD_PROBE_GATHER_MS=$1 /tmp/memd-probe bench append --seconds 5 --embedder none --out /tmp/$set/$set-g$1-$2.md > /tmp/$set/$set-g$1-$2.log 2>&1
}
n=${#gs[@]}
for pair in $(seq 1 "$pairs"); do
  for i in $(seq 0 $((n-1))); do
    g=${gs[$(( (i + pair - 1) % n ))]}
    run "$g" "$pair"
  done
done
echo done
