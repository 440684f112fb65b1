#!/bin/bash
# rows.sh BIN: what one row of the log and one chunk row cost PostgreSQL,
# piece by piece. pgbench, one client, prepared statements, 10 s each, one
# row per transaction, on a database memd migrated (memd_rows, dropped
# after): the raw INSERT of `memd bench append`; an event row into copies
# of `events` with fewer of its indexes and constraints; the append's head
# update and notification around it; a chunk row with synchronous_commit
# off, as live projection writes it. Output: rows.txt here.
bin=$1; url=postgres://postgres@127.0.0.1:5432; db=$url/memd_rows
here=$(dirname "$0"); work=$(mktemp -d)
psql -qX $url/postgres -c "DROP DATABASE IF EXISTS memd_rows" -c "CREATE DATABASE memd_rows"
$bin --database-url $db migrate > /dev/null 2>&1
text='Benchmark message 17 from writer 0: the build on main failed in the migrations step because the events table gained a column; rerun after applying 20261122000001_event_log.sql.'
psql -qX $db <<SQL
INSERT INTO tenants (tenant_id) VALUES ('t');
INSERT INTO tenant_heads (tenant_id) VALUES ('t') ON CONFLICT DO NOTHING;
CREATE SEQUENCE n;
CREATE TABLE bench_raw (id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, body JSONB NOT NULL);
-- LIKE copies columns, CHECKs, defaults and indexes, not the foreign key.
CREATE TABLE ev_all (LIKE events INCLUDING ALL);
ALTER TABLE ev_all ADD FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id);
CREATE TABLE ev_no_fk (LIKE events INCLUDING ALL);
CREATE TABLE ev_no_gin (LIKE events INCLUDING ALL);
ALTER TABLE ev_no_gin ADD FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id);
DROP INDEX ev_no_gin_tags_idx;
CREATE TABLE ev_pk_only (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS, PRIMARY KEY (tenant_id, seq));
CREATE TABLE ev_bare (LIKE events, PRIMARY KEY (tenant_id, seq));
SQL
event() { # event TABLE
  echo "INSERT INTO $1 (tenant_id, seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id, kind, sensitivity, tags, content, refs, prev_hash, hash)
  SELECT 't', v, 'e' || v, now(), now(), 'bench-session-0', 'private', 'agent', 'agent-0', 'message', 'none', '{bench,throughput}', '{\"text\": \"$text\"}', '{}', decode(repeat('ab', 32), 'hex'), decode(repeat('cd', 32), 'hex') FROM nextval('n') AS v"
}
echo "INSERT INTO bench_raw (tenant, body) VALUES ('t', '{\"text\": \"$text\"}');" > $work/raw.sql
for t in ev_bare ev_pk_only ev_no_fk ev_no_gin ev_all; do echo "$(event $t);" > $work/$t.sql; done
cat > $work/append.sql <<SQL
WITH head AS (UPDATE tenant_heads SET seq = seq + 1 WHERE tenant_id = 't' RETURNING pg_notify('bench_rows', 't:' || seq)),
     inserted AS ($(event ev_all) CROSS JOIN head RETURNING 1)
SELECT count(*) FROM inserted;
SQL
cat > $work/chunk.sql <<SQL
INSERT INTO projections.chunks (tenant_id, chunk_id, event_id, seq, part, ts, session_id, channel, sensitivity, actor_type, actor_id, kind, tags, text, token_est, importance, content_hash, word_hashes)
SELECT 't', 'c' || v, 'e' || v, v, 0, now(), 'bench-session-0', 'private', 'none', 'agent', 'agent-0', 'message', '{bench,throughput}', '$text', 40, 0.5, decode(repeat('ab', 32), 'hex'), decode(repeat('ab', 64), 'hex') FROM nextval('n') AS v;
SQL
{
  echo "# rows.sh $bin, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"
  echo "| statement | transactions/s | latency ms |"
  echo "|---|---:|---:|"
  for s in raw ev_bare ev_pk_only ev_no_fk ev_no_gin ev_all append chunk; do
    opts=""; [ $s = chunk ] && opts="-c synchronous_commit=off"
    out=$(PGOPTIONS="$opts" pgbench -n -M prepared -c 1 -T 10 -f $work/$s.sql $db 2>&1); echo "$out" | grep -i error >&2
    tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p'); lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
    echo "| $s | $tps | $lat |"
  done
} > $here/rows.txt
psql -qX $url/postgres -c "DROP DATABASE memd_rows"; rm -r $work
cat $here/rows.txt
