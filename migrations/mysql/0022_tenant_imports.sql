-- A tenant's running import (one at a time per tenant). Its lease is renewed by every batch; a mark whose
-- lease ran out belongs to an import whose process stopped: a serving node builds the tenant's projector
-- spaces again from the truth and removes it.
CREATE TABLE tenant_imports (
    tenant_id   VARCHAR(64) NOT NULL PRIMARY KEY,
    started_at  BIGINT      NOT NULL,
    lease_until BIGINT      NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
