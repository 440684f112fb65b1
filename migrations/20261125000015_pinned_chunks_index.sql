-- Every bundle asks for the tenant's newest pinned chunks. With no pinned
-- chunk the planner walked the tenant's whole (tenant, seq) index looking
-- for one: 22 ms at 100k chunks, on the fast path too. This partial index
-- holds only pinned chunks (the tags in `retrieve::PIN_TAGS`; the query
-- states the same predicate literally, so the planner can use it).
CREATE INDEX chunks_pinned ON projections.chunks (tenant_id, seq DESC, part)
    WHERE tags && '{pinned,pin}'::text[];
