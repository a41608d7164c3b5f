import type { Queryable } from '../db/index.js';
import { perTurn } from './per-turn.js';

// tasks/get with made-up ids: one statement per event-loop turn, not per call (src/store/per-turn.ts).
const tasksById = perTurn(async (db: Queryable, ids: string[]) => {
  const rows = await db.query<{ id: string; task: StoredTask }>('SELECT id, task FROM a2a_tasks WHERE id = ANY($1::text[])', [ids], { prepare: 'a2a_tasks_by_id' });
  return new Map(rows.map((r) => [r.id, r.task]));
});

/**
 * A stored A2A Task: the version-neutral task document (docs/agents.md "Tasks"), in the shape
 * A2A 0.3 sends it (states in kebab case, parts with `kind`). The 1.0 wire form is derived from
 * it by src/agents/a2a-v1.ts.
 */
export interface StoredTask {
  id: string;
  contextId: string;
  status: { state: string; timestamp: string; message?: unknown };
  [k: string]: unknown;
}

export interface TaskListFilter {
  contextId: string;
  /** Only tasks in this state. */
  state?: string;
  /** Only tasks whose status changed at or after this time. */
  updatedAfter?: Date;
}

/** Position after the last task of a page: tasks are ordered newest status first, then by id. */
export interface TaskCursor {
  updatedAt: Date;
  id: string;
}

export function a2aTaskStore(db: Queryable) {
  const where = (f: TaskListFilter, params: unknown[]) => {
    params.push(f.contextId);
    const clauses = [`context_id = $${params.length}`];
    if (f.state !== undefined) {
      params.push(f.state);
      clauses.push(`state = $${params.length}`);
    }
    if (f.updatedAfter !== undefined) {
      params.push(f.updatedAfter);
      clauses.push(`updated_at >= $${params.length}`);
    }
    return clauses.join(' AND ');
  };

  return {
    async insert(task: StoredTask, createdAt: Date): Promise<void> {
      const json = JSON.stringify(task);
      await db.query('INSERT INTO a2a_tasks (id, context_id, state, created_at, updated_at, task, bytes) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
        task.id,
        task.contextId,
        task.status.state,
        createdAt,
        new Date(task.status.timestamp),
        json,
        Buffer.byteLength(json),
      ]);
    },

    /** Deletes the tasks whose status last changed before `cutoff` (A2A_TASK_RETENTION_DAYS); answers how many. */
    async deleteIdleBefore(cutoff: Date): Promise<number> {
      const rows = await db.query<{ n: number }>('WITH gone AS (DELETE FROM a2a_tasks WHERE updated_at < $1 RETURNING 1) SELECT count(*)::int AS n FROM gone', [cutoff]);
      return rows[0]?.n ?? 0;
    },

    /** The task with this id, or null; the ids asked in one event-loop turn are read in one statement. */
    async get(id: string): Promise<StoredTask | null> {
      return (await tasksById(db, id)) ?? null;
    },

    /**
     * Replaces the task document only while the stored task is still in `expectedState`: of two
     * instances moving the same task on (an answer and a cancel), exactly one wins. True when this
     * call did.
     */
    async replaceIfState(task: StoredTask, expectedState: string): Promise<boolean> {
      const json = JSON.stringify(task);
      const rows = await db.query<{ id: string }>(
        'UPDATE a2a_tasks SET state = $3, updated_at = $4, task = $5, bytes = $6 WHERE id = $1 AND state = $2 RETURNING id',
        [task.id, expectedState, task.status.state, new Date(task.status.timestamp), json, Buffer.byteLength(json)],
      );
      return rows.length === 1;
    },

    /**
     * One page of a context's tasks, newest status first, starting after `after`: at most `limit`
     * tasks, and only as many as fit in `maxBytes` of stored JSON (the first always; a task is
     * read only when the tasks before it leave room for it). `more` tells whether tasks follow
     * the page (beyond `limit`, or beyond what fitted).
     */
    async list(filter: TaskListFilter, after: TaskCursor | null, limit: number, maxBytes: number): Promise<{ tasks: { task: StoredTask; updatedAt: Date }[]; more: boolean }> {
      const params: unknown[] = [];
      let sql = `SELECT id, updated_at, bytes, task, sum(bytes) OVER (ORDER BY updated_at DESC, id DESC) AS running FROM a2a_tasks WHERE ${where(filter, params)}`;
      if (after) {
        params.push(after.updatedAt, after.id);
        sql += ` AND (updated_at, id) < ($${params.length - 1}::timestamptz, $${params.length})`;
      }
      params.push(limit + 1);
      sql += ` ORDER BY updated_at DESC, id DESC LIMIT $${params.length}`;
      // The task document is read only for the rows that fit (the window's running sum of sizes
      // before the row); the others only say that the page is not the last.
      params.push(maxBytes);
      const rows = await db.query<{ task: StoredTask | null; updated_at: Date }>(
        `SELECT updated_at, CASE WHEN running - bytes = 0 OR running <= $${params.length} THEN task END AS task FROM (${sql}) page ORDER BY updated_at DESC, id DESC`,
        params,
      );
      const tasks: { task: StoredTask; updatedAt: Date }[] = [];
      for (const r of rows.slice(0, limit)) {
        if (r.task === null) break;
        tasks.push({ task: r.task, updatedAt: r.updated_at });
      }
      return { tasks, more: rows.length > tasks.length };
    },

    async count(filter: TaskListFilter): Promise<number> {
      const params: unknown[] = [];
      const rows = await db.query<{ n: number }>(`SELECT count(*)::int8 AS n FROM a2a_tasks WHERE ${where(filter, params)}`, params);
      return Number(rows[0]?.n ?? 0);
    },
  };
}

export type A2aTaskStore = ReturnType<typeof a2aTaskStore>;
