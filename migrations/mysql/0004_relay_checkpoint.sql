-- Where the binlog-mode relay resumes: the end of the last binlog transaction whose outbox rows Kafka (or the
-- embedded bus) acknowledged. Written in the same transaction that deletes those rows from the outbox, so
-- every row not yet covered by the checkpoint is still in the outbox table (which makes a reset lossless).
CREATE TABLE relay_checkpoint (
    name        VARCHAR(64)  NOT NULL,
    binlog_file VARCHAR(512) NOT NULL,
    binlog_pos  BIGINT       NOT NULL,
    updated_at  BIGINT       NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
