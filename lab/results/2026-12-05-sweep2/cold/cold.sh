#!/usr/bin/env bash
# Cold first bundle, head vs base, each on its own kept 10k MiniLM history; ROUNDS alternated.
set -u
cd /work/main
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
rounds=$1; shift
declare -A bin=([head]=${HEAD_BIN:-/work/main/target/release/memd} [base]=/work/base16/target/release/memd)
for r in $(seq 1 $rounds); do
  if (( r % 2 )); then order="head base"; else order="base head"; fi
  for b in $order; do
    psql -q "$DATABASE_URL" -c CHECKPOINT; sleep 3
    ${bin[$b]} bench acb --embedder minilm --sizes 10000 --seconds 1 --restarts 15 --keep-database memd_cold_$b --out ${OUT:-/tmp/cold}/$b-$r.md > ${OUT:-/tmp/cold}/$b-$r.out 2>&1
    echo "$(date -u +%H:%M:%S) $b $r rc=$? $(grep -h '^| 10000 | cold' ${OUT:-/tmp/cold}/$b-$r.md | head -1)" >> ${OUT:-/tmp/cold}/log
  done
done
