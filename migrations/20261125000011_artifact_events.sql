-- The PRD's event kind `artifact` (§6.1): a named document an agent
-- produced or received, kept like a tool output (an excerpt in the event,
-- the whole text in `artifacts` when longer).
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('message', 'tool_call', 'tool_result', 'decision', 'task_update', 'summary',
                    'view_update', 'handoff', 'artifact'));
