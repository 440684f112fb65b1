-- A receiver's inbox of handoff packets: a packet is pending until the
-- receiving agent records anything that cites it (its id in `refs`), and
-- is then accepted, by that event. Both are folded from the log by the
-- handoffs projection (its version 2 replays the log to fill them).
ALTER TABLE projections.handoffs ADD COLUMN accepted_seq BIGINT;
ALTER TABLE projections.handoffs ADD COLUMN accepted_by TEXT;
-- The inbox, newest first, and the pending packet a receiver's bundle
-- shows whatever its session.
CREATE INDEX handoffs_inbox ON projections.handoffs (tenant_id, to_agent, seq DESC);
