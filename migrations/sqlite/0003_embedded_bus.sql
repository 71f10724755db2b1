-- The embedded bus, used when no Kafka is configured: a durable, ordered log per topic and every
-- consumer's position in it. Only the relay appends (one writer), so `seq` order is commit order.
CREATE TABLE bus_log (
    topic      TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    msg_key    TEXT    NOT NULL,
    headers    TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (topic, seq)
);

CREATE TABLE bus_positions (
    consumer TEXT    NOT NULL,
    topic    TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (consumer, topic)
);
