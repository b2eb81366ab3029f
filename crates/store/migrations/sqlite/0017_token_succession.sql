-- An agent's token from a join supersedes the agent's older tokens once it is first used
-- (a self-update or a re-join leaves the agent one token); tokens made before are taken as used.
ALTER TABLE tokens ADD COLUMN supersedes INTEGER NOT NULL DEFAULT 0;

-- External agents' challenges hold no state: a nonce carries its expiry and the managers' MAC.
-- Only nonces used by a join are kept (each joins once), until they expire.
DROP TABLE agent_challenges;
CREATE TABLE used_nonces (
    nonce      TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE INDEX used_nonces_expiry ON used_nonces (expires_at);
