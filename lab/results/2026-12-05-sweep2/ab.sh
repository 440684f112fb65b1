#!/usr/bin/env bash
# Alternated A/B of bench commands: head (this stop's build) and base (8829b8c, before issue 16's changes).
# Usage: ab.sh ROUNDS step...   Results: /tmp/ab/<step>-<build>-<round>.md
set -u
cd /work/main
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
rounds=$1; shift  # results in /tmp/ab (copied to ab/ beside this script)
declare -A bin=([head]=/work/main/target/release/memd [base]=/work/base16/target/release/memd)
one() {
  step=$1 b=$2 r=$3
  out=/tmp/ab/$step-$b-$r.md
  psql -q "$DATABASE_URL" -c CHECKPOINT; sleep 5
  s=$(date +%s)
  case $step in
    console) ${bin[$b]} bench console --out $out ;;
    locomo) ${bin[$b]} bench locomo --out $out ;;
    acb-hybrid) ${bin[$b]} bench acb --embedder minilm --sizes 10000 --seconds 5 --restarts 5 --out $out ;;
    vectors) ${bin[$b]} bench vectors --count 1000000 --out $out ;;
    drills) ${bin[$b]} drill kill --rounds 10 --out $out ;;
  esac > /tmp/ab/$step-$b-$r.out 2>&1
  echo "$(date -u +%H:%M:%S) $step $b round $r rc=$? $(( $(date +%s) - s )) s" >> /tmp/ab/log
}
for r in $(seq 1 $rounds); do
  if (( r % 2 )); then order="head base"; else order="base head"; fi
  for step in "$@"; do for b in $order; do one $step $b $r; done; done
done
echo "$(date -u +%H:%M:%S) done" >> /tmp/ab/log
