-- muninn-store, SQLite, migration 10: transcript keys are per role.
-- Migration 9 keyed an item by (Mind, key), so the same key used by the Persona and by the
-- Self answered the first role's seq to the second: a retry of the second role's append then
-- believed its item recorded when it never was. A key now names an item of one role. SQLite
-- cannot change a primary key in place: the table is copied into its new shape (every row
-- migration 9 kept stays, each under the role it was recorded for).

CREATE TABLE transcript_keys_per_role (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL,
    append_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (mind_id, role, append_key)
);
INSERT INTO transcript_keys_per_role (mind_id, role, append_key, seq)
    SELECT mind_id, role, append_key, seq FROM transcript_keys;
DROP TABLE transcript_keys;
ALTER TABLE transcript_keys_per_role RENAME TO transcript_keys;
