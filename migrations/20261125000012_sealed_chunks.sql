-- Encryption at rest (PRD §9.2): a chunk of a high or secret event keeps
-- its text sealed, so PostgreSQL cannot derive its lexemes. The projector
-- gives them instead, blinded (each lexeme replaced by a keyed hash of it,
-- `sealed_tsv`), and the search vector takes them when present. Questions
-- look up each lexeme both as itself and blinded.
ALTER TABLE projections.chunks ADD COLUMN sealed_tsv TSVECTOR;
ALTER TABLE projections.chunks DROP COLUMN tsv;
ALTER TABLE projections.chunks ADD COLUMN tsv TSVECTOR GENERATED ALWAYS AS
    (coalesce(sealed_tsv,
              to_tsvector('english', projections.searchable(coalesce(source, '') || ' ' || text))))
    STORED;
CREATE INDEX chunks_tsv ON projections.chunks USING GIN (tsv) WITH (gin_pending_list_limit = 256);
