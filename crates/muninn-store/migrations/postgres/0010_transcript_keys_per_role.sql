-- muninn-store, PostgreSQL, migration 10: transcript keys are per role.
-- Migration 9 keyed an item by (Mind, key), so the same key used by the Persona and by the
-- Self answered the first role's seq to the second: a retry of the second role's append then
-- believed its item recorded when it never was. A key now names an item of one role (every
-- row migration 9 kept stays, under the role it was recorded for).

ALTER TABLE transcript_keys DROP CONSTRAINT transcript_keys_pkey;
ALTER TABLE transcript_keys ADD PRIMARY KEY (mind_id, role, append_key);
