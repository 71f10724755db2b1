-- The W3C trace context of the change that wrote the row, when its trace is sampled (NULL otherwise, and
-- always with tracing off): the relay continues the trace and hands it on as a message header, as
-- Debezium's outbox does. `relay_parked` keeps it with the row it parks.
ALTER TABLE outbox ADD COLUMN traceparent TEXT NULL;
ALTER TABLE relay_parked ADD COLUMN traceparent TEXT NULL;
