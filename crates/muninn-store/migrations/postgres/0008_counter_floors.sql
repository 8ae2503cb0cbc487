-- muninn-store, PostgreSQL, migration 8: counter floors.
-- Ids are never issued twice (design §3.10). When a store is started fresh in a data directory
-- that held one, or continues after lost commits, the ids the old store issued are kept here
-- per Mind and counter; a counter created later starts above its floor. No foreign key: the
-- Mind may not exist (yet) in this store.

CREATE TABLE counter_floors (
    mind_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (mind_id, name)
);
