-- Sessions of a group whose sessions run as batch jobs: the key of the job that runs each (NULL:
-- it runs on an agent), and for each such job the session it runs. The cycle leaves these
-- sessions alone; the manager follows their jobs.
ALTER TABLE sessions ADD COLUMN batch_job TEXT;
ALTER TABLE batch_jobs ADD COLUMN session TEXT;
