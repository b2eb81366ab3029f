-- A group's history (GET /groups/{g}/history) reads its nodes' lifetimes from the events that
-- start and end them, and its sessions' states from their history rows; these indexes let it
-- read only those: the group's node events by kind and time, and the group's sessions that
-- changed since a time (an ended session's updated_at is when it ended).
CREATE INDEX events_group_kind ON events (group_name, kind, at);
CREATE INDEX sessions_group_updated ON sessions (group_name, updated_at);
