-- External agents: the public keys admins register per group (kept once revoked, so a revoked
-- key cannot be registered again and its agents stay named), the one-time nonces agents sign
-- to join, and the key each external agent joined with.
CREATE TABLE agent_keys (
    group_name  TEXT NOT NULL,
    name        TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER,
    PRIMARY KEY (group_name, name),
    UNIQUE (group_name, public_key)
);

CREATE TABLE agent_challenges (
    nonce      TEXT PRIMARY KEY,
    group_name TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX agent_challenges_group ON agent_challenges (group_name, expires_at);

ALTER TABLE agents ADD COLUMN agent_key TEXT;
