-- Signed checkpoints: each tenant's head (seq, hash) at a time, signed with
-- an Ed25519 key kept outside the database. Operators keep copies elsewhere
-- (`memd checkpoint --out DIR`); `memd verify --checkpoint FILE` proves the
-- log still extends them, which a rewrite that recomputes the hash chain
-- cannot fake without the key. Append-only, like the log.
CREATE TABLE checkpoints (
    tenant_id  TEXT NOT NULL REFERENCES tenants (tenant_id),
    seq        BIGINT NOT NULL CHECK (seq > 0),
    head_hash  BYTEA NOT NULL CHECK (length(head_hash) = 32),
    signed_at  TIMESTAMPTZ NOT NULL,
    public_key BYTEA NOT NULL CHECK (length(public_key) = 32),
    signature  BYTEA NOT NULL CHECK (length(signature) = 64),
    PRIMARY KEY (tenant_id, seq)
);

CREATE TRIGGER checkpoints_append_only BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION memd_refuse_change();
CREATE TRIGGER checkpoints_no_truncate BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION memd_refuse_change();
