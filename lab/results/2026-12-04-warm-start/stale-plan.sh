#!/bin/bash
# stale-plan.sh BIN: how a plan made once, on a log that autovacuum has not
# analyzed yet, reads a live step's events after the log has grown. Creates
# and drops the database memd_stale_plan; output: stale-plan.txt here.
bin=$1; url=postgres://postgres@127.0.0.1:5432
psql -qX $url/postgres -c "DROP DATABASE IF EXISTS memd_stale_plan" -c "CREATE DATABASE memd_stale_plan"
$bin --database-url $url/memd_stale_plan migrate > /dev/null 2>&1
rows() { # rows TENANT FIRST_SEQ COUNT
  echo "INSERT INTO events (tenant_id, seq, event_id, created_at, ts, session_id, channel, actor_type, actor_id, kind, sensitivity, tags, content, refs, prev_hash, hash)
        SELECT '$1', $2 + i, '$1-' || ($2 + i), now(), now(), 's', 'private', 'agent', 'a', 'message', 'none', '{}', '{\"text\": \"hi\"}', '{}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex')
          FROM generate_series(0, $3 - 1) i;"
}
psql -qX $url/memd_stale_plan <<SQL
INSERT INTO tenants (tenant_id) VALUES ('a'), ('b');
$(rows a 1 300)
SET plan_cache_mode = force_generic_plan;
PREPARE hashes (text, bigint, bigint) AS
  SELECT hash FROM public.events WHERE tenant_id = \$1 AND seq > \$2 AND seq <= \$3 ORDER BY seq;
\echo '-- planned once while the log holds 300 events, never analyzed'
EXPLAIN EXECUTE hashes('a', 200, 205);
$(rows b 1 20000)
\echo '-- 20,000 events later, still not analyzed: the same plan'
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) EXECUTE hashes('b', 15000, 15005);
ANALYZE events;
\echo '-- after ANALYZE (what autovacuum does), planned again'
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) EXECUTE hashes('b', 15000, 15005);
SQL
psql -qX $url/postgres -c "DROP DATABASE memd_stale_plan"
