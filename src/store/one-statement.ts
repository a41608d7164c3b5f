import type { QueryOptions } from '../db/index.js';

// Several data-modifying statements as ONE statement (writable CTEs): atomic without BEGIN and
// COMMIT, one round trip instead of one per statement plus two. Group commits pay this per batch.

export type Statement = [sql: string, params: unknown[], opts?: QueryOptions];

/** Combines statements (each numbering its own $1..$n) into one; the last one's result is returned. */
export function oneStatement(stmts: readonly Statement[]): Statement {
  if (stmts.length === 1) return stmts[0]!;
  const params: unknown[] = [];
  const parts = stmts.map(([sql, ps]) => {
    const offset = params.length;
    params.push(...ps);
    return sql.replace(/\$(\d+)/g, (_m, d: string) => `$${Number(d) + offset}`);
  });
  const last = parts.pop()!;
  return [`WITH ${parts.map((sql, i) => `w${i} AS (${sql})`).join(',\n')}\n${last}`, params];
}
