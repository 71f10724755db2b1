-- The relation policy's own failure mode (it followed the rate limiter's before); existing tenants keep
-- what they had. Expand-only: a release without the column still reads and writes the table.
ALTER TABLE tenant_settings ADD COLUMN relation_policy_fail_closed INTEGER NOT NULL DEFAULT 0;
UPDATE tenant_settings SET relation_policy_fail_closed = rate_limit_fail_closed;
