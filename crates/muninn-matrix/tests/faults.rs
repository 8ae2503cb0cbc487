//! The connector when something under it fails: a store that refuses a commit, a read or an
//! ack, and a homeserver whose answer is larger than the connector reads. Each failure is
//! retried, loud (health or log, with its cause), bounded, and loses or repeats nothing.
//!
//! One module per job: `commits` (an answer read again after a refused or missing commit),
//! `memberships` (kicks, re-joins, invites back and the forward pages they need), `store` (a
//! store that cannot count or record), `answers` (an answer too large or too slow) and `panics`
//! (an account's task that panics).

mod answers;
mod commits;
mod memberships;
mod panics;
mod store;
