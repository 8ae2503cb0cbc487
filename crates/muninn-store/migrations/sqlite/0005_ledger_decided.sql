-- muninn-store, SQLite, migration 5: what the session accounting made of each request.
-- A ledger row keeps, as JSON, the kind of request (turn, ping, head ping, flush), the
-- decider's question and answer, the segment it began (head and rehydration) and the policy
-- and parameters in force, so that replaying the ledger (`muninn replay --closed-loop`) can
-- re-derive every decision the host took. Rows stored before this migration have none.

ALTER TABLE ledger ADD COLUMN decided TEXT;
