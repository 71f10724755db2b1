-- What plugins logged (the `log` import, and the host's line for a trap), named by the host; bounded per
-- tenant by the writer, which deletes a tenant's oldest lines beyond its share.
CREATE TABLE plugin_logs (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,
    tenant_id TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    version   INTEGER NOT NULL,
    level     TEXT    NOT NULL,
    input     TEXT    NULL,
    message   TEXT    NOT NULL
);
CREATE INDEX plugin_logs_by_plugin ON plugin_logs (tenant_id, kind, name, id);
CREATE INDEX plugin_logs_by_tenant ON plugin_logs (tenant_id, id);
