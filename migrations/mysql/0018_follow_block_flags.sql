-- A block's flag on the blocker's follow row of the pair (`following.blocked`: `from` blocks `to`), kept by the
-- block's and the unblock's own transactions: a follow learns of a block either way from the two follow rows
-- it reads and locks anyway, instead of two more reads of `blocks` (which stays the block's truth: its
-- versions, its events, the lists). A pair never followed gets a row at status 0, version 0 for the flag.
-- Drain the nodes older than this migration before it runs: they write blocks without the flag (a flag left
-- stale heals with the pair's next block or unblock).
ALTER TABLE following ADD COLUMN blocked INT NOT NULL DEFAULT 0;

INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at, blocked)
SELECT tenant_id, from_user_id, to_user_id, 0, 0, created_at, updated_at, 1 FROM blocks WHERE rel_status = 1
ON DUPLICATE KEY UPDATE blocked = 1;
