-- The limits each version was deployed with (NULL: deployed before limits were stored; the defaults apply).
ALTER TABLE plugins ADD COLUMN deadline_ms INTEGER NULL;
ALTER TABLE plugins ADD COLUMN memory_bytes INTEGER NULL;
ALTER TABLE plugins ADD COLUMN fuel INTEGER NULL;
