-- Identifiers are searchable by their words. PostgreSQL's parser keeps
-- `secrets.storage`, `README.md`, `src/export.rs` and `fs.read_file` as
-- single host/file tokens, so a question about "secrets storage" or "the
-- readme" missed the decision keyed `secrets.storage` and the tool output
-- from `README.md`. Dots, slashes, underscores and hyphens now separate
-- words, in chunks and in queries alike (the read side calls the same
-- function on the question).
CREATE FUNCTION projections.searchable(text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN translate($1, './_-', '    ');

ALTER TABLE projections.chunks DROP COLUMN tsv;
ALTER TABLE projections.chunks ADD COLUMN tsv TSVECTOR GENERATED ALWAYS AS
    (to_tsvector('english', projections.searchable(coalesce(source, '') || ' ' || text))) STORED;
CREATE INDEX chunks_tsv ON projections.chunks USING GIN (tsv) WITH (gin_pending_list_limit = 256);
