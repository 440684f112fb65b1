#!/bin/bash
# pgss-append.sh BIN NAME [extra args]: pg_stat_statements over the raw single-INSERT scenario and over memd's single-append, 1-writer scenario
bin=$1; name=$2; shift 2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
log=/tmp/ab/pgss-append-$name.log
q="select calls, round(total_exec_time::numeric,1) exec_ms, round(total_plan_time::numeric,1) plan_ms, round((mean_exec_time)::numeric,4) mean_ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 110) q from pg_stat_statements order by total_exec_time+total_plan_time desc limit 14"
P="psql -h 127.0.0.1 -U postgres -d postgres"
$bin bench append --seconds 5 --embedder none "$@" --out /tmp/ab/pgss-append-$name.md > $log 2>&1 &
pid=$!
until grep -q "listening" $log; do sleep 0.05; done
$P -Atc "select pg_stat_statements_reset()" >/dev/null
until grep -q "one row per transaction.*writers=1 " $log; do sleep 0.05; done
$P -c "$q" > /tmp/ab/pgss-append-$name-raw.txt
# The scenario just before memd's first: the floor rows in builds that have them.
if grep -q 'floor: raw INSERT of a log row' "$bin"; then before='floor: raw INSERT of a log row'
else before='raw INSERT, multi-row .*writers=8'; fi
until grep -q "$before" $log; do sleep 0.05; done
$P -Atc "select pg_stat_statements_reset()" >/dev/null
until grep -q "memd single append, one tenant.*writers=1 " $log; do sleep 0.05; done
$P -c "$q" > /tmp/ab/pgss-append-$name-single.txt
wait $pid
grep -E "writers=1 " $log
