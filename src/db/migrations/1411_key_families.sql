-- Source families (docs/integrity.md): every key remembers the keyed hash of the network it was
-- registered from (HMAC of the registration day's source secret over the IPv4 address or IPv6
-- /64; never the address), so the scoring weighs the keys of one network as one source. Keys
-- registered before this migration have none and stay a family of their own.
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS network_family text;
