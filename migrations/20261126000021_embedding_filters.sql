-- Retrieval filters (time range, agents, sessions, kinds, tags) apply to
-- the vector path as to the lexical one, in the in-memory scan, which is
-- built from the embeddings tables alone: their rows carry the event's
-- time, session and tags too. Existing rows take them from the log (the
-- same values a rebuild writes), so no vector is computed again.
ALTER TABLE projections.embeddings_minilm
    ADD COLUMN ts TIMESTAMPTZ, ADD COLUMN session_id TEXT, ADD COLUMN tags TEXT[];
ALTER TABLE projections.embeddings_hashed
    ADD COLUMN ts TIMESTAMPTZ, ADD COLUMN session_id TEXT, ADD COLUMN tags TEXT[];

UPDATE projections.embeddings_minilm e
   SET ts = l.ts, session_id = l.session_id, tags = l.tags
  FROM public.events l
 WHERE l.tenant_id = e.tenant_id AND l.seq = e.seq;
UPDATE projections.embeddings_hashed e
   SET ts = l.ts, session_id = l.session_id, tags = l.tags
  FROM public.events l
 WHERE l.tenant_id = e.tenant_id AND l.seq = e.seq;

ALTER TABLE projections.embeddings_minilm
    ALTER COLUMN ts SET NOT NULL, ALTER COLUMN session_id SET NOT NULL,
    ALTER COLUMN tags SET NOT NULL;
ALTER TABLE projections.embeddings_hashed
    ALTER COLUMN ts SET NOT NULL, ALTER COLUMN session_id SET NOT NULL,
    ALTER COLUMN tags SET NOT NULL;
