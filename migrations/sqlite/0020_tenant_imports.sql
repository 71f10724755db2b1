-- A tenant's running import (one at a time per tenant). Its lease is renewed by every batch; a mark whose
-- lease ran out belongs to an import whose process stopped: a serving node builds the tenant's projector
-- spaces again from the truth and removes it.
CREATE TABLE tenant_imports (
    tenant_id   TEXT    NOT NULL PRIMARY KEY,
    started_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL
);
