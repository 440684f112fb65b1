#!/bin/bash
# ab.sh SET ROUNDS VARIANT...: ROUNDS rounds of `memd bench acb --embedder
# minilm --sizes 10000 --seconds 5 --restarts 5`, one run of each VARIANT
# per round, the order rotated each round (with two variants: A first in odd
# rounds, B first in even ones), a CHECKPOINT and 10 s of rest before each
# run. A VARIANT is LABEL=BINARY. Results: /tmp/SET/SET-LABEL-ROUND.md.
# This stop's run (head: issues 64 and 65's work; base: 70af577, the build
# before it):
#   ab.sh acb 3 base=/tmp/memd-base head=/tmp/memd-head
set=$1; rounds=$2; shift 2; variants=("$@")
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p "/tmp/$set"
run() { # run VARIANT ROUND
  local label=${1%%=*} binary=${1#*=}
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  "$binary" bench acb --embedder minilm --sizes 10000 --seconds 5 --restarts 5 \
    --out "/tmp/$set/$set-$label-$2.md" > "/tmp/$set/$set-$label-$2.log" 2>&1
}
n=${#variants[@]}
for round in $(seq 1 "$rounds"); do
  for i in $(seq 0 $((n - 1))); do
    run "${variants[$(( (i + round - 1) % n ))]}" "$round"
  done
done
