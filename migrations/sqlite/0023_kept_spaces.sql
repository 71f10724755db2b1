-- The in-process cache's spaces, kept across restarts (one row: the newest snapshot). The positions the
-- snapshot covers are rows of bus_positions named `kept:{consumer}`, so retention keeps the embedded bus's
-- messages after them.
CREATE TABLE kept_spaces (
    id       INTEGER NOT NULL PRIMARY KEY,
    snapshot BLOB    NOT NULL,
    kept_at  INTEGER NOT NULL
);
