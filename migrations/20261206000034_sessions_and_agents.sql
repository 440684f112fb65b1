-- What `GET /api/v1/sessions` and `GET /api/v1/agents` list, folded from
-- the log by the sessions projection (which replays it to fill them).
-- A session has a row per owner: an agent's private events are that
-- agent's (`owner`), everything else is shared (''); an agent lists the
-- shared rows and its own.
CREATE TABLE projections.sessions (
    tenant_id  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    owner      TEXT NOT NULL,
    first_seq  BIGINT NOT NULL,
    last_seq   BIGINT NOT NULL,
    first_ts   TIMESTAMPTZ NOT NULL,
    last_ts    TIMESTAMPTZ NOT NULL,
    events     BIGINT NOT NULL,
    -- The agents that took part (an event's agent, else its actor when an
    -- agent), and the kinds recorded: sorted, distinct.
    agents     TEXT[] NOT NULL,
    kinds      TEXT[] NOT NULL,
    PRIMARY KEY (tenant_id, session_id, owner)
);
CREATE INDEX sessions_recent ON projections.sessions (tenant_id, last_seq DESC);

-- Each agent's activity: its events (as the agent whose memory it is, or
-- as their actor).
CREATE TABLE projections.agents (
    tenant_id TEXT NOT NULL,
    agent_id  TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    first_ts  TIMESTAMPTZ NOT NULL,
    last_ts   TIMESTAMPTZ NOT NULL,
    events    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
);
