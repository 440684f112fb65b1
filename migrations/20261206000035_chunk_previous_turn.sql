-- A turn's chunks know the turn before it in its session (the seq of the
-- previous message, tool call or tool result there; NULL for the first
-- turn and for other kinds): the rerank stage lifts a reply that follows a
-- turn the question found, and finds which candidates are neighbours from
-- the candidate rows alone. Filled by the chunks projection (version 6),
-- which rebuilds at first start.
ALTER TABLE projections.chunks ADD COLUMN previous_turn BIGINT;
