-- muninn-store, PostgreSQL, migration 4: what a segment was started from.
-- A segment keeps the memory layer it was rehydrated with and a digest of its session spec
-- (model, system layers, tools, schema, TTLs), so a restarted host can rebuild the segment's
-- renderer byte for byte and tell whether the provider session it stored a handle for still
-- matches what it would send. Segments stored before this migration have neither and are
-- never resumed (a fresh segment is opened, as before).

ALTER TABLE segments ADD COLUMN memory TEXT;
ALTER TABLE segments ADD COLUMN spec_digest TEXT;
