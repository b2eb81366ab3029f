-- Agents removed by hand (`corral agent rm`), kept with their shape until the retention prunes
-- them: a session only such an agent could hold waits for it to come back instead of being
-- refused. An agent that joins again under its id is no longer "removed".
CREATE TABLE removed_agents (
    id         TEXT PRIMARY KEY,
    group_name TEXT NOT NULL,
    capacity   TEXT NOT NULL,
    devices    TEXT NOT NULL,
    removed_at BIGINT NOT NULL
);
CREATE INDEX removed_agents_group ON removed_agents (group_name);
