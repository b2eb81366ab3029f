-- Session arrays: one submission, a session per index of a range. An array keeps what was
-- submitted for every index (`{index}` not replaced, in `spec`), its range (first, last, step)
-- and its limit (`max_running`, `%N`: NULL for none); each of its sessions names it and its
-- index. What its sessions do is counted from them, never kept here.
CREATE TABLE arrays (
    id           TEXT PRIMARY KEY,
    group_name   TEXT NOT NULL,
    owner        TEXT NOT NULL,
    first_index  INTEGER NOT NULL,
    last_index   INTEGER NOT NULL,
    step         INTEGER NOT NULL,
    max_running  INTEGER,
    sessions     INTEGER NOT NULL,
    priority     INTEGER NOT NULL,
    request      TEXT NOT NULL,
    image        TEXT,
    session_type TEXT NOT NULL,
    spec         TEXT NOT NULL,
    submitted_at INTEGER NOT NULL
);
CREATE INDEX arrays_group ON arrays (group_name, submitted_at);
CREATE INDEX arrays_owner ON arrays (owner, submitted_at);
ALTER TABLE sessions ADD COLUMN array_id TEXT;
ALTER TABLE sessions ADD COLUMN array_index INTEGER;
-- An array's sessions by state in index order (their ids sort so): its counts, its cancel, and
-- the head of a capped array's queue read by index without a sort.
CREATE INDEX sessions_array ON sessions (array_id, state, id);
-- The head of a group's queue read in order off the index (the default sequencers' order,
-- submission then id), not sorted from every pending session at each pass: a queue of 100,000
-- is read 20,000 at a time.
DROP INDEX sessions_group_state;
CREATE INDEX sessions_group_state ON sessions (group_name, state, submitted_at, id);
