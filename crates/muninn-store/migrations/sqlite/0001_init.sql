-- muninn-store, SQLite, migration 1: the initial schema.
-- Integers are SQLite INTEGER (i64); times are Unix ms; money is micro-dollars.
-- JSON is TEXT, kept exactly as written.

CREATE TABLE minds (
    id TEXT PRIMARY KEY NOT NULL CHECK (id <> ''),
    display_name TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);

-- Per-Mind sequence counters (transcript:<role>, delivery, outbox, brief). Bumping a counter
-- and inserting the row it numbers happen in one transaction, so seqs are gap-free.
CREATE TABLE counters (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (mind_id, name)
);

-- One row per Mind once a lease was ever taken; never deleted, so the token only grows.
-- holder IS NULL means released.
CREATE TABLE leases (
    mind_id TEXT PRIMARY KEY NOT NULL REFERENCES minds(id),
    holder TEXT,
    token INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);

CREATE TABLE settings (
    mind_id TEXT PRIMARY KEY NOT NULL REFERENCES minds(id),
    spend_cap_micro_usd INTEGER,
    spend_window_ms INTEGER,
    brake INTEGER NOT NULL,
    turn_limit INTEGER,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE segments (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL CHECK (role IN ('persona', 'self')),
    number INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL,
    rehydration_tokens INTEGER NOT NULL,
    reason TEXT NOT NULL,
    session_id TEXT,
    ended_at_ms INTEGER,
    PRIMARY KEY (mind_id, role, number)
);

CREATE TABLE transcript (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL CHECK (role IN ('persona', 'self')),
    seq INTEGER NOT NULL,
    segment INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (mind_id, role, seq)
);

-- The transcript is the truth (design §3.1): the database itself refuses to rewrite it.
CREATE TRIGGER transcript_no_update BEFORE UPDATE ON transcript
BEGIN SELECT RAISE(ABORT, 'transcript is append-only'); END;
CREATE TRIGGER transcript_no_delete BEFORE DELETE ON transcript
BEGIN SELECT RAISE(ABORT, 'transcript is append-only'); END;

CREATE TABLE deliveries (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    seq INTEGER NOT NULL,
    room TEXT NOT NULL,
    sender TEXT NOT NULL,
    is_direct INTEGER NOT NULL,
    text TEXT NOT NULL,
    source_id TEXT NOT NULL,
    received_at_ms INTEGER NOT NULL,
    PRIMARY KEY (mind_id, seq),
    UNIQUE (mind_id, source_id)
);

CREATE TABLE mailbox_acks (
    mind_id TEXT PRIMARY KEY NOT NULL REFERENCES minds(id),
    acked_seq INTEGER NOT NULL
);

CREATE TABLE outbox (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    request_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    room TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    sent_at_ms INTEGER,
    remote_id TEXT,
    acked_at_ms INTEGER,
    PRIMARY KEY (mind_id, request_id),
    UNIQUE (mind_id, seq)
);

CREATE TABLE ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    mind_id TEXT NOT NULL REFERENCES minds(id),
    role TEXT NOT NULL,
    segment INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    idle_gap_ms INTEGER NOT NULL,
    model TEXT NOT NULL,
    prefix_tokens INTEGER NOT NULL,
    rehydration_tokens INTEGER NOT NULL,
    usage_input INTEGER NOT NULL,
    usage_cache_write_5m INTEGER NOT NULL,
    usage_cache_write_1h INTEGER NOT NULL,
    usage_cache_read INTEGER NOT NULL,
    usage_output INTEGER NOT NULL,
    raw_usage TEXT,
    cost_micro_usd INTEGER NOT NULL,
    predicted_read INTEGER NOT NULL,
    predicted_write INTEGER NOT NULL,
    cache_state TEXT NOT NULL,
    miss_cause TEXT,
    decision TEXT NOT NULL,
    boundary INTEGER NOT NULL
);
CREATE INDEX ledger_mind_at ON ledger (mind_id, at_ms);

CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;

CREATE TABLE memory_notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    mind_id TEXT NOT NULL REFERENCES minds(id),
    salience INTEGER NOT NULL,
    text TEXT NOT NULL CHECK (length(CAST(text AS BLOB)) <= 1000),
    created_at_ms INTEGER NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX memory_notes_mind ON memory_notes (mind_id, id);

CREATE TABLE memory_about (
    note_id INTEGER NOT NULL REFERENCES memory_notes(id),
    position INTEGER NOT NULL,
    sender TEXT NOT NULL,
    PRIMARY KEY (note_id, position)
);
CREATE INDEX memory_about_sender ON memory_about (sender, note_id);

CREATE TABLE briefs (
    mind_id TEXT NOT NULL REFERENCES minds(id),
    seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('persona', 'operator')),
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    result TEXT,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    finished_at_ms INTEGER,
    PRIMARY KEY (mind_id, seq)
);
CREATE INDEX briefs_status ON briefs (mind_id, status, seq);
