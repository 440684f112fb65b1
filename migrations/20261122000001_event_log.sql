-- Ground truth of memd: tenants, their credentials, the append-only event log
-- and the artifacts behind truncated tool results. Nothing in this file is a
-- projection; none of it may be rebuilt, so none of it may be rewritten.

CREATE TABLE tenants (
    tenant_id  TEXT PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- API tokens are stored as SHA-256 of the token: tokens carry 256 random bits,
-- so a fast hash is enough and a lookup is one index probe.
CREATE TABLE api_tokens (
    token_hash BYTEA PRIMARY KEY CHECK (length(token_hash) = 32),
    tenant_id  TEXT NOT NULL REFERENCES tenants (tenant_id),
    scope      TEXT NOT NULL CHECK (scope IN ('read', 'write', 'admin')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id);

-- One row per tenant: the sequence number and hash of its newest event.
-- Appends lock this row FOR UPDATE, so per-tenant appends are serialized:
-- seq is gap-free and a later seq can never commit before an earlier one
-- (the "gap bug" of reading above a cursor cannot happen), and the hash
-- chain always extends the true head.
CREATE TABLE tenant_heads (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants (tenant_id),
    seq       BIGINT NOT NULL DEFAULT 0 CHECK (seq >= 0),
    hash      BYTEA NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'
              CHECK (length(hash) = 32)
);

CREATE TABLE events (
    tenant_id       TEXT NOT NULL REFERENCES tenants (tenant_id),
    seq             BIGINT NOT NULL CHECK (seq > 0),
    event_id        TEXT NOT NULL UNIQUE,
    created_at      TIMESTAMPTZ NOT NULL,
    ts              TIMESTAMPTZ NOT NULL,
    session_id      TEXT NOT NULL,
    channel         TEXT NOT NULL CHECK (channel IN ('private', 'public', 'team', 'agent')),
    actor_type      TEXT NOT NULL CHECK (actor_type IN ('human', 'agent', 'tool', 'system')),
    actor_id        TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('message', 'tool_call', 'tool_result', 'decision',
                                                  'task_update', 'summary', 'view_update', 'handoff')),
    sensitivity     TEXT NOT NULL CHECK (sensitivity IN ('none', 'low', 'high', 'secret')),
    tags            TEXT[] NOT NULL,
    content         JSONB NOT NULL,
    refs            TEXT[] NOT NULL,
    idempotency_key TEXT,
    artifact_id     TEXT,
    prev_hash       BYTEA NOT NULL CHECK (length(prev_hash) = 32),
    hash            BYTEA NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (tenant_id, seq),
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX events_tenant_session_seq ON events (tenant_id, session_id, seq DESC);

-- Full bytes of tool outputs larger than the 64 KB excerpt kept in the event.
-- Written in the same transaction as the event that points to it.
CREATE TABLE artifacts (
    artifact_id TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (tenant_id),
    event_id    TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    kind        TEXT NOT NULL,
    media_type  TEXT NOT NULL,
    sha256      BYTEA NOT NULL CHECK (length(sha256) = 32),
    bytes       BYTEA NOT NULL,
    meta        JSONB NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX artifacts_tenant ON artifacts (tenant_id);

-- Append-only, enforced by the database itself: whatever the client, role or
-- code path, a row of events or artifacts cannot be changed or removed.
-- (A superuser can still disable triggers; the hash chain makes that evident.)
CREATE FUNCTION memd_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memd: % on % is forbidden: the table is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION memd_refuse_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION memd_refuse_change();
CREATE TRIGGER artifacts_append_only BEFORE UPDATE OR DELETE ON artifacts
    FOR EACH ROW EXECUTE FUNCTION memd_refuse_change();
CREATE TRIGGER artifacts_no_truncate BEFORE TRUNCATE ON artifacts
    FOR EACH STATEMENT EXECUTE FUNCTION memd_refuse_change();
