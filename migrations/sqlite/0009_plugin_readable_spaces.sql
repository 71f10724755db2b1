-- The spaces of a projector version that the API serves (`GET /v1/projections/...`), as JSON:
-- [{"space": "friends", "shape": "counter"}, ...]. Empty: none (the default of versions deployed before).
ALTER TABLE plugins ADD COLUMN readable VARCHAR(4096) NOT NULL DEFAULT '[]';
