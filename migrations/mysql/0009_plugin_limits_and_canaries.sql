-- The limits each version was deployed with (NULL: deployed before limits were stored; the defaults apply).
ALTER TABLE plugins ADD COLUMN deadline_ms BIGINT NULL, ADD COLUMN memory_bytes BIGINT NULL, ADD COLUMN fuel BIGINT NULL;
-- A canary version (state 'canary') takes this percent of its slot's traffic beside the active one.
ALTER TABLE plugins ADD COLUMN canary_percent INT NULL;
-- Whether a tenant's requests may pin a candidate policy version (test traffic).
ALTER TABLE tenant_settings ADD COLUMN allow_pinned_versions INT NOT NULL DEFAULT 0;
