-- What plugins logged (the `log` import, and the host's line for a trap), named by the host; bounded per
-- tenant by the writer, which deletes a tenant's oldest lines beyond its share.
CREATE TABLE plugin_logs (
    id        BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at        BIGINT        NOT NULL,
    tenant_id VARCHAR(64)   NOT NULL,
    kind      VARCHAR(16)   NOT NULL,
    name      VARCHAR(64)   NOT NULL,
    version   BIGINT        NOT NULL,
    level     VARCHAR(8)    NOT NULL,
    input     VARCHAR(200)  NULL,
    message   VARCHAR(1100) NOT NULL,
    KEY plugin_logs_by_plugin (tenant_id, kind, name, id),
    KEY plugin_logs_by_tenant (tenant_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
