-- muninn-store, PostgreSQL, migration 1: the initial schema.
-- Integers are BIGINT (i64); booleans BOOLEAN; times are Unix ms; money is micro-dollars.
-- JSON is TEXT, kept exactly as written.

CREATE TABLE minds (
    id TEXT PRIMARY KEY NOT NULL CHECK (id <> ''),
    display_name TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

-- Per-Mind sequence counters (transcript:<role>, delivery, outbox, brief). Bumping a counter
-- and inserting the row it numbers happen in one transaction, so seqs are gap-free.
CREATE TABLE counters (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    name TEXT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (mind_id, name)
);

-- One row per Mind once a lease was ever taken; never deleted, so the token only grows.
-- holder IS NULL means released.
CREATE TABLE leases (
    mind_id TEXT PRIMARY KEY NOT NULL REFERENCES minds(id),
    holder TEXT,
    token BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

CREATE TABLE settings (
    mind_id TEXT PRIMARY KEY NOT NULL REFERENCES minds(id),
    spend_cap_micro_usd BIGINT,
    spend_window_ms BIGINT,
    brake BOOLEAN NOT NULL,
    turn_limit BIGINT,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE segments (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL CHECK (role IN ('persona', 'self')),
    number BIGINT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    rehydration_tokens BIGINT NOT NULL,
    reason TEXT NOT NULL,
    session_id TEXT,
    ended_at_ms BIGINT,
    PRIMARY KEY (mind_id, role, number)
);

CREATE TABLE transcript (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL CHECK (role IN ('persona', 'self')),
    seq BIGINT NOT NULL,
    segment BIGINT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (mind_id, role, seq)
);

-- The transcript is the truth (design §3.1): the database itself refuses to rewrite it.
CREATE FUNCTION muninn_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER transcript_append_only BEFORE UPDATE OR DELETE ON transcript
FOR EACH ROW EXECUTE FUNCTION muninn_append_only();

CREATE TABLE deliveries (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    seq BIGINT NOT NULL,
    room TEXT NOT NULL,
    sender TEXT NOT NULL,
    is_direct BOOLEAN NOT NULL,
    text TEXT NOT NULL,
    source_id TEXT NOT NULL,
    received_at_ms BIGINT NOT NULL,
    PRIMARY KEY (mind_id, seq),
    UNIQUE (mind_id, source_id)
);

CREATE TABLE mailbox_acks (
    mind_id TEXT PRIMARY KEY NOT NULL REFERENCES minds(id),
    acked_seq BIGINT NOT NULL
);

CREATE TABLE outbox (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    request_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    room TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    sent_at_ms BIGINT,
    remote_id TEXT,
    acked_at_ms BIGINT,
    PRIMARY KEY (mind_id, request_id),
    UNIQUE (mind_id, seq)
);

CREATE TABLE ledger (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL,
    segment BIGINT NOT NULL,
    turn BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    idle_gap_ms BIGINT NOT NULL,
    model TEXT NOT NULL,
    prefix_tokens BIGINT NOT NULL,
    rehydration_tokens BIGINT NOT NULL,
    usage_input BIGINT NOT NULL,
    usage_cache_write_5m BIGINT NOT NULL,
    usage_cache_write_1h BIGINT NOT NULL,
    usage_cache_read BIGINT NOT NULL,
    usage_output BIGINT NOT NULL,
    raw_usage TEXT,
    cost_micro_usd BIGINT NOT NULL,
    predicted_read BIGINT NOT NULL,
    predicted_write BIGINT NOT NULL,
    cache_state TEXT NOT NULL,
    miss_cause TEXT,
    decision TEXT NOT NULL,
    boundary BOOLEAN NOT NULL
);
CREATE INDEX ledger_mind_at ON ledger (mind_id, at_ms);

CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ledger
FOR EACH ROW EXECUTE FUNCTION muninn_append_only();

CREATE TABLE memory_notes (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mind_id TEXT NOT NULL REFERENCES minds(id),
    salience BIGINT NOT NULL,
    text TEXT NOT NULL CHECK (octet_length(text) <= 1000),
    created_at_ms BIGINT NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX memory_notes_mind ON memory_notes (mind_id, id);

CREATE TABLE memory_about (
    note_id BIGINT NOT NULL REFERENCES memory_notes(id),
    position BIGINT NOT NULL,
    sender TEXT NOT NULL,
    PRIMARY KEY (note_id, position)
);
CREATE INDEX memory_about_sender ON memory_about (sender, note_id);

CREATE TABLE briefs (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    seq BIGINT NOT NULL,
    text TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('persona', 'operator')),
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    result TEXT,
    created_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT,
    finished_at_ms BIGINT,
    PRIMARY KEY (mind_id, seq)
);
CREATE INDEX briefs_status ON briefs (mind_id, status, seq);
