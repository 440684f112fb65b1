-- The PRD's indexes on the log (§6.1) that a query uses: `GET
-- /api/v1/events?since=&until=` reads a tenant's events by time, and
-- `?tag=` by tag.
CREATE INDEX events_tenant_ts ON events (tenant_id, ts DESC);
CREATE INDEX events_tags ON events USING GIN (tags);
