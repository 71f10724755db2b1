-- The limits each version was deployed with (NULL: deployed before limits were stored; the defaults apply).
ALTER TABLE plugins ADD COLUMN deadline_ms INTEGER NULL;
ALTER TABLE plugins ADD COLUMN memory_bytes INTEGER NULL;
ALTER TABLE plugins ADD COLUMN fuel INTEGER NULL;
-- A canary version (state 'canary') takes this percent of its slot's traffic beside the active one.
ALTER TABLE plugins ADD COLUMN canary_percent INTEGER NULL;
-- Whether a tenant's requests may pin a candidate policy version (test traffic).
ALTER TABLE tenant_settings ADD COLUMN allow_pinned_versions INTEGER NOT NULL DEFAULT 0;
