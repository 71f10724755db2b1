-- Credentials the platform admin issues to a tenant's team: only a hash of the secret is kept.
CREATE TABLE tenant_keys (
    tenant_id     VARCHAR(64) NOT NULL,
    name          VARCHAR(64) NOT NULL,
    secret_sha256 VARCHAR(64) NOT NULL,
    created_at    BIGINT      NOT NULL,
    last_used_at  BIGINT      NULL,
    PRIMARY KEY (tenant_id, name),
    UNIQUE KEY tenant_keys_by_secret (secret_sha256)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Every change made through the admin API: who, to which tenant and slot, and how it ended.
CREATE TABLE audit_log (
    id        BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at        BIGINT        NOT NULL,
    actor     VARCHAR(100)  NOT NULL,
    tenant_id VARCHAR(64)   NOT NULL,
    action    VARCHAR(32)   NOT NULL,
    slot      VARCHAR(100)  NULL,
    version   BIGINT        NULL,
    sha256    VARCHAR(64)   NULL,
    outcome   VARCHAR(16)   NOT NULL,
    detail    VARCHAR(1000) NOT NULL,
    KEY audit_log_by_tenant (tenant_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A tenant's own JWT verification keys (at most two, for rotation): its tokens verify only with them.
-- key_material is an HS256 secret (needed to verify, so kept as given) or a public key in PEM.
CREATE TABLE tenant_jwt_keys (
    tenant_id    VARCHAR(64)   NOT NULL,
    kid          VARCHAR(64)   NOT NULL,
    algorithm    VARCHAR(8)    NOT NULL,
    key_material VARCHAR(8000) NOT NULL,
    issuer       VARCHAR(500)  NULL,
    audience     VARCHAR(500)  NULL,
    created_at   BIGINT        NOT NULL,
    PRIMARY KEY (tenant_id, kid)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
