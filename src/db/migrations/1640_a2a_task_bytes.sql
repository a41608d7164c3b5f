-- The size of each stored A2A task (its JSON, in bytes), so that a ListTasks page is cut by what
-- it would carry before the tasks are read (docs/agents.md "Tasks"): a context's tasks hold the
-- messages clients sent (up to BODY_LIMIT each, 50 per task), and a page of 100 of them read
-- whole could hold hundreds of MB. Tasks stored before this migration get their size once here.
ALTER TABLE a2a_tasks ADD COLUMN IF NOT EXISTS bytes int4;
UPDATE a2a_tasks SET bytes = octet_length(task::text) WHERE bytes IS NULL;
ALTER TABLE a2a_tasks ALTER COLUMN bytes SET NOT NULL;
