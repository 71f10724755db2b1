-- A runner's claim takes the running job that waited longest (`ORDER BY updated_at`), retention deletes
-- finished jobs by age, and a start looks for a running job naming either account as a move's destination.
CREATE INDEX account_jobs_by_turn ON account_jobs (state, updated_at, id);
CREATE INDEX account_jobs_by_destination ON account_jobs (tenant_id, target_user_id, state);
