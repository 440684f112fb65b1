-- An agent's private view (a `view_update` in the private channel by an
-- agent: its own identity, rules, notes) is that agent's, as every other
-- private memory is: a view is kept per owner, '' for the shared version.
-- A bundle shows an agent its own version where it has one, else the
-- shared one, and never another agent's. The views projection (version 2)
-- replays the log to fill it.
ALTER TABLE projections.views ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE projections.views DROP CONSTRAINT views_pkey;
ALTER TABLE projections.views ADD PRIMARY KEY (tenant_id, view, owner);
