-- The Merkle tree over each tenant's log (RFC 6962 style; leaves are the
-- events' chain hashes in seq order), for inclusion and consistency proofs.
-- A projection like any other: rebuilt from the log, covered by the drift
-- check. Only complete subtrees of 16 leaves and more are kept (`level` 4 is
-- 16 leaves, `idx` counts subtrees of that size from the start), about one
-- row per eight events; smaller ones are computed from event hashes.
CREATE TABLE projections.event_tree (
    tenant_id TEXT NOT NULL,
    level     SMALLINT NOT NULL CHECK (level BETWEEN 4 AND 62),
    idx       BIGINT NOT NULL CHECK (idx >= 0),
    hash      BYTEA NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (tenant_id, level, idx)
);

-- Signed checkpoints also sign the tree's root at their seq (format v2);
-- checkpoints signed before keep NULL and verify as v1.
ALTER TABLE checkpoints ADD COLUMN tree_root BYTEA CHECK (length(tree_root) = 32);
