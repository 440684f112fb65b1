-- Which events updated each task: one row per update, appended as updates
-- arrive. The task's row used to carry them as an array, rewritten whole
-- on every batch that touched the task: a task updated 20,000 times made
-- its later batches rewrite all of them, and the tasks projection took 9.5
-- of a 1M-event rebuild's 52.6 s (bench/project.md). Rows already
-- projected move over as they are, so nothing needs replaying.
CREATE TABLE projections.task_events (
    tenant_id TEXT NOT NULL,
    task_id   TEXT NOT NULL,
    seq       BIGINT NOT NULL,
    event_id  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, task_id, seq)
);

INSERT INTO projections.task_events (tenant_id, task_id, seq, event_id)
SELECT t.tenant_id, t.task_id, e.seq, e.event_id
  FROM projections.tasks t
 CROSS JOIN LATERAL unnest(t.event_ids) AS u (event_id)
  JOIN public.events e ON e.tenant_id = t.tenant_id AND e.event_id = u.event_id
    ON CONFLICT DO NOTHING;

ALTER TABLE projections.tasks DROP COLUMN event_ids;
