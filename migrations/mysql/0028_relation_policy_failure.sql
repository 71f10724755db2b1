-- The relation policy's own failure mode: NULL (every row at first, and whatever a release without the
-- column writes) follows the rate limiter's, as before the column. Expand-only.
ALTER TABLE tenant_settings ADD COLUMN relation_policy_fail_closed INT NULL;
