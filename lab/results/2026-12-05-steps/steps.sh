#!/bin/bash
# steps.sh BIN: how many events a live projection step carries while one
# writer appends single events. Runs `BIN bench append --seconds 12
# --embedder none`; during its first memd scenario (single append, one
# tenant, one writer) reads the scratch database's statistics twice, 6 s
# apart: events inserted, and cursor rows updated (each step updates the
# six projectors' cursors, so steps = updates / 6). PostgreSQL flushes
# these counters about once a second, so take the ratio as +-15%.
bin=$1; work=$(mktemp -d)
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
"$bin" bench append --seconds 12 --embedder none --out "$work/append.md" > /dev/null 2> "$work/log" &
bench=$!
# The scenario just before memd's first: the floor rows in builds that have them.
if grep -q 'floor: raw INSERT of a log row' "$bin"; then before='floor: raw INSERT of a log row'
else before='raw INSERT, multi-row .*writers=8'; fi
until grep -q "$before" "$work/log"; do sleep 0.2; done
sleep 2
db=$(psql -h 127.0.0.1 -U postgres -Atc "select datname from pg_database where datname like 'memd_bench%' order by oid desc limit 1")
q="select coalesce(sum(n_tup_ins) filter (where relname='events'),0), coalesce(sum(n_tup_upd) filter (where relname='cursors'),0), coalesce(sum(n_tup_ins) filter (where relname like 'chunks%'),0), (select xact_commit from pg_stat_database where datname=current_database()) from pg_stat_user_tables"
a=$(psql -h 127.0.0.1 -U postgres -d $db -Atc "$q"); sleep 6
b=$(psql -h 127.0.0.1 -U postgres -d $db -Atc "$q")
echo "db=$db before=$a after=$b"
psql -h 127.0.0.1 -U postgres -d $db -Atc "select relname, n_tup_ins, n_tup_upd from pg_stat_user_tables where n_tup_ins+n_tup_upd>0 order by 2 desc limit 20"
wait $bench; grep 'single append, one tenant *writers=1 ' "$work/log"
