-- Several managers on one database: each group's control loop and scaling driver run in the
-- manager holding its lease. `epoch` grows with every change of owner, and every write of a
-- pass or a driver checks it (fencing); the owner renews `expires_at` (ms since the epoch).
CREATE TABLE group_leases (
    group_name TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- The managers at work, as each last said (groups are spread over those seen lately).
CREATE TABLE managers (
    id      TEXT PRIMARY KEY,
    seen_at BIGINT NOT NULL
);

-- Each group's launch governor (backoff per template, launches in the budget window), as
-- JSON, written by the group's owner at each change so that the next owner goes on from it.
CREATE TABLE launch_governors (
    group_name TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
