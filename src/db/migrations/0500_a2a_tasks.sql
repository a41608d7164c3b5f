-- A2A tasks created by message/send on /a2a, so tasks/get can return them from any instance.
-- task holds the A2A Task object as sent (id, contextId, status, artifacts, history, kind).
CREATE TABLE a2a_tasks (
  id text PRIMARY KEY,
  context_id text NOT NULL,
  state text NOT NULL,
  created_at timestamptz NOT NULL,
  task jsonb NOT NULL
);
CREATE INDEX a2a_tasks_context_idx ON a2a_tasks (context_id, created_at);
