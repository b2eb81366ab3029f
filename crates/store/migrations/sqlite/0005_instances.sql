-- Instances asked of a group's provider, one row each: rows in state 'requested' (written with
-- the pass that decided the launch) or 'provisioning' (the provider started it) are the group's
-- launches in flight and count as capacity; the agent that joins with the instance's id moves it
-- to 'joined'. They replace the in_flight table, whose rows only static groups ever wrote.
CREATE TABLE instances (
    id           TEXT PRIMARY KEY,
    group_name   TEXT NOT NULL,
    template     TEXT NOT NULL,
    state        TEXT NOT NULL,
    provider_id  TEXT,
    requested_at INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    reason       TEXT
);
CREATE INDEX instances_group_state ON instances (group_name, state);
DROP TABLE in_flight;

-- The group's provider configuration (JSON); NULL is the static provider.
ALTER TABLE groups ADD COLUMN provider TEXT;

-- A bootstrap token made for one launched instance joins as that agent only.
ALTER TABLE tokens ADD COLUMN agent_id TEXT;
