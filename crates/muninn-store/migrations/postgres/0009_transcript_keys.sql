-- muninn-store, PostgreSQL, migration 9: keyed transcript appends.
-- An item appended on its own, outside a turn's keyed commit (the delivery a turn records
-- before it asks the model, a Self brief before its run), carries a key the host chose; the
-- same key again adds nothing and answers the seq it got. So a retry after a commit whose
-- answer was lost (a deadline passed, the connection dropped after COMMIT was sent) cannot
-- record the item twice. The transcript itself is unchanged.

CREATE TABLE transcript_keys (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    append_key TEXT NOT NULL,
    role TEXT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (mind_id, append_key)
);
