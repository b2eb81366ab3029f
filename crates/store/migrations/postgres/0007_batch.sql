-- The batch system a group is bound to (JSON: system and options); NULL is none.
ALTER TABLE groups ADD COLUMN batch TEXT;

-- The batch jobs Corral submitted, each with the user it submitted it for: users see and act on
-- these only. A job's tasks (Slurm's 12_3, Grid Engine's 12.3) belong to its row.
CREATE TABLE batch_jobs (
    group_name   TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    owner        TEXT NOT NULL,
    submitted_at BIGINT NOT NULL,
    -- The directory Corral made for a job with files staged or collected (NULL: none), the
    -- inputs not uploaded yet and the outputs named (JSON arrays), and whether the last input
    -- releases it (it was held for them, not by its submitter).
    directory    TEXT,
    awaiting     TEXT NOT NULL DEFAULT '[]',
    outputs      TEXT NOT NULL DEFAULT '[]',
    release_after_inputs INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (group_name, job_id)
);
CREATE INDEX batch_jobs_owner ON batch_jobs (group_name, owner);
