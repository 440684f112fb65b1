-- The last failure of each projection for each tenant, as the projection
-- workers met it (the batch was rolled back and is retried with backoff):
-- what an operator sees beside a projection's cursor and lag. `projector`
-- is the projection that failed, or `projections` / `embeddings` when the
-- failure was no single projection's (reading the batch, committing it).
-- A row stays after recovery, with its time: lag 0 says it has caught up
-- since. Not a projection itself: rebuilds and drift checks leave it alone.
CREATE TABLE projections.failures (
    projector TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    error     TEXT NOT NULL,
    failed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (projector, tenant_id)
);
