-- Server identity, look-alike URLs (docs/scoring.md "Server identity").
--
-- 1. server_url_slug(url): the slug of a canonical URL's own name (host and path), exactly
--    src/domain/server-identity.ts urlSlug for the ASCII canonical URLs stored here, with an
--    expression index: a handle that is the slug of several tracked URLs is ambiguous, and the
--    resolver (src/store/servers.ts) reads every server whose URL has that slug.
-- 2. The canonical form now also drops a host's trailing dots and normalises percent-encoding
--    (RFC 3986 section 6.2.2): `https://alpha.example./mcp` and `https://alpha.example/%6Dcp` are
--    `https://alpha.example/mcp`. Stored URLs are brought to that form: renamed in place when the
--    new URL is free, else merged into the server that has it (telemetry, rollups, decayed
--    evidence per source and the rows of every table pointing at servers move; cached scores
--    are recomputed), as migration 1410 merged query strings. The server kept is the one at the
--    canonical URL, unless only the other is a catalogue server. Names and slugs do not move; the
--    merged server's slug handle is released, a registry name's binding moves with it. A URL
--    whose host has an empty label (`a..example`, now refused) is left as it is.

-- 1. The slug of a URL's own name.
CREATE FUNCTION server_url_slug(url text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT btrim(regexp_replace(lower(split_part(regexp_replace(url, '^[a-z]+://', ''), '?', 1)), '[^a-z0-9]+', '-', 'g'), '-')
$$;

CREATE INDEX servers_url_slug_idx ON servers (server_url_slug(url));

-- 2. Stored URLs in the new canonical form. The two functions are this migration's only (dropped below).
CREATE FUNCTION identity_1650_escapes(s text, raw text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  acc text := '';
  i integer := 1;
  n integer := length(s);
  c text;
  hex text;
  code integer;
BEGIN
  WHILE i <= n LOOP
    c := substr(s, i, 1);
    IF c = '%' THEN
      hex := substr(s, i + 1, 2);
      IF hex ~ '^[0-9A-Fa-f]{2}$' THEN
        code := ('x' || hex)::bit(8)::integer;
        IF code IN (45, 46, 95, 126) OR code BETWEEN 48 AND 57 OR code BETWEEN 65 AND 90 OR code BETWEEN 97 AND 122 THEN
          acc := acc || chr(code);
        ELSE
          acc := acc || '%' || upper(hex);
        END IF;
        i := i + 3;
        CONTINUE;
      END IF;
      acc := acc || '%25';
    ELSIF c ~ raw THEN
      acc := acc || c;
    ELSE
      acc := acc || regexp_replace(upper(encode(convert_to(c, 'UTF8'), 'hex')), '(..)', '%\1', 'g');
    END IF;
    i := i + 1;
  END LOOP;
  RETURN acc;
END
$$;

CREATE FUNCTION identity_1650_canonical(url text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  m text[];
  host text;
  port text := '';
  rest text;
  path text;
  query text := NULL;
  q integer;
BEGIN
  m := regexp_match(url, '^(https?://)([^/?]*)(.*)$');
  IF m IS NULL THEN
    RETURN NULL;
  END IF;
  host := m[2];
  IF left(host, 1) <> '[' THEN
    IF position(':' IN host) > 0 THEN
      port := ':' || split_part(host, ':', 2);
      host := split_part(host, ':', 1);
    END IF;
    host := regexp_replace(host, '\.+$', '');
    IF host = '' OR position('..' IN host) > 0 OR left(host, 1) = '.' THEN
      RETURN NULL;
    END IF;
  END IF;
  rest := m[3];
  q := position('?' IN rest);
  IF q = 0 THEN
    path := rest;
  ELSE
    path := substr(rest, 1, q - 1);
    query := substr(rest, q + 1);
  END IF;
  path := regexp_replace(identity_1650_escapes(path, '^[A-Za-z0-9._~!$&''()*+,;=:@/-]$'), '/+$', '');
  RETURN m[1] || host || port || path || CASE WHEN query IS NULL THEN '' ELSE '?' || identity_1650_escapes(query, '^[A-Za-z0-9._~!$&''()*+,;=:@/?-]$') END;
END
$$;

DO $$
DECLARE
  r record;
  other_id bigint;
  other_cat boolean;
  keep bigint;
  gone bigint;
  ref record;
  half_life double precision := 168 * 3600;
BEGIN
  FOR r IN
    SELECT id, canon, catalogued_at IS NOT NULL AS cat
      FROM (SELECT id, registered_at, catalogued_at, url, identity_1650_canonical(url) AS canon FROM servers) x
     WHERE canon IS NOT NULL AND canon <> url
     ORDER BY registered_at, id
  LOOP
    other_id := NULL;
    SELECT id, catalogued_at IS NOT NULL INTO other_id, other_cat FROM servers WHERE url = r.canon;
    IF other_id IS NULL THEN
      UPDATE servers SET url = r.canon WHERE id = r.id;
      CONTINUE;
    END IF;
    IF r.cat AND NOT other_cat THEN
      keep := r.id;
      gone := other_id;
    ELSE
      keep := other_id;
      gone := r.id;
    END IF;
    UPDATE telemetry SET server_id = keep WHERE server_id = gone;
    INSERT INTO server_totals AS t (server_id, n, successes, latency_sum, n_5xx, hist, first_at, last_at)
      SELECT keep, n, successes, latency_sum, n_5xx, hist, first_at, last_at FROM server_totals WHERE server_id = gone
      ON CONFLICT (server_id) DO UPDATE SET
        n = t.n + EXCLUDED.n, successes = t.successes + EXCLUDED.successes, latency_sum = t.latency_sum + EXCLUDED.latency_sum,
        n_5xx = t.n_5xx + EXCLUDED.n_5xx,
        hist = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(t.hist, EXCLUDED.hist) WITH ORDINALITY AS u(a, b, i) ORDER BY i),
        first_at = least(t.first_at, EXCLUDED.first_at), last_at = greatest(t.last_at, EXCLUDED.last_at);
    DELETE FROM server_totals WHERE server_id = gone;
    INSERT INTO telemetry_hourly AS t (server_id, bucket, source, n, successes, latency_sum, n_5xx, hist)
      SELECT keep, bucket, source, n, successes, latency_sum, n_5xx, hist FROM telemetry_hourly WHERE server_id = gone
      ON CONFLICT (server_id, bucket, source) DO UPDATE SET
        n = t.n + EXCLUDED.n, successes = t.successes + EXCLUDED.successes, latency_sum = t.latency_sum + EXCLUDED.latency_sum,
        n_5xx = t.n_5xx + EXCLUDED.n_5xx,
        hist = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(t.hist, EXCLUDED.hist) WITH ORDINALITY AS u(a, b, i) ORDER BY i);
    DELETE FROM telemetry_hourly WHERE server_id = gone;
    -- Decayed evidence (per source, and per tool and source): both rows brought to the later of their times, then added.
    INSERT INTO trust_evidence AS t (server_id, source, weight, successes, latency_sum, reports, updated_at)
      SELECT keep, source, weight, successes, latency_sum, reports, updated_at FROM trust_evidence WHERE server_id = gone
      ON CONFLICT (server_id, source) DO UPDATE SET
        weight = t.weight * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.weight * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        successes = t.successes * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.successes * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        latency_sum = t.latency_sum * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.latency_sum * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        reports = t.reports + EXCLUDED.reports,
        updated_at = greatest(t.updated_at, EXCLUDED.updated_at);
    DELETE FROM trust_evidence WHERE server_id = gone;
    INSERT INTO tool_evidence AS t (server_id, tool_name, source, weight, successes, latency_sum, reports, updated_at)
      SELECT keep, tool_name, source, weight, successes, latency_sum, reports, updated_at FROM tool_evidence WHERE server_id = gone
      ON CONFLICT (server_id, tool_name, source) DO UPDATE SET
        weight = t.weight * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.weight * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        successes = t.successes * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.successes * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        latency_sum = t.latency_sum * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - t.updated_at) / half_life)
               + EXCLUDED.latency_sum * power(2, -extract(epoch FROM greatest(t.updated_at, EXCLUDED.updated_at) - EXCLUDED.updated_at) / half_life),
        reports = t.reports + EXCLUDED.reports,
        updated_at = greatest(t.updated_at, EXCLUDED.updated_at);
    DELETE FROM tool_evidence WHERE server_id = gone;
    -- Cached scores of both are stale; history of the merged identity ends here.
    DELETE FROM server_scores WHERE server_id IN (gone, keep);
    DELETE FROM score_snapshots WHERE server_id = gone;
    UPDATE drift_baselines SET server_id = keep WHERE server_id = gone;
    DELETE FROM drift_tool_changes g WHERE g.server_id = gone AND EXISTS (SELECT 1 FROM drift_tool_changes k WHERE k.server_id = keep AND k.tool_name = g.tool_name);
    UPDATE drift_tool_changes SET server_id = keep WHERE server_id = gone;
    DELETE FROM mcp_server_facts WHERE server_id = gone AND EXISTS (SELECT 1 FROM mcp_server_facts WHERE server_id = keep);
    UPDATE mcp_server_facts SET server_id = keep WHERE server_id = gone;
    DELETE FROM observation_schedule WHERE server_id = gone;
    UPDATE server_handles SET server_id = keep WHERE server_id = gone AND kind = 'registry';
    DELETE FROM server_handles WHERE server_id = gone;
    -- Tables added by later work that also point at servers: their rows follow the merge (a row
    -- the kept server already has the same of is dropped).
    FOR ref IN
      SELECT cl.relname AS tbl, att.attname AS col
        FROM pg_constraint c
        JOIN pg_class cl ON cl.oid = c.conrelid
        JOIN pg_attribute att ON att.attrelid = c.conrelid AND att.attnum = c.conkey[1]
       WHERE c.contype = 'f' AND c.confrelid = 'servers'::regclass AND array_length(c.conkey, 1) = 1
         AND cl.relname NOT IN ('telemetry', 'server_totals', 'telemetry_hourly', 'trust_evidence', 'tool_evidence', 'server_scores', 'score_snapshots',
                                'drift_baselines', 'drift_tool_changes', 'mcp_server_facts', 'observation_schedule', 'server_handles')
         AND NOT cl.relispartition
    LOOP
      BEGIN
        EXECUTE format('UPDATE %I SET %I = $1 WHERE %I = $2', ref.tbl, ref.col, ref.col) USING keep, gone;
      EXCEPTION WHEN unique_violation THEN
        EXECUTE format('DELETE FROM %I WHERE %I = $1', ref.tbl, ref.col) USING gone;
      END;
    END LOOP;
    DELETE FROM servers WHERE id = gone;
    UPDATE servers SET url = r.canon WHERE id = keep;
  END LOOP;
END
$$;

DROP FUNCTION identity_1650_canonical(text);
DROP FUNCTION identity_1650_escapes(text, text);
