-- Agent auto-update: the builds the manager serves (the file is kept in the manager's data
-- directory under its SHA-256), what each agent runs, the version it is marked to update to,
-- and the target of its last failed update (not tried again until the target changes).
CREATE TABLE agent_builds (
    version     TEXT NOT NULL,
    platform    TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    uploaded_at INTEGER NOT NULL,
    PRIMARY KEY (version, platform)
);

ALTER TABLE agents ADD COLUMN version TEXT;
ALTER TABLE agents ADD COLUMN platform TEXT;
ALTER TABLE agents ADD COLUMN updating TEXT;
ALTER TABLE agents ADD COLUMN update_failed TEXT;
