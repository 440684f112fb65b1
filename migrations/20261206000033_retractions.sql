-- Retraction: an event that withdraws earlier events (`refs`), with a
-- reason. The log keeps both; what projections derived from a withdrawn
-- event leaves every bundle, search and view from the retraction on.
ALTER DOMAIN event_kind DROP CONSTRAINT event_kind_check;
ALTER DOMAIN event_kind ADD CONSTRAINT event_kind_check
    CHECK (VALUE IN ('message', 'tool_call', 'tool_result', 'decision', 'task_update',
                     'summary', 'view_update', 'handoff', 'artifact', 'erasure',
                     'retraction'));

-- Which retraction withdrew an event: found through the event's id in a
-- retraction's refs. Retractions are rare, so both indexes are small.
CREATE INDEX events_retraction_refs ON events USING GIN (refs) WHERE kind = 'retraction';
CREATE INDEX events_retractions ON events (tenant_id, seq) WHERE kind = 'retraction';

-- A withdrawn event's chunks stay (a bundle names them in `omissions` when
-- a question matches them) but are never retrieved.
ALTER TABLE projections.chunks ADD COLUMN retracted_by TEXT;
CREATE INDEX chunks_retracted ON projections.chunks (tenant_id) WHERE retracted_by IS NOT NULL;

-- A withdrawn decision is no longer in force; its key has no decision in
-- force until a new one is recorded (the one it superseded stays
-- superseded: nobody asserted it again).
ALTER TABLE projections.decisions DROP CONSTRAINT decisions_status_check;
ALTER TABLE projections.decisions ADD CONSTRAINT decisions_status_check
    CHECK (status IN ('active', 'superseded', 'rejected', 'retracted'));
ALTER TABLE projections.decisions ADD COLUMN retracted_by TEXT;
