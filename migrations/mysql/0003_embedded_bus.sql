-- The embedded bus, used when no Kafka is configured: a durable, ordered log per topic and every
-- consumer's position in it. Only the relay appends (one writer), so `seq` order is commit order.
CREATE TABLE bus_log (
    topic      VARCHAR(249)  NOT NULL,
    seq        BIGINT        NOT NULL,
    msg_key    VARCHAR(512)  NOT NULL,
    headers    VARCHAR(4096) NOT NULL,
    payload    VARCHAR(8192) NOT NULL,
    created_at BIGINT        NOT NULL,
    PRIMARY KEY (topic, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE bus_positions (
    consumer VARCHAR(128) NOT NULL,
    topic    VARCHAR(249) NOT NULL,
    seq      BIGINT       NOT NULL,
    PRIMARY KEY (consumer, topic)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
