-- Every deployed plugin version, so a restart comes back with the same plugins and a rollback needs no
-- re-upload. At most one version of a (tenant, kind, name) slot is 'active'.
CREATE TABLE plugins (
    tenant_id  VARCHAR(64) NOT NULL,
    kind       VARCHAR(32) NOT NULL,
    name       VARCHAR(64) NOT NULL,
    version    BIGINT      NOT NULL,
    sha256     VARCHAR(64) NOT NULL,
    wasm       LONGBLOB    NOT NULL,
    state      VARCHAR(16) NOT NULL,
    created_at BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, kind, name, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Per-tenant settings an operator changes through the admin API.
CREATE TABLE tenant_settings (
    tenant_id              VARCHAR(64) NOT NULL PRIMARY KEY,
    rate_limit_fail_closed INT         NOT NULL,
    updated_at             BIGINT      NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
