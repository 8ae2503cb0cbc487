//! Starting a CLI child for the driver's session — its arguments, cleared environment,
//! settings, system prompt file and credential (environment or a pipe) — and reseeding a
//! session the CLI lost.

use super::stdin::render_seed;
use super::{
    Driver, Live, MAX_CREDENTIAL_BYTES, MAX_STDERR_LINE_BYTES, STDERR_LINE_CHARS, STDERR_LINES,
    emit, truncate,
};
use crate::lines::{BoundedLines, Line, MAX_LINE_BYTES};
use crate::{CliConfig, CredentialPassing, SessionEvent, derive_session_id, transcript_path};
use command_fds::CommandFdExt;
use muninn_backend::BackendError;
use muninn_core::cache::Ttl;
use serde_json::json;
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::BufReader;

impl Driver {
    /// Launches a child for the current session: `--resume` when a transcript exists,
    /// `--session-id` for a new session, a reseed when an established session lost its file.
    pub(super) fn launch(&mut self, events: &mut Vec<SessionEvent>) -> Result<(), BackendError> {
        let resume = if transcript_path(&self.config, &self.session_id).is_some() {
            true
        } else if self.established {
            self.reseed("the session transcript is missing", events);
            false
        } else {
            false
        };
        let mut command = self.command(resume)?;
        let mark = super::tree::new_mark().map_err(|e| {
            BackendError::Transport(format!("no randomness for the child's mark: {e}"))
        })?;
        // Inherited by whatever the child starts, so what it leaves behind is found when the
        // child is done with (`tree.rs`).
        command.env(super::tree::MARK_VAR, &mark);
        let c = &self.config;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A process group of its own: a Ctrl-C at the host's terminal (SIGINT to the
            // foreground group) would end the CLI's running turn as interrupted and the CLI
            // with it; the host stops its children itself, letting their turns finish.
            .process_group(0)
            .kill_on_drop(true);
        let spawned = command.spawn();
        // Closes the parent's read end of the credential pipe: the child holds the only one.
        drop(command);
        let mut child = spawned.map_err(|e| {
            BackendError::Transport(format!("cannot start {}: {e}", c.bin.display()))
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(BackendError::Transport("the child has no pipes".into()));
        };
        let ring = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let stderr_drained = tokio::spawn(drain_stderr(stderr, ring.clone()));
        tracing::debug!(session = %self.session_id, resume, pid = ?child.id(), "claude-cli: launched");
        // A resume after an earlier launch is a relaunch (the first launch may resume a session a
        // previous host run left, which is not news).
        if resume && self.parked {
            emit(
                &self.queue,
                events,
                SessionEvent::Unparked {
                    session_id: self.session_id.clone(),
                },
            );
        } else if resume && self.launches > 0 && !self.renewing {
            emit(
                &self.queue,
                events,
                SessionEvent::Relaunched {
                    session_id: self.session_id.clone(),
                },
            );
        }
        self.parked = false;
        self.renewing = false;
        self.served = false;
        // A notification was the dead child's: its background task died with it, and the new
        // child will start no turn on it. Kept, it would make this child's first `result`
        // after an init with no echo (a `/compact` with nothing to compact) a turn of the CLI's
        // own, read past until the exchange's timeout.
        self.notified = false;
        self.launches += 1;
        self.child = Some(Live {
            pid: child.id(),
            child,
            stdin: Some(stdin),
            stdout: BoundedLines::new(BufReader::new(stdout), MAX_LINE_BYTES),
            stderr: ring,
            stderr_drained: Some(stderr_drained),
            mark: Some(mark),
            sweeps: self.config.sweeps.clone(),
        });
        Ok(())
    }

    /// The child's command line for the current session (`resume` picks `--resume` over
    /// `--session-id`) and its environment; writes the system prompt and settings files it names.
    fn command(&self, resume: bool) -> Result<tokio::process::Command, BackendError> {
        let c = &self.config;
        let mut command = tokio::process::Command::new(&c.bin);
        command.args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ]);
        command
            .arg(if resume { "--resume" } else { "--session-id" })
            .arg(&self.session_id);
        if resume && self.forking {
            // The CLI copies the history into a file under a new id it picks (reported by the
            // turn's `system/init`); the original file is not written again.
            command.arg("--fork-session");
        }
        // The echo of each user line as the CLI takes it tells the flush protocol whether its
        // line was absorbed into the running loop or queued as a turn of its own.
        command.arg("--replay-user-messages");
        // The system prompt goes through a file only this user can read: on argv it would be
        // readable by every local user (`/proc/<pid>/cmdline`), and Linux refuses one argument
        // over 128 KiB (a doctrine alone may be 96 KiB).
        let prompt = write_system_prompt(c, &self.spec.system.join("\n\n"))?;
        command.arg("--system-prompt-file").arg(prompt);
        // `--tools` is variadic: the `=` form keeps it from swallowing the next argument.
        command.arg(format!("--tools={}", c.tools.join(",")));
        if let Some(mode) = &c.permission_mode {
            command.arg("--permission-mode").arg(mode);
        }
        if let Some(micros) = c.run_budget_micro_usd.or(c.max_budget_micro_usd) {
            command.arg("--max-budget-usd").arg(format!(
                "{}.{:06}",
                micros / 1_000_000,
                micros % 1_000_000
            ));
        }
        if let Some(n) = c.max_turns {
            command.arg("--max-turns").arg(n.to_string());
        }
        if let Some(schema) = &self.spec.output_schema {
            command.arg("--json-schema").arg(schema.to_string());
        }
        if !self.spec.model.is_empty() {
            command.arg("--model").arg(&self.spec.model);
        }
        self.environment(&mut command)?;
        Ok(command)
    }

    /// The child's working directory and its whole environment (cleared, then the allowlist of
    /// the crate docs), with the credential passed as configured; writes `settings.json`.
    fn environment(&self, command: &mut tokio::process::Command) -> Result<(), BackendError> {
        let c = &self.config;
        let ttl = match self.spec.conversation_ttl {
            Ttl::FiveMinutes => "5m",
            Ttl::OneHour => "1h",
        };
        write_settings(c)?;
        command
            .current_dir(c.work_dir())
            .env_clear()
            .env("PATH", &c.path)
            .env("HOME", c.home_dir())
            .env("CLAUDE_CONFIG_DIR", c.config_dir())
            .env("TMPDIR", c.tmp_dir())
            .env("ANTHROPIC_BASE_URL", &c.base_url)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
            .env("CLAUDE_CODE_PROMPT_CACHE_TTL", ttl)
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            // Subagents and Bash commands run in the foreground, inside the turn that started
            // them: in the background, each one's end makes the CLI start a turn of its own
            // after the turn's `result`, while muninn is idle, and that turn's `result` would
            // be read as the next turn's answer (`read.rs` tells the two apart should one
            // come anyway).
            .env("CLAUDE_CODE_DISABLE_BACKGROUND_TASKS", "1");
        if !c.allow_cli_auto_compaction {
            command.env("DISABLE_AUTO_COMPACT", "1");
        }
        if let Some(n) = c.max_retries {
            command.env("CLAUDE_CODE_MAX_RETRIES", n.to_string());
        }
        match c.credential_passing {
            CredentialPassing::Environment => {
                command.env(c.credential_kind.environment_var(), c.api_key.expose());
            }
            CredentialPassing::FileDescriptor => {
                // The CLI reads `/proc/self/fd/<n>` to its end and keeps the credential in
                // memory. It would copy a credential it read from a descriptor to a "handoff"
                // file (`/home/claude/.claude/remote/.api_key` or `.oauth_token`, "Persisted …
                // for subprocess access") only when `CLAUDE_CODE_REMOTE` is set, which the
                // cleared environment guarantees it is not (checked by a test: no file under
                // the data dir, nor that path, ever holds the key). Nothing else needs the fd
                // afterwards: with `--tools=` the CLI starts no subprocesses, and the pipe is
                // empty once read.
                let fd = credential_pipe(c.api_key.expose())?;
                command.env(
                    c.credential_kind.descriptor_var(),
                    fd.as_raw_fd().to_string(),
                );
                // Clears FD_CLOEXEC on this one descriptor in the child (after the fork, so no
                // other child spawned meanwhile inherits it); every other descriptor of ours
                // keeps CLOEXEC. The parent's copy closes when `launch` drops `command` after
                // the spawn.
                command.preserved_fds(vec![fd]);
            }
        }
        Ok(())
    }

    /// Replaces a lost session with a fresh id (skipping ids that already have a transcript).
    pub(super) fn reseed(&mut self, reason: &str, events: &mut Vec<SessionEvent>) {
        let old = self.session_id.clone();
        loop {
            self.reseeds += 1;
            self.session_id = derive_session_id(&self.config.session_id, self.reseeds);
            if transcript_path(&self.config, &self.session_id).is_none() {
                break;
            }
        }
        self.established = false;
        // A fresh session is not a copy of anything.
        self.forking = false;
        let host_seed = self.seed.lock().ok().and_then(|s| s.clone());
        self.pending_seed = render_seed(host_seed.as_deref(), &self.log);
        let seed_tokens = self
            .pending_seed
            .as_deref()
            .map_or(0, muninn_core::tokenize::count);
        tracing::warn!(old = %old, new = %self.session_id, reason, seed_tokens, "claude-cli: session reseeded");
        emit(
            &self.queue,
            events,
            SessionEvent::Reseeded {
                old_session_id: old,
                new_session_id: self.session_id.clone(),
                reason: reason.to_string(),
                seed_tokens,
            },
        );
    }
}

/// A pipe holding `secret`, its write end already closed: the child reads it to the end.
fn credential_pipe(secret: &str) -> Result<OwnedFd, BackendError> {
    if secret.len() > MAX_CREDENTIAL_BYTES {
        return Err(BackendError::Invalid(
            "the credential is too long to pass through a pipe".into(),
        ));
    }
    // Both ends are created close-on-exec; only the child's copy of the read end loses it.
    let (reader, mut writer) = std::io::pipe()
        .map_err(|e| BackendError::Transport(format!("cannot create the credential pipe: {e}")))?;
    writer
        .write_all(secret.as_bytes())
        .map_err(|e| BackendError::Transport(format!("cannot fill the credential pipe: {e}")))?;
    drop(writer);
    Ok(reader.into())
}

/// Writes the child's `settings.json` (the config dir is muninn's own, so it is overwritten):
/// auto-compaction and idle compaction off, unless a test asks to leave auto-compaction on.
fn write_settings(c: &CliConfig) -> Result<(), BackendError> {
    let settings = json!({
        "autoCompactEnabled": c.allow_cli_auto_compaction,
        "idleCompaction": false,
    });
    let path = c.config_dir().join("settings.json");
    std::fs::write(&path, format!("{settings:#}\n"))
        .map_err(|e| BackendError::Invalid(format!("cannot write {}: {e}", path.display())))
}

/// Writes the session's system prompt to `system-prompt.md` in the child's working directory,
/// readable by this user only, replacing it whole (a new file renamed over the old one, so a
/// child launching at the same moment never reads half of it). Returns its path.
fn write_system_prompt(c: &CliConfig, text: &str) -> Result<std::path::PathBuf, BackendError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = c.work_dir();
    let path = dir.join("system-prompt.md");
    let partial = dir.join(".system-prompt.md.partial");
    let failed =
        |e: std::io::Error| BackendError::Invalid(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&partial, &path).map_err(failed)?;
    Ok(path)
}

/// Keeps the child's last stderr lines; draining also keeps a full pipe from stalling it.
///
/// Every byte is read until the child closes its end, whatever the bytes are: a drain that
/// stopped early (it once stopped at the first line that was not UTF-8) closes the pipe, and the
/// child's next stderr write kills it with SIGPIPE, its cause unrecorded. A line is held up to
/// [`MAX_STDERR_LINE_BYTES`]; a longer one is reported by its size.
async fn drain_stderr(stderr: tokio::process::ChildStderr, ring: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BoundedLines::new(BufReader::new(stderr), MAX_STDERR_LINE_BYTES);
    loop {
        let line = match lines.next_line().await {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::Skipped(bytes))) => format!("[a stderr line of {bytes} bytes, skipped]"),
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "claude-cli: reading the child's stderr failed");
                return;
            }
        };
        tracing::debug!(line = %truncate(&line, 300), "claude-cli stderr");
        if let Ok(mut ring) = ring.lock() {
            if ring.len() == STDERR_LINES {
                ring.pop_front();
            }
            ring.push_back(truncate(&line, STDERR_LINE_CHARS));
        }
    }
}
