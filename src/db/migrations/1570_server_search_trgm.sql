-- Server search at catalogue scale (issue 23, docs/performance.md "100,000 servers"): a search
-- (`q`) over the servers without evidence matched name, slug and URL with LIKE '%text%', a scan
-- of the whole servers table per request. A trigram index over the three texts lets a search
-- of 3 characters or more read only the candidate rows (src/store/scores.ts unratedPage adds the
-- indexed expression as an implied condition; the exact per-column test stays). pg_trgm ships
-- with PostgreSQL's contrib and with PGlite; where it is not installed or this role may not
-- create it, the migration succeeds without the index and search scans as before (searches
-- are rate limited per client network either way: RATE_LIMIT_SEARCH_PER_MINUTE).
DO $$
BEGIN
  BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
  EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm is not available (%): server search runs without a trigram index', SQLERRM;
  END;
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
    EXECUTE $i$CREATE INDEX IF NOT EXISTS servers_search_trgm_idx ON servers USING gin ((lower(name) || E'\n' || slug || E'\n' || lower(url)) gin_trgm_ops)$i$;
  END IF;
END
$$;
