-- Bytes of part texts each baseline newly stored (drift_part_texts): the per-server daily
-- allowance of stored texts (DRIFT_TEXT_BYTES_PER_SERVER_PER_DAY) sums them over the last day.
-- Baselines recorded before count 0.
ALTER TABLE drift_baselines ADD COLUMN IF NOT EXISTS text_bytes bigint NOT NULL DEFAULT 0;
