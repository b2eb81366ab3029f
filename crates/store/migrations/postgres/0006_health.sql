-- One row the health check writes: a store that cannot commit it cannot take writes.
CREATE TABLE health (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at BIGINT NOT NULL,
    probe BYTEA
);
INSERT INTO health (id, checked_at) VALUES (1, 0);
