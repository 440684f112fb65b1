-- The log's column checks become domains. PostgreSQL parses a table's
-- CHECK expressions again in every statement that inserts into it (nine
-- on events, ~10 KB of node text per append); a domain's constraints stay
-- parsed in its type cache. pgbench inserting one event row per
-- transaction: 1.15-1.35x the rows/s, 0.05-0.09 ms less per row
-- (bench/2026-12-04-gather/domains.sh). The same rules hold, for every
-- existing row (validated below) and every new one.
--
-- Without rewriting the log: typing a column as a domain with constraints
-- would rewrite the table under an exclusive lock; typing it as one
-- without any does not, then the constraint is added NOT VALID (new rows
-- are checked at once), the table's CHECK dropped, and the domain's
-- constraint validated by a scan.

CREATE DOMAIN event_seq AS bigint;
CREATE DOMAIN event_channel AS text;
CREATE DOMAIN event_actor_type AS text;
CREATE DOMAIN event_kind AS text;
CREATE DOMAIN event_sensitivity AS text;
CREATE DOMAIN event_hash AS bytea;
CREATE DOMAIN event_ref_id AS text;

ALTER TABLE events
    ALTER seq TYPE event_seq,
    ALTER channel TYPE event_channel,
    ALTER actor_type TYPE event_actor_type,
    ALTER kind TYPE event_kind,
    ALTER sensitivity TYPE event_sensitivity,
    ALTER prev_hash TYPE event_hash,
    ALTER hash TYPE event_hash,
    ALTER agent_id TYPE event_ref_id,
    ALTER subject_id TYPE event_ref_id;

ALTER DOMAIN event_seq ADD CONSTRAINT event_seq_check CHECK (VALUE > 0) NOT VALID;
ALTER DOMAIN event_channel ADD CONSTRAINT event_channel_check
    CHECK (VALUE IN ('private', 'public', 'team', 'agent')) NOT VALID;
ALTER DOMAIN event_actor_type ADD CONSTRAINT event_actor_type_check
    CHECK (VALUE IN ('human', 'agent', 'tool', 'system')) NOT VALID;
ALTER DOMAIN event_kind ADD CONSTRAINT event_kind_check
    CHECK (VALUE IN ('message', 'tool_call', 'tool_result', 'decision', 'task_update',
                     'summary', 'view_update', 'handoff', 'artifact', 'erasure')) NOT VALID;
ALTER DOMAIN event_sensitivity ADD CONSTRAINT event_sensitivity_check
    CHECK (VALUE IN ('none', 'low', 'high', 'secret')) NOT VALID;
ALTER DOMAIN event_hash ADD CONSTRAINT event_hash_check CHECK (length(VALUE) = 32) NOT VALID;
ALTER DOMAIN event_ref_id ADD CONSTRAINT event_ref_id_check
    CHECK (length(VALUE) BETWEEN 1 AND 256) NOT VALID;

ALTER TABLE events
    DROP CONSTRAINT events_seq_check,
    DROP CONSTRAINT events_channel_check,
    DROP CONSTRAINT events_actor_type_check,
    DROP CONSTRAINT events_kind_check,
    DROP CONSTRAINT events_sensitivity_check,
    DROP CONSTRAINT events_prev_hash_check,
    DROP CONSTRAINT events_hash_check,
    DROP CONSTRAINT events_agent_id_check,
    DROP CONSTRAINT events_subject_id_check;

ALTER DOMAIN event_seq VALIDATE CONSTRAINT event_seq_check;
ALTER DOMAIN event_channel VALIDATE CONSTRAINT event_channel_check;
ALTER DOMAIN event_actor_type VALIDATE CONSTRAINT event_actor_type_check;
ALTER DOMAIN event_kind VALIDATE CONSTRAINT event_kind_check;
ALTER DOMAIN event_sensitivity VALIDATE CONSTRAINT event_sensitivity_check;
ALTER DOMAIN event_hash VALIDATE CONSTRAINT event_hash_check;
ALTER DOMAIN event_ref_id VALIDATE CONSTRAINT event_ref_id_check;
