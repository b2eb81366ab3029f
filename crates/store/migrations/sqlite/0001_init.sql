-- Corral's schema, SQLite flavour. Keep it in step with ../postgres/0001_init.sql: the store reads
-- both through one code path, so column names and meanings must match.
-- Slots are TEXT in the canonical `cpu=2,gpu=0.5,mem=4GiB` form; times are INTEGER milliseconds
-- since the epoch; flags are INTEGER 0/1; structured fields are JSON text.

CREATE TABLE groups (
    name           TEXT PRIMARY KEY,
    policy         TEXT NOT NULL,
    scheduler      TEXT NOT NULL,
    templates      TEXT NOT NULL,
    last_scale_out INTEGER,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE images (
    name      TEXT PRIMARY KEY,
    min_slots TEXT NOT NULL
);

CREATE TABLE agents (
    id              TEXT PRIMARY KEY,
    group_name      TEXT NOT NULL,
    template        TEXT,
    capacity        TEXT NOT NULL,
    allocated       TEXT NOT NULL,
    state           TEXT NOT NULL,
    labels          TEXT NOT NULL,
    external        INTEGER NOT NULL,
    drained_by_hand INTEGER NOT NULL,
    idle_since      INTEGER,
    last_seen       INTEGER NOT NULL,
    joined_at       INTEGER NOT NULL
);
CREATE INDEX agents_group_state ON agents (group_name, state);

CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    group_name     TEXT NOT NULL,
    owner          TEXT NOT NULL,
    priority       INTEGER NOT NULL,
    request        TEXT NOT NULL,
    image          TEXT,
    session_type   TEXT NOT NULL,
    state          TEXT NOT NULL,
    agent          TEXT,
    -- What the session holds on its agent (its required shares when placed), so that ending it
    -- frees exactly that even if the image's minimums change meanwhile.
    allocation     TEXT,
    blocked_passes INTEGER NOT NULL,
    submitted_at   INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    wait_reason    TEXT,
    end_reason     TEXT,
    spec           TEXT NOT NULL
);
CREATE INDEX sessions_group_state ON sessions (group_name, state);
CREATE INDEX sessions_owner ON sessions (owner);
CREATE INDEX sessions_order ON sessions (submitted_at, id);

CREATE TABLE session_history (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    at      INTEGER NOT NULL,
    state   TEXT NOT NULL,
    reason  TEXT NOT NULL
);
CREATE INDEX session_history_session ON session_history (session, id);

-- AUTOINCREMENT: ids never go back, so paging by id is stable.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    group_name TEXT,
    session    TEXT,
    agent      TEXT,
    kind       TEXT NOT NULL,
    message    TEXT NOT NULL
);
CREATE INDEX events_group ON events (group_name, id);
CREATE INDEX events_session ON events (session, id);
CREATE INDEX events_agent ON events (agent, id);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    role       TEXT NOT NULL,
    user_name  TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE in_flight (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name TEXT NOT NULL,
    template   TEXT NOT NULL,
    count      INTEGER NOT NULL,
    since      INTEGER NOT NULL
);
CREATE INDEX in_flight_group ON in_flight (group_name);
