-- Tool lists stored once per manifest (content-addressed by manifest_hash, which determines the
-- list: the SHA-256 of every tool's canonical form, in canonical order). Every /api/drift call
-- records a baseline; with the list in each baseline, re-checking an unchanged manifest of 2,000
-- tools stored another 700 KB copy each time. New baselines leave `tools` NULL and name their list
-- by manifest_hash; baselines recorded before keep their own copy (readers take whichever is set).
-- used_at: when a baseline last stored or named the list; the drift storage job drops lists no
-- kept baseline names only when that is more than a day ago, so a check that re-uses an old list
-- (a server going back to an earlier manifest) never loses it to a concurrent run of the job.
CREATE TABLE IF NOT EXISTS drift_manifests (
  manifest_hash text PRIMARY KEY,
  tools jsonb NOT NULL,
  used_at timestamptz NOT NULL
);
ALTER TABLE drift_baselines ALTER COLUMN tools DROP NOT NULL;
