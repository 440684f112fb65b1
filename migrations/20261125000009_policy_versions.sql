-- Each tenant's stored policy has a version, raised by every change, so a
-- bundle can say which policy built it (provenance.policy_version; 0: the
-- defaults, no stored policy).
ALTER TABLE policies ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
