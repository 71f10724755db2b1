-- Outbox rows of a tenant whose destination the bus refused or whose router ran past its time budget: moved
-- here in the relay's settling transaction so the other tenants' rows go on; retried in id order with
-- backoff until published, then deleted. `id` is the outbox row's id.
CREATE TABLE relay_parked (
    id             INTEGER PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    event_key      TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    parked_at      INTEGER NOT NULL,
    reason         TEXT    NOT NULL
);
CREATE INDEX relay_parked_by_tenant ON relay_parked (tenant_id, id);
