-- How many tools each baseline added, removed and changed, as columns: the compliance export
-- counts drifts from them, so the drift storage job can drop the change lists of baselines no
-- reader needs (a list names up to 2,000 tools; a server drifting on every check kept one per
-- check for good). Filled from the lists of the baselines recorded before.
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS tools_added integer NOT NULL DEFAULT 0;
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS tools_removed integer NOT NULL DEFAULT 0;
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS tools_changed integer NOT NULL DEFAULT 0;
UPDATE drift_baselines SET tools_added = jsonb_array_length(changes->'added'), tools_removed = jsonb_array_length(changes->'removed'),
                           tools_changed = jsonb_array_length(changes->'changed')
 WHERE drift_detected;
