-- muninn-store, PostgreSQL, migration 7: transport cursors and failed sends.
-- A transport (the Matrix connector) keeps its position (a /sync token) per Mind and name, and
-- writes it in the same transaction as the deliveries it read up to there (Store::post_batch),
-- so the position never runs ahead of the mail. An outbox message the transport gave up on for
-- good keeps when and why; it is offered to no transport again. Rows stored before this
-- migration have no failure.

CREATE TABLE cursors (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    name TEXT NOT NULL CHECK (name <> ''),
    value TEXT NOT NULL CHECK (octet_length(value) <= 4096),
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (mind_id, name)
);

ALTER TABLE outbox ADD COLUMN failed_at_ms BIGINT;
ALTER TABLE outbox ADD COLUMN failure TEXT;
