//! What the driver writes to a child's stdin — user lines (with a reseed's seed), `/compact`
//! lines, interrupt requests — and the texts it reads back: replay echoes and the log a reseed
//! is rendered from.

use super::Live;
use muninn_backend::{BackendError, InputPart, TurnInput};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::time::Instant;

/// What a turn-like command writes.
pub(super) enum Exchange {
    Turn(TurnInput),
    /// `/compact <instructions>`.
    Compact(String),
}

impl Exchange {
    pub(super) fn line(&self) -> Result<String, BackendError> {
        match self {
            Exchange::Turn(input) => user_line(input, None),
            Exchange::Compact(instructions) => {
                let instructions = instructions.trim();
                let text = if instructions.is_empty() {
                    "/compact".to_string()
                } else {
                    format!("/compact {instructions}")
                };
                validated_line(Value::String(text))
            }
        }
    }
}

/// The stdin line for a user turn, validated: one object, one line, parseable — one bad line
/// kills the CLI. A `seed` goes first, as its own text block.
pub(super) fn user_line(input: &TurnInput, seed: Option<&str>) -> Result<String, BackendError> {
    if input.parts.is_empty() {
        return Err(BackendError::Invalid(
            "a turn needs at least one part".into(),
        ));
    }
    let content = match (seed, input.parts.as_slice()) {
        (None, [InputPart::Text { text }]) => Value::String(text.clone()),
        (seed, parts) => Value::Array(
            seed.map(|s| json!({"type": "text", "text": s}))
                .into_iter()
                .chain(parts.iter().map(|p| match p {
                    InputPart::Text { text } => json!({"type": "text", "text": text}),
                    InputPart::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => json!({"type": "tool_result", "tool_use_id": tool_use_id,
                                "content": content, "is_error": is_error}),
                }))
                .collect(),
        ),
    };
    validated_line(content)
}

/// A stdin user line with `content`, checked to be one JSON object on one line.
pub(super) fn validated_line(content: Value) -> Result<String, BackendError> {
    let line = json!({"type": "user", "message": {"role": "user", "content": content}}).to_string();
    let valid = !line.contains('\n')
        && serde_json::from_str::<Value>(&line).is_ok_and(|v| v["type"] == "user");
    if !valid {
        return Err(BackendError::Invalid(
            "the turn did not serialise to one JSON line".into(),
        ));
    }
    Ok(line)
}

/// A turn's input as plain text, for the driver's log: text parts as they are, tool results
/// marked as such.
pub(super) fn input_text(input: &TurnInput) -> String {
    input
        .parts
        .iter()
        .map(|p| match p {
            InputPart::Text { text } => text.clone(),
            InputPart::ToolResult {
                content, is_error, ..
            } => format!(
                "[tool {}: {content}]",
                if *is_error { "error" } else { "result" }
            ),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The seed a reseeded session starts from: the host's rendering of what preceded this start,
/// then this start's turns, under a preamble that says what it is. `None` when there is nothing
/// to seed.
pub(super) fn render_seed(host: Option<&str>, log: &[(String, String)]) -> Option<String> {
    let host = host.filter(|h| !h.trim().is_empty());
    if host.is_none() && log.is_empty() {
        return None;
    }
    let mut seed = String::from(
        "[muninn] The session that held this conversation was lost. It continues here from \
         muninn's own transcript. The conversation so far:\n",
    );
    if let Some(host) = host {
        seed.push('\n');
        seed.push_str(host);
        seed.push('\n');
    }
    for (user, assistant) in log {
        seed.push_str(&format!("\nUser: {user}\n\nAssistant: {assistant}\n"));
    }
    seed.push_str("\n[muninn] End of the conversation so far. The new message follows.");
    Some(seed)
}

/// The text of a `--replay-user-messages` echo (`user` with `isReplay: true`), if `event` is one.
pub(super) fn replayed_text(event: &Value) -> Option<String> {
    if event.get("type").and_then(Value::as_str) != Some("user")
        || event.get("isReplay").and_then(Value::as_bool) != Some(true)
    {
        return None;
    }
    let content = event.get("message")?.get("content")?;
    (content.is_string() || content.is_array()).then(|| message_text(content))
}

/// The text of a message's `content` (a string, or its text blocks joined).
pub(super) fn message_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Writes the stream-json `interrupt` control request (SIGINT would end the process), giving up
/// at `deadline`.
pub(super) async fn write_interrupt(live: &mut Live, n: u64, deadline: Instant) {
    let request = json!({
        "type": "control_request",
        "request_id": format!("muninn-interrupt-{n}"),
        "request": {"subtype": "interrupt"},
    });
    if let Some(stdin) = live.stdin.as_mut()
        && let Err(e) = write_line(stdin, &request.to_string(), deadline).await
    {
        tracing::debug!(error = %e, "claude-cli: interrupt write failed");
    }
}

/// Writes `line` and its line end; a write still waiting at `deadline` fails with
/// [`std::io::ErrorKind::TimedOut`]. The bound is what keeps a child that takes no input (hung,
/// stopped) from holding the turn forever: a line longer than the pipe's buffer (a reseed's
/// seed, a large tool result) waits for the child to read it.
pub(super) async fn write_line(
    stdin: &mut ChildStdin,
    line: &str,
    deadline: Instant,
) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    let write = async {
        stdin.write_all(&bytes).await?;
        stdin.flush().await
    };
    tokio::time::timeout_at(deadline, write)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the child took no input before the turn's deadline",
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_lines_carry_the_instructions() {
        let line = Exchange::Compact("  keep \"the\"\nravens ".into())
            .line()
            .unwrap();
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["message"]["content"],
            json!("/compact keep \"the\"\nravens")
        );
        let bare = Exchange::Compact(String::new()).line().unwrap();
        let v: Value = serde_json::from_str(&bare).unwrap();
        assert_eq!(v["message"]["content"], json!("/compact"));
    }

    #[test]
    fn user_lines_are_one_valid_json_line() {
        let line = user_line(&TurnInput::text("two\nlines \"quoted\""), None).unwrap();
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["message"]["content"], json!("two\nlines \"quoted\""));
        let multi = TurnInput {
            parts: vec![
                InputPart::Text { text: "a".into() },
                InputPart::Text { text: "b".into() },
            ],
            safe_to_repeat: false,
        };
        let v: Value = serde_json::from_str(&user_line(&multi, None).unwrap()).unwrap();
        assert_eq!(
            v["message"]["content"][1],
            json!({"type":"text","text":"b"})
        );
        assert!(
            user_line(
                &TurnInput {
                    parts: vec![],
                    safe_to_repeat: true
                },
                None
            )
            .is_err()
        );
        // A seed goes first, as its own block.
        let v: Value =
            serde_json::from_str(&user_line(&TurnInput::text("now"), Some("so far")).unwrap())
                .unwrap();
        assert_eq!(
            v["message"]["content"],
            json!([{"type":"text","text":"so far"},{"type":"text","text":"now"}])
        );
    }

    #[test]
    fn a_seed_renders_the_host_seed_then_the_log() {
        assert_eq!(render_seed(None, &[]), None);
        assert_eq!(render_seed(Some("  "), &[]), None);
        let seed = render_seed(
            Some("HOST TRANSCRIPT"),
            &[("q1".into(), "a1".into()), ("q2".into(), "a2".into())],
        )
        .unwrap();
        let at = |s: &str| seed.find(s).unwrap();
        assert!(seed.starts_with("[muninn] The session that held this conversation was lost."));
        assert!(at("HOST TRANSCRIPT") < at("User: q1") && at("User: q1") < at("Assistant: a1"));
        assert!(at("Assistant: a1") < at("User: q2") && at("User: q2") < at("Assistant: a2"));
    }

    #[test]
    fn replay_echoes_are_recognised() {
        let echo =
            json!({"type":"user","message":{"role":"user","content":"flush now"},"isReplay":true});
        assert_eq!(replayed_text(&echo).as_deref(), Some("flush now"));
        let blocks = json!({"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"}]},"isReplay":true});
        assert_eq!(replayed_text(&blocks).as_deref(), Some("a"));
        // A tool result the CLI reports is not an echo.
        let tool = json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"x"}]}});
        assert_eq!(replayed_text(&tool), None);
    }
}
