#!/bin/bash
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
for i in 1 2 3; do
  for b in base2 new; do
    vmstat 5 > /tmp/ab/vm-$b-$i.txt & vm=$!
    /tmp/memd-$b bench append --seconds 5 --embedder none --out /tmp/ab/ab2-$b-$i.md > /tmp/ab/ab2-$b-$i.log 2>&1
    kill $vm
  done
done
