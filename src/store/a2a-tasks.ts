import type { Queryable } from '../db/index.js';

/** A stored A2A Task (the JSON object exactly as /a2a returned it). */
export interface StoredTask {
  id: string;
  contextId: string;
  status: { state: string; timestamp: string };
  [k: string]: unknown;
}

export function a2aTaskStore(db: Queryable) {
  return {
    async insert(task: StoredTask, createdAt: Date): Promise<void> {
      await db.query('INSERT INTO a2a_tasks (id, context_id, state, created_at, task) VALUES ($1, $2, $3, $4, $5)', [
        task.id,
        task.contextId,
        task.status.state,
        createdAt,
        JSON.stringify(task),
      ]);
    },
    async get(id: string): Promise<StoredTask | null> {
      const rows = await db.query<{ task: StoredTask }>('SELECT task FROM a2a_tasks WHERE id = $1', [id]);
      return rows[0]?.task ?? null;
    },
  };
}

export type A2aTaskStore = ReturnType<typeof a2aTaskStore>;
