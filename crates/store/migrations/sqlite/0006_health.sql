-- One row the health check writes: a store that cannot commit it cannot take writes. `probe`
-- stays NULL; the check fills it in a transaction it rolls back, to ask the file for room.
CREATE TABLE health (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at INTEGER NOT NULL,
    probe BLOB
);
INSERT INTO health (id, checked_at) VALUES (1, 0);
