-- Erasure by crypto-shredding (issue 19). An event may name its data
-- subject (a person, a customer): its content in the log, and its
-- artifact, are then sealed under that subject's own key, kept here wrapped
-- (sealed) by the master key, which is not in the database. Erasing the
-- subject destroys the key (`wrapped` becomes NULL): the content can never
-- be opened again, while what is stored, and so the hash chain, is
-- unchanged. An `erasure` event records who erased which subject, when.
ALTER TABLE events ADD COLUMN subject_id TEXT
    CHECK (subject_id IS NULL OR length(subject_id) BETWEEN 1 AND 256);

CREATE TABLE subject_keys (
    tenant_id  TEXT NOT NULL REFERENCES tenants (tenant_id),
    subject_id TEXT NOT NULL CHECK (length(subject_id) BETWEEN 1 AND 256),
    wrapped    BYTEA,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    erased_at  TIMESTAMPTZ,
    erased_by  TEXT,
    PRIMARY KEY (tenant_id, subject_id),
    -- A key is there until it is erased, and then never again.
    CHECK ((wrapped IS NULL) = (erased_at IS NOT NULL))
);

ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('message', 'tool_call', 'tool_result', 'decision', 'task_update', 'summary',
                    'view_update', 'handoff', 'artifact', 'erasure'));
