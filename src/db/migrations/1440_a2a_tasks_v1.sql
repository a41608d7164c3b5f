-- A2A 1.0 (docs/agents.md): tasks change state after they are created (input-required -> completed
-- or canceled), ListTasks pages them newest status first within a context, and SubscribeToTask
-- watches a task for its next change. updated_at is the time of the task's current status.
ALTER TABLE a2a_tasks ADD COLUMN IF NOT EXISTS updated_at timestamptz;
UPDATE a2a_tasks SET updated_at = created_at WHERE updated_at IS NULL;
ALTER TABLE a2a_tasks ALTER COLUMN updated_at SET NOT NULL;
CREATE INDEX IF NOT EXISTS a2a_tasks_context_updated_idx ON a2a_tasks (context_id, updated_at DESC, id DESC);
