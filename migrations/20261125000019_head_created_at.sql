-- The head row also keeps its event's created_at, so the next append's
-- time (the daemon's clock, never earlier than this) comes from the row the
-- append locks: read in the same statement that takes the lock, it is
-- current even when the lock was waited for.
ALTER TABLE tenant_heads ADD COLUMN created_at TIMESTAMPTZ;
UPDATE tenant_heads h
   SET created_at = e.created_at
  FROM events e
 WHERE e.tenant_id = h.tenant_id AND e.seq = h.seq;
