-- Each chunk's content words, as dedupe compares them (sorted 64-bit
-- hashes, 8 bytes each), computed once at projection. A bundle then
-- collapses near-duplicates from the candidates alone, and reads the text
-- only of what it keeps: a fact recorded hundreds of times no longer means
-- hundreds of texts read and split per bundle. The chunks projector's
-- version changes with this column, so existing tenants are replayed.
ALTER TABLE projections.chunks ADD COLUMN word_hashes BYTEA NOT NULL DEFAULT ''::bytea;
