-- The mutes whose time ran out, found by the host's sweep (it ends each with its `unmute` event).
CREATE INDEX mutes_by_expiry ON mutes (rel_status, expires_at);
