-- The server whose binlog the checkpoint's file and offset are in (`@@server_id`): after a failover the
-- relay sees the checkpoint is another server's and resumes from the outbox instead. NULL for a checkpoint
-- saved before this column existed (taken to be the connected server's).
ALTER TABLE relay_checkpoint ADD COLUMN server_id BIGINT NULL AFTER binlog_pos;
