-- muninn-store, PostgreSQL, migration 6: the provider's own diagnosis of each request's cache use.
-- Beside muninn's predicted miss cause (`miss_cause`), a ledger row keeps the reason the
-- provider gave (`diagnostics.cache_miss_reason.type` of the Messages API, or `no_divergence`,
-- `pending`), and its `cache_missed_input_tokens` where it gave one, so that the predicted
-- causes can be checked against the provider's labels. Rows stored before this migration, and
-- rows of backends that do not ask, have neither.

ALTER TABLE ledger ADD COLUMN provider_miss_reason TEXT;
ALTER TABLE ledger ADD COLUMN provider_missed_tokens BIGINT;
