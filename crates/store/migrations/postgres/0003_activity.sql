ALTER TABLE sessions ADD COLUMN started_at BIGINT;
ALTER TABLE sessions ADD COLUMN last_activity BIGINT;
