#!/bin/bash
# pairs.sh SET ROUNDS VARIANT...: ROUNDS rounds of `memd bench append
# --seconds 5 --embedder none`, one run of each VARIANT per round, the order
# rotated each round (with two variants: A first in odd rounds, B first in
# even ones), a CHECKPOINT and 10 s of rest before each run. A VARIANT is
# LABEL=BINARY, or LABEL=BINARY:VAR=VALUE to run it with one environment
# variable set. Results: /tmp/SET/SET-LABEL-ROUND.md (and .log). This
# stop's runs:
#   pairs.sh g1 4 g2=/tmp/memd-probe:MEMD_PROBE_GATHER_MS=2 g5=/tmp/memd-probe:MEMD_PROBE_GATHER_MS=5 g10=/tmp/memd-probe:MEMD_PROBE_GATHER_MS=10
#   pairs.sh g2 3 three=/tmp/memd-probe:MEMD_PROBE_GATHER_MS=10 one=/tmp/memd-listen
#   pairs.sh g3 2 two=/tmp/memd-listen one=/tmp/memd-jobs
#   pairs.sh g4 2 checks=/tmp/memd-jobs domains=/tmp/memd-domains
set=$1; rounds=$2; shift 2; variants=("$@")
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p "/tmp/$set"
run() { # run VARIANT ROUND
  local label=${1%%=*} spec=${1#*=} env=()
  [[ $spec == *:* ]] && env=("${spec#*:}")
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  env "${env[@]}" "${spec%%:*}" bench append --seconds 5 --embedder none \
    --out "/tmp/$set/$set-$label-$2.md" > "/tmp/$set/$set-$label-$2.log" 2>&1
}
n=${#variants[@]}
for round in $(seq 1 "$rounds"); do
  for i in $(seq 0 $((n - 1))); do
    run "${variants[$(( (i + round - 1) % n ))]}" "$round"
  done
done
