-- Agents inside a tenant (PRD §9.3). An event may name the agent whose
-- memory it is (`agent_id`, its owner): an agent-bound token stamps its own
-- agent on everything it appends. Memory recorded in the `private` channel
-- with an owner is that agent's alone; without one it is the tenant's, shared
-- by its agents as before. Other channels are shared by the channel rules.
ALTER TABLE events ADD COLUMN agent_id TEXT
    CHECK (agent_id IS NULL OR length(agent_id) BETWEEN 1 AND 256);

-- A token bound to an agent acts only as that agent; NULL: tenant-wide (an
-- operator's token).
ALTER TABLE api_tokens ADD COLUMN agent_id TEXT
    CHECK (agent_id IS NULL OR length(agent_id) BETWEEN 1 AND 256);
ALTER TABLE api_tokens ADD CONSTRAINT agent_tokens_are_not_admin
    CHECK (agent_id IS NULL OR scope <> 'admin');

-- The owner, where retrieval filters on it. Existing events have none, so
-- the projections need no rebuild.
ALTER TABLE projections.chunks ADD COLUMN agent_id TEXT;
ALTER TABLE projections.embeddings_minilm ADD COLUMN agent_id TEXT;
ALTER TABLE projections.embeddings_hashed ADD COLUMN agent_id TEXT;
