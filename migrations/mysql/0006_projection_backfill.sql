-- Progress of projector backfills, per projector and tenant: what the admin API shows while a projector
-- deployed at runtime is being filled from the truth (written by whichever worker process runs it).
CREATE TABLE projection_backfill (
    projection VARCHAR(128) NOT NULL,
    tenant_id  VARCHAR(64)  NOT NULL,
    done       BIGINT       NOT NULL,
    total      BIGINT       NOT NULL,
    state      VARCHAR(16)  NOT NULL,
    updated_at BIGINT       NOT NULL,
    PRIMARY KEY (projection, tenant_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
