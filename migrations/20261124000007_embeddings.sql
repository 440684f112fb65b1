-- Chunk vectors, one table per embedder (projector `embeddings_<name>`):
-- a new embedder's projection is built beside the one bundles use and the
-- old one dropped, without touching each other. Rows carry what retrieval
-- filters on (channel, sensitivity, kind), so the in-memory vector index is
-- built from this table alone. `vector` is little-endian f32, L2-normalised.
CREATE TABLE projections.embeddings_minilm (
    tenant_id   TEXT NOT NULL,
    chunk_id    TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    part        INT NOT NULL,
    channel     TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    kind        TEXT NOT NULL,
    vector      BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id)
);
-- The index loads and refreshes a tenant's vectors in seq order.
CREATE INDEX embeddings_minilm_tenant_seq ON projections.embeddings_minilm (tenant_id, seq, part);

CREATE TABLE projections.embeddings_hashed (LIKE projections.embeddings_minilm INCLUDING ALL);

-- Which embedder each tenant's bundles use, and the one being built to
-- replace it (`memd embedder use`). No row: the daemon's default.
CREATE TABLE embedder_choice (
    tenant_id  TEXT PRIMARY KEY REFERENCES tenants (tenant_id),
    active     TEXT NOT NULL,
    building   TEXT,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
