-- Whether a projector version's spaces depend on the events' history (declared at deploy): they are never
-- built from the truth. An added column with a default: a release without it reads and writes the table as before.
ALTER TABLE plugins ADD COLUMN history INT NOT NULL DEFAULT 0;
