#!/bin/bash
# domains.sh BIN: what the log's CHECK constraints cost each append, and
# whether moving them into domains can be migrated without rewriting the
# log. PostgreSQL parses a table's CHECK expressions (pg_constraint.conbin)
# again in every statement that inserts into it; a domain's constraints
# are kept parsed in its type cache. On a database memd migrated
# (memd_domains, dropped after), pgbench (one client, prepared, 10 s,
# three alternating rounds) inserts one event row per transaction into
#   ev_checks: a copy of `events` with its CHECKs, indexes and foreign key;
#   ev_domains: the same with each checked column typed as a domain
#   carrying that check instead.
# Then, on ev_checks filled by those runs, the migration path that avoids
# a rewrite: the column to a domain without constraints, the constraint
# added to the domain NOT VALID, the table's CHECK dropped, the domain's
# constraint validated; the table's relfilenode before and after says
# whether it was rewritten. Output: domains.txt here.
bin=$1; url=postgres://postgres@127.0.0.1:5432; db=$url/memd_domains
here=$(dirname "$0"); work=$(mktemp -d)
psql -qX $url/postgres -c "DROP DATABASE IF EXISTS memd_domains" -c "CREATE DATABASE memd_domains"
$bin --database-url $db migrate > /dev/null 2>&1
text='Benchmark message 17 from writer 0: the build on main failed in the migrations step because the events table gained a column; rerun after applying 20261122000001_event_log.sql.'
psql -qX $db <<'SQL'
INSERT INTO tenants (tenant_id) VALUES ('t');
CREATE SEQUENCE n;
CREATE TABLE ev_checks (LIKE events INCLUDING ALL);
ALTER TABLE ev_checks ADD FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id);
CREATE TABLE ev_domains (LIKE events INCLUDING DEFAULTS INCLUDING INDEXES INCLUDING GENERATED);
ALTER TABLE ev_domains ADD FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id);
CREATE DOMAIN d_actor_type AS text CHECK (VALUE IN ('human', 'agent', 'tool', 'system'));
CREATE DOMAIN d_channel AS text CHECK (VALUE IN ('private', 'public', 'team', 'agent'));
CREATE DOMAIN d_sensitivity AS text CHECK (VALUE IN ('none', 'low', 'high', 'secret'));
CREATE DOMAIN d_kind AS text CHECK (VALUE IN ('message', 'tool_call', 'tool_result', 'decision',
  'task_update', 'summary', 'view_update', 'handoff', 'artifact', 'erasure'));
CREATE DOMAIN d_hash AS bytea CHECK (length(VALUE) = 32);
CREATE DOMAIN d_seq AS bigint CHECK (VALUE > 0);
CREATE DOMAIN d_id AS text CHECK (length(VALUE) BETWEEN 1 AND 256);
ALTER TABLE ev_domains ALTER actor_type TYPE d_actor_type, ALTER channel TYPE d_channel,
  ALTER sensitivity TYPE d_sensitivity, ALTER kind TYPE d_kind, ALTER hash TYPE d_hash,
  ALTER prev_hash TYPE d_hash, ALTER seq TYPE d_seq, ALTER agent_id TYPE d_id, ALTER subject_id TYPE d_id;
SQL
for t in ev_checks ev_domains; do
  echo "INSERT INTO $t (tenant_id, seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id, kind, sensitivity, tags, content, refs, prev_hash, hash)
  SELECT 't', v, 'e' || v, now(), now(), 'bench-session-0', 'private', 'agent', 'agent-0', 'message', 'none', '{bench,throughput}', '{\"text\": \"$text\"}', '{}', decode(repeat('ab', 32), 'hex'), decode(repeat('cd', 32), 'hex') FROM nextval('n') AS v;" > $work/$t.sql
done
{
  echo "# domains.sh $bin, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"
  echo
  echo "| round | table | CHECKs on the table | transactions/s | latency ms |"
  echo "|---:|---|---:|---:|---:|"
  for round in 1 2 3; do
    for t in ev_checks ev_domains; do
      checks=$(psql -qXAt $db -c "SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND conrelid = '$t'::regclass")
      out=$(pgbench -n -M prepared -c 1 -T 10 -f $work/$t.sql $db 2>&1); echo "$out" | grep -i error >&2
      tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p'); lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
      echo "| $round | $t | $checks | $tps | $lat |"
    done
  done
  echo
  echo "Migrating ev_checks' channel column without a rewrite:"
  echo
  echo '```'
  psql -qX $db <<'SQL'
\timing on
SELECT count(*) AS rows, pg_relation_filenode('ev_checks') AS filenode_before FROM ev_checks;
CREATE DOMAIN d_channel_plain AS text;
ALTER TABLE ev_checks ALTER channel TYPE d_channel_plain;
ALTER DOMAIN d_channel_plain ADD CONSTRAINT d_channel_plain_check CHECK (VALUE IN ('private', 'public', 'team', 'agent')) NOT VALID;
ALTER TABLE ev_checks DROP CONSTRAINT events_channel_check; -- LIKE keeps the name
ALTER DOMAIN d_channel_plain VALIDATE CONSTRAINT d_channel_plain_check;
SELECT pg_relation_filenode('ev_checks') AS filenode_after;
SQL
  echo '```'
} > $here/domains.txt 2>&1
psql -qX $url/postgres -c "DROP DATABASE memd_domains"; rm -r $work
cat $here/domains.txt
