-- What each agent holds, as its syncs and the liveness watch ask: found without reading every
-- session ever run.
CREATE INDEX sessions_agent_state ON sessions (agent, state);
