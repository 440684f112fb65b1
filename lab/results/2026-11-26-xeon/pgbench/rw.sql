SELECT chunk_id, event_id, part, text, token_est, source, line_start, line_end FROM projections.chunks WHERE tenant_id = :tenant AND event_id = ANY (:ids::text[]) ORDER BY event_id, part;
