-- muninn-store, PostgreSQL, migration 3: what a delivery carries, and what a request flagged.
-- Deliveries keep whether they mention the Mind and the room history that came with them
-- (JSON text: a list of {id, sender, text}); ledger rows keep their flagged events (JSON text:
-- a list of objects). Rows stored before this migration read back as not mentioning the Mind,
-- with no history and no events. A constant default is stored in the catalogue, not written
-- into each row, so the ledger's append-only trigger is not involved.

ALTER TABLE deliveries ADD COLUMN to_you BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE deliveries ADD COLUMN context TEXT NOT NULL DEFAULT '[]';
ALTER TABLE ledger ADD COLUMN events TEXT NOT NULL DEFAULT '[]';
