-- No statement looks chunks up by content_hash: a bundle drops repeated
-- texts by comparing the hashes of the candidates it already read
-- (read::choose), in memory. The index on (tenant_id, content_hash) was
-- still maintained for every chunk row a projection step or a rebuild
-- writes, at a random place in its b-tree (a hash has no order worth
-- keeping).
DROP INDEX projections.chunks_content_hash;
