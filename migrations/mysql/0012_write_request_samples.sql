-- A sample of the write requests the rate-limit policy decided (refused ones too), for `strand plugin test
-- --replay` of a rate limiter; bounded per tenant by the writer, which deletes a tenant's oldest beyond its share.
CREATE TABLE write_request_samples (
    id        BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    tenant_id VARCHAR(64) NOT NULL,
    user_id   BIGINT      NOT NULL,
    action    VARCHAR(8)  NOT NULL,
    target_id BIGINT      NOT NULL,
    now_ms    BIGINT      NOT NULL,
    verdict   VARCHAR(12) NOT NULL,
    KEY write_request_samples_by_tenant (tenant_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
