-- Background jobs run once per period across all instances (docs/deployment.md): the instance
-- that claims (job, period_start) under the job's advisory lock runs it, the others skip.
CREATE TABLE IF NOT EXISTS job_runs (
  job text NOT NULL,
  period_start timestamptz NOT NULL,
  instance text NOT NULL,
  claimed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job, period_start)
);
