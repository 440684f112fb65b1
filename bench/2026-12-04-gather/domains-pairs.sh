#!/bin/bash
# pairs.sh SET PAIRS: the build before (the log's CHECKs on the table) against
# the log's rules as domains, order alternating.
set=$1; pairs=$2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p /tmp/$set
run() {
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  case $1 in
    checks) /tmp/memd-jobs bench append --seconds 5 --embedder none --out /tmp/$set/$set-checks-$2.md > /tmp/$set/$set-checks-$2.log 2>&1 ;;
    domains) /tmp/memd-domains bench append --seconds 5 --embedder none --out /tmp/$set/$set-domains-$2.md > /tmp/$set/$set-domains-$2.log 2>&1 ;;
  esac
}
for pair in $(seq 1 "$pairs"); do
  if (( pair % 2 )); then run checks $pair; run domains $pair; else run domains $pair; run checks $pair; fi
done
echo done > /tmp/$set/done
