-- A periodic job's run holds a lease while it runs (src/services/jobs.ts): the instance running it
-- renews lease_until, and sets finished_at when the run ends. The next period's claim is refused
-- while a run of the same job is unfinished and its lease has not expired, so a run longer than its
-- period never overlaps the next one on another instance; an instance that died mid-run blocks
-- the job at most until its lease expires (docs/deployment.md "What the database coordinates").
ALTER TABLE job_runs ADD COLUMN lease_until timestamptz, ADD COLUMN finished_at timestamptz;
-- Runs claimed before leases existed: finished as far as anyone can tell.
UPDATE job_runs SET finished_at = claimed_at;
CREATE INDEX job_runs_unfinished_idx ON job_runs (job) WHERE finished_at IS NULL;
