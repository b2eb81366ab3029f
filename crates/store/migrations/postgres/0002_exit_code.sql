ALTER TABLE sessions ADD COLUMN exit_code BIGINT;
