#!/bin/bash
# ab-pairs.sh SET A B PAIRS: PAIRS pairs of `memd bench append` runs of the
# builds /tmp/memd-A and /tmp/memd-B, A first in odd pairs and B first in
# even ones, with a CHECKPOINT and a 10 s rest before each run (the run
# before leaves WAL to flush and a dropped scratch database behind).
# Results: /tmp/SET/SET-<build>-<pair>.md.
#   ab5: ab-pairs.sh ab5 base2 new 4
#   ab6: ab-pairs.sh ab6 apponly new 2
set=$1; a=$2; b=$3; pairs=$4
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
mkdir -p /tmp/$set
run() {
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  vmstat 5 > /tmp/$set/vm-$1-$2.txt & vm=$!
  /tmp/memd-$1 bench append --seconds 5 --embedder none --out /tmp/$set/$set-$1-$2.md > /tmp/$set/$set-$1-$2.log 2>&1
  kill $vm
}
for pair in $(seq 1 "$pairs"); do
  if (( pair % 2 )); then run "$a" "$pair"; run "$b" "$pair"
  else run "$b" "$pair"; run "$a" "$pair"; fi
done
