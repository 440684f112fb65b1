-- What the read side needs to build Active Context Bundles.

-- Each tenant's bundle policy (section caps, scoring weights, bounds), as
-- edited through the API. Configuration, not memory: not part of the log,
-- not rebuilt. A tenant without a row uses the defaults.
CREATE TABLE policies (
    tenant_id  TEXT PRIMARY KEY REFERENCES tenants (tenant_id),
    policy     JSONB NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Handoff packets (PRD A6), one per `handoff` event: what a receiving agent
-- gets instead of the sender's transcript. session_id is the receiving
-- session.
CREATE TABLE projections.handoffs (
    tenant_id      TEXT NOT NULL,
    handoff_id     TEXT NOT NULL,
    seq            BIGINT NOT NULL,
    ts             TIMESTAMPTZ NOT NULL,
    session_id     TEXT NOT NULL,
    channel        TEXT NOT NULL,
    sensitivity    TEXT NOT NULL,
    from_agent     TEXT NOT NULL,
    to_agent       TEXT NOT NULL,
    task           TEXT NOT NULL,
    task_id        TEXT,
    constraints    TEXT[] NOT NULL,
    decision_ids   TEXT[] NOT NULL,
    required_files TEXT[] NOT NULL,
    open_questions TEXT[] NOT NULL,
    refs           TEXT[] NOT NULL,
    PRIMARY KEY (tenant_id, handoff_id)
);
CREATE INDEX handoffs_receiver ON projections.handoffs (tenant_id, to_agent, session_id, seq DESC);

-- The recent window reads events from the log and their chunks by event.
CREATE INDEX chunks_tenant_event ON projections.chunks (tenant_id, event_id);
