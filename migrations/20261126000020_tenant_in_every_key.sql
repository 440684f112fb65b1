-- Every unique key of a tenant's table includes tenant_id: what a
-- distributed PostgreSQL (Citus, tenant_id as the distribution column)
-- requires, and what every lookup already does (an event or artifact is
-- always read within its tenant). tests/api/schema.rs keeps it so.
ALTER TABLE events ADD CONSTRAINT events_tenant_event_id_key UNIQUE (tenant_id, event_id);
ALTER TABLE events DROP CONSTRAINT events_event_id_key;

ALTER TABLE artifacts DROP CONSTRAINT artifacts_pkey;
ALTER TABLE artifacts ADD PRIMARY KEY (tenant_id, artifact_id);
-- The new primary key starts with tenant_id: it serves what this did.
DROP INDEX artifacts_tenant;
