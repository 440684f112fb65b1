-- New chunks enter the full-text index through GIN's pending list, which
-- every search scans linearly until VACUUM (or a full list) merges it. At
-- the default 4 MB, a search for a rare term right after a burst of writes
-- read the whole pending list: 8 ms instead of 0.1 ms at 10,000 chunks, and
-- the planner, pricing that in, fell back to sequential scans. A small
-- list keeps searches cheap between vacuums; writers merge it more often,
-- in small batches.
ALTER INDEX projections.chunks_tsv SET (gin_pending_list_limit = 256);
