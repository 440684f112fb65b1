#!/bin/bash
# pgss8.sh BIN NAME: pg_stat_statements over memd's single-append scenario with 8 writers on one tenant
bin=$1; name=$2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
log=/tmp/ab/pgss8-$name.log
q="select calls, plans, round(total_exec_time::numeric,1) exec_ms, round(total_plan_time::numeric,1) plan_ms, round((mean_exec_time)::numeric,4) mean_ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 90) q from pg_stat_statements order by total_exec_time+total_plan_time desc limit 12"
P="psql -h 127.0.0.1 -U postgres -d postgres"
$bin bench append --seconds 5 --embedder none --out /tmp/ab/pgss8-$name.md > $log 2>&1 &
pid=$!
until grep -q "memd single append, one tenant.*writers=1 " $log; do sleep 0.05; done
$P -Atc "select pg_stat_statements_reset()" >/dev/null
until grep -q "memd single append, one tenant.*writers=8 " $log; do sleep 0.05; done
$P -c "$q" > /tmp/ab/pgss8-$name.txt
wait $pid
grep -E "one tenant.*writers=8 " $log
