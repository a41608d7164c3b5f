-- The canonical text (RFC 8785 JSON) of each tool part a drift baseline hashed, stored once per
-- distinct text under its SHA-256 (content-addressed: re-baselining an unchanged manifest adds no
-- rows). Lets /drift show what a changed description or schema said before and after. Baselines
-- recorded before this table existed keep only their hashes.
CREATE TABLE drift_part_texts (
  hash text PRIMARY KEY,
  canonical text NOT NULL,
  first_seen_at timestamptz NOT NULL
);

-- Insertion order of baselines: ties on recorded_at (two checks within a millisecond, or a fixed
-- test clock) are broken by which baseline was recorded last, not by the random baseline id.
ALTER TABLE drift_baselines ADD COLUMN seq bigserial;
