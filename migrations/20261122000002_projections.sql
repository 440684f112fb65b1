-- Read models derived from the event log. Everything in the `projections`
-- schema is disposable: `memd rebuild` deletes it and replays the log, and
-- `memd drift-check` copies these definitions (CREATE TABLE ... LIKE) into a
-- shadow schema, rebuilds there and diffs. Projectors write unqualified table
-- names with `search_path` pointing at the live or the shadow schema.
--
-- No column may depend on when a projector ran (no now(), no serials): a
-- rebuild must reproduce every row byte for byte.

CREATE SCHEMA projections;

-- How far each projector has applied each tenant's log, written in the same
-- transaction as the rows it covers. `version` is the projector code's
-- version: a row with another version is reset and replayed.
CREATE TABLE projections.cursors (
    projector TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    seq       BIGINT NOT NULL CHECK (seq >= 0),
    version   INT NOT NULL,
    PRIMARY KEY (projector, tenant_id)
);

-- Retrieval units: messages, tool-result excerpts (split into ~400-token
-- parts that keep their line ranges), decisions, summaries, task updates.
CREATE TABLE projections.chunks (
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
    tsv          TSVECTOR GENERATED ALWAYS AS
                 (to_tsvector('english', coalesce(source, '') || ' ' || text)) STORED,
    PRIMARY KEY (tenant_id, chunk_id)
);
CREATE INDEX chunks_tenant_seq ON projections.chunks (tenant_id, seq DESC);
CREATE INDEX chunks_tsv ON projections.chunks USING GIN (tsv);
CREATE INDEX chunks_tags ON projections.chunks USING GIN (tags);
CREATE INDEX chunks_content_hash ON projections.chunks (tenant_id, content_hash);

-- The decision ledger. decision_id is the id of the event that made it.
CREATE TABLE projections.decisions (
    tenant_id       TEXT NOT NULL,
    decision_id     TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    ts              TIMESTAMPTZ NOT NULL,
    session_id      TEXT NOT NULL,
    channel         TEXT NOT NULL,
    sensitivity     TEXT NOT NULL,
    actor_id        TEXT NOT NULL,
    tags            TEXT[] NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('active', 'superseded', 'rejected')),
    key             TEXT,
    scope           TEXT NOT NULL,
    decision        TEXT NOT NULL,
    -- The decided value, when the event gives one (`content.value`); summary
    -- claims on the same key are compared against it.
    value           JSONB,
    rationale       TEXT[] NOT NULL,
    constraints     TEXT[] NOT NULL,
    alternatives    TEXT[] NOT NULL,
    consequences    TEXT[] NOT NULL,
    confidence      DOUBLE PRECISION,
    refs            TEXT[] NOT NULL,
    supersedes      TEXT,
    superseded_by   TEXT,
    rejected_reason TEXT,
    PRIMARY KEY (tenant_id, decision_id)
);
CREATE INDEX decisions_tenant_status ON projections.decisions (tenant_id, status, seq DESC);
CREATE INDEX decisions_tenant_key ON projections.decisions (tenant_id, key) WHERE key IS NOT NULL;

-- Summaries, each checked against the ledger as it stood at the summary's
-- seq. `conflicts` lists every problem with both sides' refs; empty = clean.
CREATE TABLE projections.summaries (
    tenant_id   TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    ts          TIMESTAMPTZ NOT NULL,
    session_id  TEXT NOT NULL,
    channel     TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    text        TEXT NOT NULL,
    refs        TEXT[] NOT NULL,
    claims      JSONB NOT NULL,
    conflicted  BOOLEAN NOT NULL,
    conflicts   JSONB NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX summaries_tenant_seq ON projections.summaries (tenant_id, seq DESC);

-- Latest state of each task.
CREATE TABLE projections.tasks (
    tenant_id   TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('open', 'doing', 'done')),
    title       TEXT NOT NULL,
    details     TEXT NOT NULL,
    refs        TEXT[] NOT NULL,
    event_ids   TEXT[] NOT NULL,
    session_id  TEXT NOT NULL,
    channel     TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    first_seq   BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, task_id)
);
CREATE INDEX tasks_tenant_status ON projections.tasks (tenant_id, status, last_seq DESC);

-- Identity, rules, preferences and other human-editable documents: the
-- latest text of each view.
CREATE TABLE projections.views (
    tenant_id   TEXT NOT NULL,
    view        TEXT NOT NULL,
    text        TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    ts          TIMESTAMPTZ NOT NULL,
    actor_id    TEXT NOT NULL,
    channel     TEXT NOT NULL,
    sensitivity TEXT NOT NULL,
    PRIMARY KEY (tenant_id, view)
);
