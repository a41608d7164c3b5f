-- Catalogue scale (issue 23, docs/performance.md "100,000 servers"): the servers without evidence
-- are paged in URL order (code units, the "C" collation the ranked lists and their cursors use),
-- optionally within one category, and the trust delta reads the newest registrations. With these
-- indexes a page walks the index and stops after its rows instead of sorting 100,000.
CREATE INDEX IF NOT EXISTS servers_url_c_idx ON servers (url COLLATE "C");
CREATE INDEX IF NOT EXISTS servers_category_url_c_idx ON servers (category, url COLLATE "C");
CREATE INDEX IF NOT EXISTS servers_registered_at_idx ON servers (registered_at);
