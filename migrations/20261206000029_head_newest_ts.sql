-- What recency and retention count a tenant's ages from: its newest `ts`
-- among events not dated after they were recorded (`ts <= created_at`).
-- Appends bound `ts` to the daemon's clock (a time ahead of it is refused
-- beyond the allowed skew, and recorded as the append time within it), so
-- every new event counts; a row dated in the future by a client before
-- that bound does not, so no single event can age its tenant's memory.
-- Kept on the head row (appends update it anyway) instead of read from the
-- log at every bundle.
ALTER TABLE tenant_heads ADD COLUMN newest_ts TIMESTAMPTZ;
UPDATE tenant_heads h
   SET newest_ts = (SELECT max(e.ts) FROM events e
                     WHERE e.tenant_id = h.tenant_id AND e.ts <= e.created_at);
