#!/bin/bash
# pairs.sh SET PAIRS: the shared listener build with apalis listening apart (two sessions) against
# the job worker woken by the shared listener too (one session), order alternating.
set=$1; pairs=$2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p /tmp/$set
run() {
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  case $1 in
    two) /tmp/memd-listen bench append --seconds 5 --embedder none --out /tmp/$set/$set-two-$2.md > /tmp/$set/$set-two-$2.log 2>&1 ;;
    one) /tmp/memd-jobs bench append --seconds 5 --embedder none --out /tmp/$set/$set-one-$2.md > /tmp/$set/$set-one-$2.log 2>&1 ;;
  esac
}
for pair in $(seq 1 "$pairs"); do
  if (( pair % 2 )); then run two $pair; run one $pair; else run one $pair; run two $pair; fi
done
echo done > /tmp/$set/done
