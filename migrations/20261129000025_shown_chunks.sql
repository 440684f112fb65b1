-- The texts and display fields of the chunks a bundle keeps
-- (read::retrieve::shown), in a function so that PostgreSQL plans the
-- statement once per connection. Prepared as it stood, it was planned
-- afresh for every bundle: its generic plan covers all 16 partitions of
-- chunks and is costed above a custom plan for a bundle's few ids, though
-- the tenant's partition is chosen when it runs, so the planner never kept
-- it (at 1M events under 32 clients, 0.13 ms of planning per bundle
-- against 0.03 ms of execution).
CREATE FUNCTION public.memd_shown_chunks(tenant TEXT, ids TEXT[])
RETURNS TABLE (chunk_id TEXT, text TEXT, session_id TEXT, actor_id TEXT,
               line_start INT, line_end INT, artifact_id TEXT)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.chunk_id, c.text, c.session_id, c.actor_id, c.line_start, c.line_end,
           CASE WHEN c.kind = 'tool_result'
                THEN (SELECT e.artifact_id FROM public.events e
                       WHERE e.tenant_id = c.tenant_id AND e.seq = c.seq) END
      FROM unnest(ids) AS u (id)
      JOIN projections.chunks c ON c.tenant_id = memd_shown_chunks.tenant AND c.chunk_id = u.id;
END
$$;
