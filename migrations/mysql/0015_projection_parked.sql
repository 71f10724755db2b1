-- A tenant's bus events a projector could not take in time (its plugin failing or over its time budget, or
-- its space being built): kept here, in the worker's batch before its position is committed, so the other
-- tenants' events of the batch go on; retried with backoff (effects are exactly once in result in any
-- order), dead-lettered after repeated failures.
CREATE TABLE projection_parked (
    id          BIGINT        NOT NULL AUTO_INCREMENT,
    projection  VARCHAR(128)  NOT NULL,
    tenant_id   VARCHAR(64)   NOT NULL,
    event_id    VARCHAR(255)  NOT NULL,
    payload     VARCHAR(8192) NOT NULL,
    parked_at   BIGINT        NOT NULL,
    attempts    INT           NOT NULL,
    reason      VARCHAR(1024) NOT NULL,
    PRIMARY KEY (id),
    KEY projection_parked_by_tenant (projection, tenant_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
