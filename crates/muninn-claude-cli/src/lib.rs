//! # muninn-claude-cli
//!
//! The Claude Code CLI backend: one long-lived
//! `claude -p --input-format stream-json --output-format stream-json --verbose` process per
//! session, driven over its stdin/stdout protocol (observed in
//! `reference/claude-cli-2.1.332.md`). A long-lived process answers a later turn in about 60 ms
//! where spawning `claude -p --resume` per turn costs about 0.7 s of start-up
//! (`reference/claude-cli-2.1.332-performance.md`).
//!
//! ## Layout
//!
//! - this module — the crate's map and re-exports, [`PINNED_VERSION`], [`vm_rss_kb`].
//! - `config` — [`CliConfig`], [`Secret`], [`transcript_path`], [`derive_session_id`].
//! - `backend` — [`ClaudeCliBackend`], the [`Backend`] handle.
//! - `messages` — what the handle and the driver send each other: [`InterruptHandle`],
//!   [`TurnReport`], [`ParkReport`].
//! - `usage` — [`parse_usage`], [`parse_model_usage`].
//! - [`binding`] — [`SessionBinding`]: the HMAC [`Handle`] that lets a session be resumed only
//!   while the CLI's copy of the conversation still matches the caller's transcript.
//! - [`event`] — the stdout stream-json events, decoded.
//! - [`flush`] — the flush protocol of a long run as one pure decision ([`flush::decide`]).
//! - [`pool`] — [`pool::SharedPool`]: a coordinator that backends owned elsewhere join
//!   ([`ClaudeCliBackend::join_pool`]) to share a process and memory budget; it parks idle
//!   sessions when holding their memory costs more than resuming them.
//! - `driver` — the one task that owns the child process; [`Sweeps`], the sweeps of what its
//!   children left behind, which a host waits for before it exits.
//!
//! ## Invariants
//!
//! - **One task owns the child.** [`ClaudeCliBackend`] holds only channel ends: turns and
//!   shutdown go over a bounded `mpsc` with a `oneshot` for the answer, interrupts over a second
//!   bounded `mpsc` the driver also listens to while a turn runs. stderr is drained by its own
//!   task into a bounded ring, so a chatty child never stalls and its last lines explain a crash.
//! - **Exactly one turn in flight.** `turn` takes `&mut self`; the driver reads to the turn's
//!   `result` before it takes the next command, so queued lines are never merged by the CLI.
//! - **stdin lines are validated before they are written:** one malformed line kills the CLI.
//! - **Only an explicit environment reaches the child** (`env_clear` + an allowlist, see
//!   [`CliConfig`]). **The credential goes through a pipe** by default
//!   ([`CredentialPassing::FileDescriptor`]): muninn writes it into a fresh pipe and closes the
//!   write end; the child inherits only the read end (FD_CLOEXEC cleared on that one fd in the
//!   child) and its number in `CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR` (or
//!   `CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR`), reads it to the end and keeps it in memory. So
//!   the credential is in no argv, no environment (`/proc/<pid>/environ` holds a number) and no
//!   file. [`CredentialPassing::Environment`] is the fallback for CLIs without the descriptor
//!   variables.
//! - **Lifecycle.** A child that died is relaunched with `--resume <id>` on the next turn. A
//!   turn with nothing answered — the API refused it, it timed out, its child died — is taken
//!   back out of the session (the child stopped, the session file cut back to its length before
//!   the turn's line, the next turn resumed), so the same input can be sent again and the model
//!   sees it once ([`TurnReport::rewound`], set too for a turn that never reached the
//!   session: a relaunch that failed); a turn whose model acted stays ([`TurnReport::held`]).
//!   A lost
//!   session (transcript missing, corrupt — the CLI then says `No conversation found` — or
//!   `already in use`) is replaced by a fresh session with a new id, reported as
//!   [`SessionEvent::Reseeded`]. With a [`CliConfig::binding_key`], a session left by an earlier
//!   start is resumed only through a [`Handle`] that verifies over the caller's transcript
//!   ([`ClaudeCliBackend::resume_with`]); a handle that does not verify is reseeded the same
//!   way, because the CLI's copy may have diverged from the truth, and a start with no handle
//!   claimed is a fresh session under the next unused derived id (a new segment: nothing lost,
//!   no event). A handle claimed with `fork` (another writer
//!   may still hold the session) continues a copy: `--resume <id> --fork-session`, a new id the
//!   CLI picks, reported as [`SessionEvent::Forked`]; the original file is never written again.
//! - **Budgets per run.** The CLI counts `--max-budget-usd` from its process's start (the
//!   session's `total_cost_usd` survives `--resume`, the budget's count does not), so a
//!   long-lived child would share one budget over all its runs. With
//!   [`CliConfig::run_budget_micro_usd`] a run whose child already served one first relaunches
//!   it with `--resume` (about 0.7 s), so each run gets the whole budget.
//! - **Seeds.** A reseeded session starts from muninn's transcript, not from nothing: the seed
//!   is the host's rendering ([`Backend::set_seed`], for what preceded this start) followed by
//!   the backend's own log of this start's turns (each turn's input and reply text), so a session
//!   lost mid-segment is rebuilt without the host pushing its transcript every turn. The seed
//!   goes as a separate text block ahead of the first turn's input in the new session, and its
//!   size (`seed_tokens`) is reported so the rehydration cost can be recorded. Interrupts use the
//!   stream-json `control_request` `interrupt`, never SIGINT (which exits the CLI). Shutdown
//!   closes stdin and waits, then SIGTERM after a timeout; dropping the handle kills the child.
//! - **Usage** is the `result` line's per-turn `usage`, parsed into [`Usage`] and kept verbatim in
//!   [`TurnOutcome::raw_usage`]. That `usage` leaves compaction requests out; a compaction's own
//!   usage is the difference to `model_usage_since_last_result` ([`parse_model_usage`]). So is
//!   a subagent's requests' usage, reported apart ([`Backend::take_failed_attempts`]), as is a
//!   turn the CLI started by itself.
//! - **No turn of the CLI's own is an answer.** Background tasks are off
//!   (`CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1`): a background subagent's end made the CLI start
//!   a turn by itself after the turn's `result`. Should one come anyway, the driver drains the
//!   child's idle output before each line and reads past a `result` that follows a
//!   `system/init` with no echo of the line, once a main-thread task has notified; its usage is
//!   reported and it is logged at warn with its cost (`driver/beside.rs`). Stopping a child
//!   (park, shutdown) reads its stdout to the end, so such a turn still running then is
//!   reported too, by its `result` or, cut short, by its messages' usage as they began.
//! - **The CLI never compacts by itself.** muninn decides when a conversation is summarised, and
//!   a compaction the CLI starts on its own would rewrite the cached prefix behind muninn's back.
//!   Two switches, each enough alone, both set: `DISABLE_AUTO_COMPACT=1` in the environment, and
//!   a `settings.json` in the child's `CLAUDE_CONFIG_DIR` with `"autoCompactEnabled": false`
//!   (the CLI's gate for usage-triggered auto-compaction, which it reads together with that
//!   variable) and `"idleCompaction": false` (compaction while idle before a 1h cache expires,
//!   gated by the same switch and by this one). `DISABLE_COMPACT` is *not* set: it would also
//!   disable `/compact`, which [`Backend::compact`] uses. Should a compaction happen anyway
//!   (a reactive one after a "prompt is too long" 400), its `system/compact_boundary` is
//!   reported as [`SessionEvent::Compacted`] with `outside: true`.
//! - **Compaction on request.** [`Backend::compact`] writes `/compact <instructions>` as a user
//!   line and reads `system/status compacting` → `system/compact_boundary` → the summary `user`
//!   event → `result` (`num_turns: 0`). Its outcome's usage is the compaction request's own
//!   (from `model_usage_since_last_result`, since the `result`'s `usage` is all zeros), its text
//!   the summary message the session continues from. A `/compact` that did not compact fails
//!   ([`BackendError::CompactionFailed`], with the CLI's own reason), and what it billed is
//!   reported beside it as the failed compaction's ([`Backend::take_failed_attempts`]).
//! - **Session events** (relaunch, park, unpark, reseed, fork, compaction) are queued the moment
//!   they happen and drained by [`Backend::take_session_events`] as [`SessionEvent`]s; each is
//!   also listed in the [`TurnReport`] of the turn it came with.
//!
//! - **Flush protocol** ([`Backend::run`]): see [`flush`]. The child runs with
//!   `--replay-user-messages`, so the driver sees when the CLI takes the flush line: echoed before
//!   the run's `result`, it was absorbed into the loop; otherwise it runs as its own turn right
//!   after, and the driver reads that turn too (its reply is the flush's answer).
//!
//! Not supported, said with [`BackendError::Unsupported`]: [`Backend::ping`] and
//! [`Backend::ping_head`] (a CLI turn always appends to the session), custom tools
//! (`SessionSpec::tools` must be empty: muninn's tools would need an MCP bridge; the CLI's own
//! built-in tools are chosen with [`CliConfig::tools`]). Ignored: `max_tokens` (the CLI has
//! no flag for it), and different TTLs for the system and conversation breakpoints (the CLI puts
//! one TTL on all three markers; `conversation_ttl` wins).

#![deny(clippy::print_stdout)]

mod backend;
pub mod binding;
mod config;
mod driver;
pub mod event;
pub mod flush;
mod lines;
mod messages;
pub mod pool;
mod usage;

pub use binding::{BindingError, BindingKey, Handle, SessionBinding};
/// The session events this backend raises (relaunched, parked, unparked, reseeded, forked,
/// compacted), defined with the [`Backend`] trait.
pub use muninn_backend::SessionEvent;

/// The Claude Code CLI version this driver is written against (its observed stream-json
/// protocol); `scripts/install-claude-cli.sh` installs it and `muninn doctor` checks for it.
pub const PINNED_VERSION: &str = "2.1.332";

#[cfg(doc)]
use muninn_backend::{Backend, BackendError, TurnOutcome};
#[cfg(doc)]
use muninn_core::trace::Usage;

pub use backend::ClaudeCliBackend;
pub use config::{
    CliConfig, CredentialKind, CredentialPassing, Secret, derive_session_id, transcript_path,
};
pub use driver::sweeps::Sweeps;
pub(crate) use messages::{BilledQueue, Command, EventQueue, TurnDone};
pub use messages::{InterruptHandle, ParkReport, TurnReport};
pub use usage::{parse_model_usage, parse_usage};

/// Reads a process's resident memory (`VmRSS`, kB) from `/proc`.
pub fn vm_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(
        std::path::Path::new("/proc")
            .join(pid.to_string())
            .join("status"),
    )
    .ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
