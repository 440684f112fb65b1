#!/usr/bin/env bash
# What the log's two optional-filter indexes cost an INSERT of log rows: four copies of `events`
# (all indexes; without the tags GIN; without (tenant_id, ts); without both), pgbench, alternated.
cd /tmp/idx; export DATABASE_URL=postgres://postgres@127.0.0.1:5432/memd_idx
for round in 1 2 3; do
  order="t_all t_no_tags t_no_ts t_neither"; (( round % 2 )) || order="t_neither t_no_ts t_no_tags t_all"
  for mode in one:1 many:1 many:8; do
    file=${mode%:*}; clients=${mode#*:}
    for t in $order; do
      psql -q $DATABASE_URL -c CHECKPOINT; sleep 2
      tps=$(pgbench -n -T 15 -c $clients -j $(( clients > 1 ? 2 : 1 )) -f $file-$t.sql $DATABASE_URL 2>&1 | grep -oP 'tps = \K[0-9.]+')
      echo "$round $file $clients $t $tps" | tee -a results.txt
    done
  done
done
