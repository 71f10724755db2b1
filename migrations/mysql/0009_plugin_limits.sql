-- The limits each version was deployed with (NULL: deployed before limits were stored; the defaults apply).
ALTER TABLE plugins ADD COLUMN deadline_ms BIGINT NULL, ADD COLUMN memory_bytes BIGINT NULL, ADD COLUMN fuel BIGINT NULL;
