-- muninn-store, SQLite, migration 2: idempotent turns.
-- A turn recorded under a key (the batch label) cannot be recorded twice, so a retry after a
-- commit whose acknowledgment was lost cannot duplicate the turn's transcript or ledger rows.

CREATE TABLE turns (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    turn_key TEXT NOT NULL,
    PRIMARY KEY (mind_id, turn_key)
);
