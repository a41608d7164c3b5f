// Loads benchmark telemetry straight into PostgreSQL for `npm run bench -- --scale`: raw rows
// with INSERT ... SELECT generate_series (no HTTP, no per-row round trips), then the three
// rollups the scores read (server_totals, telemetry_hourly, trust_evidence) recomputed from the
// raw rows in SQL, exactly as ingestion would have left them. The source of a row is derived
// from its id ('scale:' || id % SOURCES), since raw telemetry stores no source.
import pg from 'pg';
import { LATENCY_BIN_EDGES } from '../src/domain/latency-histogram.js';
import { HALF_LIFE_HOURS } from '../src/domain/scoring.js';

export const SCALE_SOURCES = 10;
const SPAN_S = 30 * 86_400;
const HALF_LIFE_S = HALF_LIFE_HOURS * 3600;
const CATEGORIES = ['search', 'database', 'files', 'devtools'];

/** Counts per latency bin, the same bins as src/domain/latency-histogram.ts. */
const HIST = `ARRAY[${[0, ...LATENCY_BIN_EDGES]
  .map((lo, i) => {
    const hi = LATENCY_BIN_EDGES[i];
    const cond = hi === undefined ? `latency_ms >= ${lo}` : i === 0 ? `latency_ms < ${hi}` : `latency_ms >= ${lo} AND latency_ms < ${hi}`;
    return `count(*) FILTER (WHERE ${cond})`;
  })
  .join(', ')}]::int8[]`;

export interface ScaleLoader {
  /** Creates `n` servers (urls from `urlOf`). */
  servers(n: number, urlOf: (i: number) => string): Promise<void>;
  /** Adds raw reports until the table holds `total`, spread over the 30 days before `end`; returns seconds taken. */
  growTo(total: number, end: Date, onProgress?: (rows: number) => void): Promise<number>;
  /** Rebuilds the rollups from the raw rows; returns seconds taken. */
  rebuildRollups(): Promise<number>;
  count(): Promise<number>;
  close(): Promise<void>;
}

export async function scaleLoader(url: string): Promise<ScaleLoader> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  // A bulk load of a scratch database: no need to wait for the WAL flush per statement.
  await c.query("SET synchronous_commit = off; SET work_mem = '64MB'; SET maintenance_work_mem = '256MB'");
  let serverCount = 0;
  const count = async () => Number((await c.query<{ n: string }>('SELECT count(*) AS n FROM telemetry')).rows[0]!.n);

  return {
    async servers(n, urlOf) {
      const urls = Array.from({ length: n }, (_, i) => urlOf(i));
      await c.query(
        `INSERT INTO servers (url, name, slug, category, registered_at)
         SELECT u, 'scale-' || i, 'scale-' || i, ($2::text[])[1 + (i - 1) % ${CATEGORIES.length}], now() - interval '31 days'
           FROM unnest($1::text[]) WITH ORDINALITY AS x(u, i)`,
        [urls, CATEGORIES],
      );
      serverCount = n;
    },

    async growTo(total, end, onProgress) {
      const t0 = performance.now();
      const [{ lo }] = (await c.query<{ lo: string }>('SELECT min(id) AS lo FROM servers')).rows as [{ lo: string }];
      let have = await count();
      // The per-row foreign key trigger dominates a bulk insert; the constraint is dropped for the
      // load and added back afterwards, which checks every row once in a single join instead.
      const fk = (
        await c.query<{ conname: string }>(`SELECT conname FROM pg_constraint WHERE conrelid = 'telemetry'::regclass AND contype = 'f'`)
      ).rows.map((r) => r.conname);
      for (const name of fk) await c.query(`ALTER TABLE telemetry DROP CONSTRAINT ${name}`);
      // Likewise the (server_id, received_at) index: built once after the load (a sort) instead of 10 million random inserts.
      await c.query('DROP INDEX IF EXISTS telemetry_server_time_idx');
      const CHUNK = 1_000_000;
      while (have < total) {
        const n = Math.min(CHUNK, total - have);
        // Row g: server g % servers, time pseudo-random within the 30 days, 1 in 17 failing with a 503.
        await c.query(
          `INSERT INTO telemetry (server_id, received_at, success, latency_ms, tool_name, http_status)
           SELECT $1::int8 + g % $2, $3::timestamptz - make_interval(secs => (g * 104729) % ${SPAN_S}),
                  g % 17 <> 0, 20 + (g * 37) % 400, 'tool-' || g % 5, CASE WHEN g % 17 = 0 THEN 503 ELSE 200 END
             FROM generate_series($4::int8, $5::int8) g`,
          [lo, serverCount, end.toISOString(), have, have + n - 1],
        );
        have += n;
        onProgress?.(have);
      }
      await c.query('CREATE INDEX telemetry_server_time_idx ON telemetry (server_id, received_at)');
      for (const name of fk) await c.query(`ALTER TABLE telemetry ADD CONSTRAINT ${name} FOREIGN KEY (server_id) REFERENCES servers (id)`);
      await c.query('ANALYZE telemetry');
      return (performance.now() - t0) / 1000;
    },

    async rebuildRollups() {
      const t0 = performance.now();
      const source = `'scale:' || (id % ${SCALE_SOURCES})`;
      await c.query('BEGIN');
      await c.query('TRUNCATE server_totals, telemetry_hourly, trust_evidence');
      await c.query(
        `INSERT INTO server_totals (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at)
         SELECT server_id, count(*), count(*) FILTER (WHERE success), sum(latency_ms), count(*) FILTER (WHERE http_status BETWEEN 500 AND 599),
                ${HIST}, min(received_at), max(received_at)
           FROM telemetry GROUP BY server_id`,
      );
      await c.query(
        `INSERT INTO telemetry_hourly (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist)
         SELECT server_id, date_trunc('hour', received_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', ${source}, count(*),
                count(*) FILTER (WHERE success), sum(latency_ms), count(*) FILTER (WHERE http_status BETWEEN 500 AND 599), ${HIST}
           FROM telemetry GROUP BY 1, 2, 3`,
      );
      // Decayed sums as of each (server, source)'s newest report, via a fixed reference time:
      // sum 2^-(mx - t)/h = 2^((ref - mx)/h) * sum 2^-(ref - t)/h.
      await c.query(
        `INSERT INTO trust_evidence (server_id, source, weight, successes, latency_sum, reports, updated_at)
         SELECT server_id, source, w * k, s * k, l * k, n, mx
           FROM (SELECT server_id, ${source} AS source, count(*) AS n, max(received_at) AS mx,
                        sum(d) AS w, coalesce(sum(d) FILTER (WHERE success), 0) AS s, sum(d * latency_ms) AS l
                   FROM (SELECT *, power(2::float8, -extract(epoch from (ref - received_at))::float8 / ${HALF_LIFE_S}) AS d
                           FROM telemetry, (SELECT max(received_at) AS ref FROM telemetry) r) x
                  GROUP BY 1, 2) a,
                LATERAL (SELECT power(2::float8, extract(epoch from ((SELECT max(received_at) FROM telemetry) - a.mx))::float8 / ${HALF_LIFE_S}) AS k) b`,
      );
      await c.query('COMMIT');
      await c.query('ANALYZE server_totals; ANALYZE telemetry_hourly; ANALYZE trust_evidence');
      return (performance.now() - t0) / 1000;
    },

    count,
    close: () => c.end(),
  };
}
