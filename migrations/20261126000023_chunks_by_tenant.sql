-- The chunks table, split by tenant: PostgreSQL's declarative hash
-- partitioning on tenant_id, 16 partitions. A bundle's full-text search
-- names one tenant, so it reads one partition and that partition's GIN
-- index, which holds a few tenants' terms. Unpartitioned, the one GIN index
-- over every tenant's chunks handed a rare term's matches in all tenants to
-- the heap, and the other tenants' rows were then thrown away: retrieval p95
-- grew from 9 ms at 100k events to 73 ms at 10M over 10 tenants
-- (bench/scale-one-table.md), while a (tenant_id, tsv) index measured worse
-- (bench/scale-tenant-gin.md). The rows are copied and every index built
-- after the copy; a large table makes this migration take minutes.
CREATE TABLE projections.chunks_by_tenant (
    tenant_id    TEXT NOT NULL,
    chunk_id     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    part         INT NOT NULL,
    ts           TIMESTAMPTZ NOT NULL,
    session_id   TEXT NOT NULL,
    channel      TEXT NOT NULL,
    sensitivity  TEXT NOT NULL,
    actor_type   TEXT NOT NULL,
    actor_id     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    tags         TEXT[] NOT NULL,
    source       TEXT,
    line_start   INT,
    line_end     INT,
    text         TEXT NOT NULL,
    token_est    INT NOT NULL,
    importance   REAL NOT NULL,
    content_hash BYTEA NOT NULL,
    word_hashes  BYTEA NOT NULL DEFAULT ''::bytea,
    agent_id     TEXT,
    sealed_tsv   TSVECTOR,
    tsv          TSVECTOR GENERATED ALWAYS AS (COALESCE(sealed_tsv, to_tsvector('english'::regconfig,
                     projections.searchable(COALESCE(source, '') || ' ' || text)))) STORED
) PARTITION BY HASH (tenant_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format(
            'CREATE TABLE projections.chunks_p%s PARTITION OF projections.chunks_by_tenant
                 FOR VALUES WITH (MODULUS 16, REMAINDER %s)',
            lpad(i::text, 2, '0'), i);
    END LOOP;
END $$;

INSERT INTO projections.chunks_by_tenant
       (tenant_id, chunk_id, event_id, seq, part, ts, session_id, channel, sensitivity,
        actor_type, actor_id, kind, tags, source, line_start, line_end, text, token_est,
        importance, content_hash, word_hashes, agent_id, sealed_tsv)
SELECT tenant_id, chunk_id, event_id, seq, part, ts, session_id, channel, sensitivity,
       actor_type, actor_id, kind, tags, source, line_start, line_end, text, token_est,
       importance, content_hash, word_hashes, agent_id, sealed_tsv
  FROM projections.chunks;

DROP TABLE projections.chunks;
ALTER TABLE projections.chunks_by_tenant RENAME TO chunks;

ALTER TABLE projections.chunks ADD CONSTRAINT chunks_pkey PRIMARY KEY (tenant_id, chunk_id);
CREATE INDEX chunks_tenant_seq ON projections.chunks (tenant_id, seq DESC);
CREATE INDEX chunks_tenant_event ON projections.chunks (tenant_id, event_id);
CREATE INDEX chunks_content_hash ON projections.chunks (tenant_id, content_hash);
CREATE INDEX chunks_pinned ON projections.chunks (tenant_id, seq DESC, part)
    WHERE tags && '{pinned,pin}'::text[];
CREATE INDEX chunks_tags ON projections.chunks USING GIN (tags);
CREATE INDEX chunks_tsv ON projections.chunks USING GIN (tsv) WITH (gin_pending_list_limit = 256);
