#!/bin/bash
# pgss.sh BIN NAME: a kept-1M run; pg_stat_statements over the agent-turn scenarios only
bin=$1; name=$2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
log=/tmp/ab/pgss-$name.log
$bin bench acb --embedder none --sizes 1000000 --seconds 10 --restarts 1 --keep-database memd_kept1m --out /tmp/ab/pgss-$name.md > $log 2>&1 &
pid=$!
until grep -q "every question new x32" $log; do sleep 0.2; done
psql -h 127.0.0.1 -U postgres -d memd_kept1m -Atc "select pg_stat_statements_reset()" >/dev/null
until grep -q "agent turn.*x32" $log; do sleep 0.2; done
psql -h 127.0.0.1 -U postgres -d memd_kept1m -c "select calls, round(total_exec_time::numeric,1) exec_ms, round(total_plan_time::numeric,1) plan_ms, round((mean_exec_time)::numeric,3) mean_ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 150) q from pg_stat_statements where dbname_is_ok(1) order by total_exec_time+total_plan_time desc limit 25" > /tmp/ab/pgss-$name.txt 2>&1 || psql -h 127.0.0.1 -U postgres -d memd_kept1m -c "select calls, round(total_exec_time::numeric,1) exec_ms, round(total_plan_time::numeric,1) plan_ms, round((mean_exec_time)::numeric,3) mean_ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 150) q from pg_stat_statements order by total_exec_time+total_plan_time desc limit 25" > /tmp/ab/pgss-$name.txt
wait $pid
grep "agent turn" $log
