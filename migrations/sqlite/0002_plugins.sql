-- Every deployed plugin version, so a restart comes back with the same plugins and a rollback needs no
-- re-upload. At most one version of a (tenant, kind, name) slot is 'active'.
CREATE TABLE plugins (
    tenant_id  TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    sha256     TEXT    NOT NULL,
    wasm       BLOB    NOT NULL,
    state      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, kind, name, version)
);

-- Per-tenant settings an operator changes through the admin API.
CREATE TABLE tenant_settings (
    tenant_id              TEXT    NOT NULL PRIMARY KEY,
    rate_limit_fail_closed INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL
);
