-- Outbox rows of a tenant whose destination the bus refused (a topic Kafka will not create, an ACL, a quota)
-- or whose router ran past its time budget: moved here in the relay's settling transaction, out of the
-- outbox, so the other tenants' rows go on; retried in id order (per user order kept) with backoff until
-- published, then deleted. `id` is the outbox row's id.
CREATE TABLE relay_parked (
    id             BIGINT        NOT NULL,
    tenant_id      VARCHAR(64)   NOT NULL,
    aggregate_type VARCHAR(64)   NOT NULL,
    aggregate_id   VARCHAR(128)  NOT NULL,
    event_type     VARCHAR(64)   NOT NULL,
    event_key      VARCHAR(128)  NOT NULL,
    payload        VARCHAR(8192) NOT NULL,
    created_at     BIGINT        NOT NULL,
    parked_at      BIGINT        NOT NULL,
    reason         VARCHAR(1024) NOT NULL,
    PRIMARY KEY (id),
    KEY relay_parked_by_tenant (tenant_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
