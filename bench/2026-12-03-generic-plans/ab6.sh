#!/bin/bash
# Pairs of memd bench append, the order alternating between pairs, with a
# CHECKPOINT and a 10 s rest before each run (the run before leaves WAL to
# flush and a dropped scratch database behind).
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
run() {
  psql -h 127.0.0.1 -U postgres -d postgres -qAtc CHECKPOINT; sleep 10
  vmstat 5 > /tmp/ab6/vm-$1-$2.txt & vm=$!
  /tmp/memd-$1 bench append --seconds 5 --embedder none --out /tmp/ab6/ab6-$1-$2.md > /tmp/ab6/ab6-$1-$2.log 2>&1
  kill $vm
}
run apponly 1; run new 1
run new 2; run apponly 2
