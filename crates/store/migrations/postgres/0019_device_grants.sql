-- The sessions that hold devices, as every pass's snapshot adds up their grants: found without
-- reading every scheduled or running session of the group (most hold no device).
CREATE INDEX sessions_device_grants ON sessions (group_name, state) WHERE devices <> '[]';
