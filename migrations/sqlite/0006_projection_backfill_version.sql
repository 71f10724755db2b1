-- Which plugin version a backfill builds (0: the bundled one), so that a deploy can wait for its own.
ALTER TABLE projection_backfill ADD COLUMN plugin_version INTEGER NOT NULL DEFAULT 0;
