-- A sample of the write requests the rate-limit policy decided (refused ones too), for `strand plugin test
-- --replay` of a rate limiter; bounded per tenant by the writer, which deletes a tenant's oldest beyond its share.
CREATE TABLE write_request_samples (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT    NOT NULL,
    user_id   INTEGER NOT NULL,
    action    TEXT    NOT NULL,
    target_id INTEGER NOT NULL,
    now_ms    INTEGER NOT NULL,
    verdict   TEXT    NOT NULL
);
CREATE INDEX write_request_samples_by_tenant ON write_request_samples (tenant_id, id);
