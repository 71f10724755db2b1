-- Credentials the platform admin issues to a tenant's team: only a hash of the secret is kept.
CREATE TABLE tenant_keys (
    tenant_id     TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    secret_sha256 TEXT    NOT NULL UNIQUE,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER NULL,
    PRIMARY KEY (tenant_id, name)
);

-- Every change made through the admin API: who, to which tenant and slot, and how it ended.
CREATE TABLE audit_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,
    actor     TEXT    NOT NULL,
    tenant_id TEXT    NOT NULL,
    action    TEXT    NOT NULL,
    slot      TEXT    NULL,
    version   INTEGER NULL,
    sha256    TEXT    NULL,
    outcome   TEXT    NOT NULL,
    detail    TEXT    NOT NULL
);
CREATE INDEX audit_log_by_tenant ON audit_log (tenant_id, id);

-- A tenant's own JWT verification keys (at most two, for rotation): its tokens verify only with them.
-- key_material is an HS256 secret (needed to verify, so kept as given) or a public key in PEM.
CREATE TABLE tenant_jwt_keys (
    tenant_id    TEXT    NOT NULL,
    kid          TEXT    NOT NULL,
    algorithm    TEXT    NOT NULL,
    key_material TEXT    NOT NULL,
    issuer       TEXT    NULL,
    audience     TEXT    NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, kid)
);
