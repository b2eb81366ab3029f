-- Devices one by one: an agent's devices as it reports them (JSON, without what is allocated:
-- a snapshot adds that up from the grants of the sessions holding capacity on it), a session's
-- device constraints (model, least memory) and the devices it was granted once placed.
ALTER TABLE agents ADD COLUMN devices TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sessions ADD COLUMN constraints TEXT NOT NULL DEFAULT '[]';
ALTER TABLE sessions ADD COLUMN devices TEXT NOT NULL DEFAULT '[]';
