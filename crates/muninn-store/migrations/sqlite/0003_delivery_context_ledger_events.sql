-- muninn-store, SQLite, migration 3: what a delivery carries, and what a request flagged.
-- Deliveries keep whether they mention the Mind and the room history that came with them
-- (JSON text: a list of {id, sender, text}); ledger rows keep their flagged events (JSON text:
-- a list of objects). Rows stored before this migration read back as not mentioning the Mind,
-- with no history and no events. Adding a column with a default rewrites no row, so the
-- ledger's append-only triggers are not involved.

ALTER TABLE deliveries ADD COLUMN to_you INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN context TEXT NOT NULL DEFAULT '[]';
ALTER TABLE ledger ADD COLUMN events TEXT NOT NULL DEFAULT '[]';
