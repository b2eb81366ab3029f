-- Image auto-update: the digest of each image each agent holds (new sessions of the image
-- start on it there), and the digest the registry offered at the agent's last check.
CREATE TABLE agent_images (
    agent       TEXT NOT NULL,
    image       TEXT NOT NULL,
    digest      TEXT NOT NULL,
    offered     TEXT,
    reported_at BIGINT NOT NULL,
    PRIMARY KEY (agent, image)
);
CREATE INDEX agent_images_by_image ON agent_images (image);

-- The accounts a group's agents sign in to registries with, for image auto-update; the
-- password sealed with the manager's secrets key, as provider secrets are.
CREATE TABLE registry_logins (
    group_name  TEXT NOT NULL,
    registry    TEXT NOT NULL,
    username    TEXT NOT NULL,
    password    TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, registry)
);
