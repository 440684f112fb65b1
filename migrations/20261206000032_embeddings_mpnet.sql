-- `mpnet`: all-mpnet-base-v2, the quality tier (768 dimensions). Its own
-- table, like every embedder's, so a tenant can switch to it (or back) by
-- rebuild alone.
CREATE TABLE projections.embeddings_mpnet
    (LIKE projections.embeddings_minilm INCLUDING ALL);
