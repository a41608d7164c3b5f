-- Server identity (docs/scoring.md "Server identity", issue 17 findings 5 and 9).
--
-- 1. A query string is part of a server's identity only when a catalogue lists that exact URL.
--    Servers a report created with a query (no catalogue lists them) become their query-less
--    server: renamed in place when that URL is free, else merged into the server that has it
--    (telemetry, rollups, evidence and baselines move; the merged row is deleted). Afterwards no
--    query string from a report is stored in servers.
-- 2. Names and slugs become unique, and names, slugs and registry names become one namespace of
--    handles (server_handles), each bound to exactly one server. Existing duplicates are
--    resolved deterministically: a registry name's slug form goes to the first catalogue server
--    imported under it (registered_at, id), then every server in (registered_at, id) order keeps
--    its slug and name when free, else takes the smallest k >= 2 with `name (k)` / `slug-k` free.
-- 3. A trigger binds each server's slug as a handle on insert and rebinds it when the slug
--    changes; a slug that is another server's handle is refused by the primary key, whatever
--    writes the row.

-- 1. Query strings from reports.
DO $$
DECLARE
  r record;
  keep bigint;
  ref record;
  half_life double precision := 168 * 3600;
BEGIN
  FOR r IN SELECT id, split_part(url, '?', 1) AS bare FROM servers WHERE catalogued_at IS NULL AND position('?' IN url) > 0 ORDER BY id LOOP
    keep := NULL;
    SELECT id INTO keep FROM servers WHERE url = r.bare;
    IF keep IS NULL THEN
      UPDATE servers SET url = r.bare WHERE id = r.id;
      CONTINUE;
    END IF;
    UPDATE telemetry SET server_id = keep WHERE server_id = r.id;
    INSERT INTO server_totals AS t (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at)
      SELECT keep, n, successes, latency_sum, n_5xx, hist, first_at, last_at FROM server_totals WHERE server_id = r.id
      ON CONFLICT (server_id) DO UPDATE SET
        n = t.n + EXCLUDED.n, successes = t.successes + EXCLUDED.successes, latency_sum = t.latency_sum + EXCLUDED.latency_sum,
        n_5xx = t.n_5xx + EXCLUDED.n_5xx,
        hist = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(t.hist, EXCLUDED.hist) WITH ORDINALITY AS u(a, b, i) ORDER BY i),
        first_at = least(t.first_at, EXCLUDED.first_at), last_at = greatest(t.last_at, EXCLUDED.last_at);
    DELETE FROM server_totals WHERE server_id = r.id;
    INSERT INTO telemetry_hourly AS t (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist)
      SELECT keep, bucket, source, n, successes, latency_sum, n_5xx, hist FROM telemetry_hourly WHERE server_id = r.id
      ON CONFLICT (server_id, bucket, source) DO UPDATE SET
        n = t.n + EXCLUDED.n, successes = t.successes + EXCLUDED.successes, latency_sum = t.latency_sum + EXCLUDED.latency_sum,
        n_5xx = t.n_5xx + EXCLUDED.n_5xx,
        hist = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(t.hist, EXCLUDED.hist) WITH ORDINALITY AS u(a, b, i) ORDER BY i);
    DELETE FROM telemetry_hourly WHERE server_id = r.id;
    -- Decayed evidence: both rows are brought to the later of their times, then added.
    INSERT INTO trust_evidence AS t (server_id, source, weight, successes, latency_sum, reports, updated_at)
      SELECT keep, source, weight, successes, latency_sum, reports, updated_at FROM trust_evidence WHERE server_id = r.id
      ON CONFLICT (server_id, source) DO UPDATE SET
        weight = t.weight * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.weight * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        successes = t.successes * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.successes * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        latency_sum = t.latency_sum * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.latency_sum * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        reports = t.reports + EXCLUDED.reports,
        updated_at = greatest(t.updated_at, EXCLUDED.updated_at);
    DELETE FROM trust_evidence WHERE server_id = r.id;
    -- Cached scores of both are stale; history of the merged identity ends here.
    DELETE FROM server_scores WHERE server_id IN (r.id, keep);
    DELETE FROM score_snapshots WHERE server_id = r.id;
    UPDATE drift_baselines SET server_id = keep WHERE server_id = r.id;
    DELETE FROM observation_schedule WHERE server_id = r.id;
    -- Tables added by later work that also point at servers: their rows follow the merge.
    FOR ref IN
      SELECT cl.relname AS tbl, att.attname AS col
        FROM pg_constraint c
        JOIN pg_class cl ON cl.oid = c.conrelid
        JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = c.conkey[1]
       WHERE c.contype = 'f' AND c.confrelid = 'servers'::regclass AND array_length(c.conkey, 1) = 1
         AND cl.relname NOT IN ('telemetry', 'server_totals', 'telemetry_hourly', 'trust_evidence', 'server_scores', 'score_snapshots', 'drift_baselines', 'observation_schedule')
         AND NOT cl.relispartition
    LOOP
      EXECUTE format('UPDATE %I SET %I = $1 WHERE %I = $2', ref.tbl, ref.col, ref.col) USING keep, r.id;
    END LOOP;
    DELETE FROM servers WHERE id = r.id;
  END LOOP;
END
$$;

-- 2. One namespace of handles.
CREATE TABLE server_handles (
  handle text PRIMARY KEY,
  server_id bigint NOT NULL REFERENCES servers (id),
  -- slug: the server's own slug; registry: the slug form of a registry name it was imported under
  -- (a server no catalogue lists loses a slug handle to a registry binding; nothing else moves).
  kind text NOT NULL CHECK (kind IN ('slug', 'registry'))
);
CREATE INDEX server_handles_server_idx ON server_handles (server_id);

-- Registry names first: the first catalogue server imported under each (registry names are ASCII,
-- so lower() and the regular expression give exactly src/domain/server-identity.ts slugify).
INSERT INTO server_handles (handle, server_id, kind)
  SELECT DISTINCT ON (h) h, id, 'registry'
    FROM (SELECT id, registered_at, trim(both '-' FROM regexp_replace(lower(registry_name), '[^a-z0-9]+', '-', 'g')) AS h
            FROM servers WHERE registry_name IS NOT NULL AND catalogued_at IS NOT NULL) x
   WHERE h <> ''
   ORDER BY h, registered_at, id;

CREATE TABLE identity_migration_names (lname text PRIMARY KEY);

DO $$
DECLARE
  r record;
  k integer;
  cand_slug text;
  cand_name text;
  base text;
BEGIN
  FOR r IN SELECT id, name, slug FROM servers ORDER BY registered_at, id LOOP
    base := CASE WHEN r.slug = '' THEN 'server' ELSE r.slug END;
    k := 1;
    LOOP
      cand_slug := CASE WHEN k = 1 THEN base ELSE base || '-' || k END;
      cand_name := CASE WHEN k = 1 THEN r.name ELSE r.name || ' (' || k || ')' END;
      EXIT WHEN NOT EXISTS (SELECT 1 FROM server_handles WHERE handle = cand_slug AND server_id <> r.id)
            AND NOT EXISTS (SELECT 1 FROM identity_migration_names WHERE lname = lower(cand_name));
      k := k + 1;
    END LOOP;
    INSERT INTO server_handles (handle, server_id, kind) VALUES (cand_slug, r.id, 'slug') ON CONFLICT (handle) DO NOTHING;
    INSERT INTO identity_migration_names (lname) VALUES (lower(cand_name));
    IF cand_slug <> r.slug OR cand_name <> r.name THEN
      UPDATE servers SET name = cand_name, slug = cand_slug WHERE id = r.id;
    END IF;
  END LOOP;
END
$$;

DROP TABLE identity_migration_names;

DROP INDEX IF EXISTS servers_slug_idx;
DROP INDEX IF EXISTS servers_name_idx;
CREATE UNIQUE INDEX servers_slug_key ON servers (slug);
CREATE UNIQUE INDEX servers_name_key ON servers (lower(name));

-- 3. Every server's slug is a handle of that server, whatever inserts or renames it.
CREATE FUNCTION servers_bind_slug() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NEW.slug IS NOT DISTINCT FROM OLD.slug THEN
      RETURN NEW;
    END IF;
    DELETE FROM server_handles WHERE handle = OLD.slug AND server_id = OLD.id AND kind = 'slug';
  END IF;
  -- Already this server's (its own registry name): nothing to add. Another server's: the primary
  -- key refuses the row with a unique violation.
  IF NOT EXISTS (SELECT 1 FROM server_handles WHERE handle = NEW.slug AND server_id = NEW.id) THEN
    INSERT INTO server_handles (handle, server_id, kind) VALUES (NEW.slug, NEW.id, 'slug');
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER servers_bind_slug AFTER INSERT OR UPDATE OF slug ON servers FOR EACH ROW EXECUTE FUNCTION servers_bind_slug();
