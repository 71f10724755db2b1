-- A tenant's bus events a projector could not take in time (its plugin failing or over its time budget, or
-- its space being built): kept here before the batch's position is committed, so the other tenants' events
-- go on; retried with backoff, dead-lettered after repeated failures.
CREATE TABLE projection_parked (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    projection  TEXT    NOT NULL,
    tenant_id   TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    parked_at   INTEGER NOT NULL,
    attempts    INTEGER NOT NULL,
    reason      TEXT    NOT NULL
);
CREATE INDEX projection_parked_by_tenant ON projection_parked (projection, tenant_id, id);
