-- `minilm_int8`: the same model as `minilm`, its stored vectors computed in
-- 8-bit integers (a third of the embedding cost). Its own table, like every
-- embedder's, so a tenant can switch to it (or back) by rebuild alone.
CREATE TABLE projections.embeddings_minilm_int8
    (LIKE projections.embeddings_minilm INCLUDING ALL);
