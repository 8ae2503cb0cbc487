//! The CLI's stream-json stdout, decoded one line at a time.
//!
//! Only what the driver acts on is typed; everything else — `user` echoes, `system/status`,
//! event types a later CLI release adds — lands in [`CliEvent::Unknown`] and
//! is never fatal. A known type whose fields do not parse is also kept as `Unknown` (with a
//! warning), because one odd line must not cost the session.
//!
//! Field notes from `reference/claude-cli-2.1.332.md` §3.3 and §8: a failed turn comes back as
//! `subtype:"success"` with `is_error:true`, so the driver reads `is_error`, `terminal_reason`
//! and `api_error_status`, never `subtype` alone; `"type":"result"` is not the first key, so
//! lines are parsed, never prefix-matched.

use serde::Deserialize;
use serde_json::Value;

/// One decoded stdout line.
#[derive(Debug, Clone, PartialEq)]
pub enum CliEvent {
    /// `system/init`, emitted at the start of every turn (not once per process).
    Init {
        /// The session id the CLI is writing.
        session_id: String,
    },
    /// One content block of the reply (`assistant`); all blocks of one API message share its id.
    Assistant(AssistantEvent),
    /// `system/api_retry`: the CLI is about to retry a failed request by itself.
    ApiRetry(ApiRetryEvent),
    /// `control_response`: the answer to a `control_request` line (an interrupt).
    ControlResponse(Value),
    /// `system/compact_boundary`: the CLI compacted the session.
    CompactBoundary(CompactBoundaryEvent),
    /// `result`: the end of a turn.
    Result(Box<ResultEvent>),
    /// Anything else, verbatim.
    Unknown(Value),
}

/// An `assistant` line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AssistantEvent {
    /// The API message (its `usage` is `message_start`'s, with `output_tokens:1`).
    pub message: AssistantMessage,
    /// The server's `request-id` header.
    #[serde(default)]
    pub request_id: Option<String>,
    /// The tool call a subagent's message belongs to; `None` on the main thread.
    #[serde(default)]
    pub parent_tool_use_id: Option<String>,
}

/// The message inside an `assistant` line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AssistantMessage {
    /// The API message's id (`msg_…`), the same on every line of its blocks.
    #[serde(default)]
    pub id: Option<String>,
    /// `<synthetic>` for the CLI's own error messages.
    #[serde(default)]
    pub model: String,
    /// The content blocks (usually one per line).
    #[serde(default)]
    pub content: Vec<Value>,
    /// `message_start`'s usage (input and cache numbers final, `output_tokens: 1`).
    #[serde(default)]
    pub usage: Value,
}

/// A `system/api_retry` line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ApiRetryEvent {
    /// 1 for the first retry.
    pub attempt: u32,
    /// The CLI's retry budget for this error class.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// How long the CLI waits before it.
    #[serde(default)]
    pub retry_delay_ms: u64,
    /// The HTTP status that failed.
    #[serde(default)]
    pub error_status: Option<u16>,
    /// The CLI's error class (`rate_limit`, `authentication_failed`, …).
    #[serde(default)]
    pub error: Option<String>,
}

/// A `system/compact_boundary` line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CompactBoundaryEvent {
    /// What the compaction was.
    pub compact_metadata: CompactMetadata,
}

/// The `compact_metadata` of a boundary.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CompactMetadata {
    /// `manual` (`/compact`) or `auto` (usage-triggered, idle, or reactive after a
    /// "prompt is too long").
    pub trigger: String,
    /// The context size before, as the CLI measured it (from the last reported usage).
    #[serde(default)]
    pub pre_tokens: Option<u64>,
    /// The context size after.
    #[serde(default)]
    pub post_tokens: Option<u64>,
}

/// A `result` line: the end of a turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResultEvent {
    /// `success` (also for API errors!), `error_during_execution`, `error_max_budget_usd`, …
    #[serde(default)]
    pub subtype: String,
    /// Whether the turn failed.
    #[serde(default)]
    pub is_error: bool,
    /// Why the turn ended: `completed`, `api_error`, `aborted_streaming`, `prompt_too_long`, …
    #[serde(default)]
    pub terminal_reason: Option<String>,
    /// The HTTP status of the final API failure.
    #[serde(default)]
    pub api_error_status: Option<u16>,
    /// The reply text, or the error text when `is_error`.
    #[serde(default)]
    pub result: Option<Value>,
    /// The model's stop reason.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// This turn's usage (summed over its main-loop requests; excludes compaction).
    #[serde(default)]
    pub usage: Value,
    /// This turn's usage per model, including compaction requests.
    #[serde(default)]
    pub model_usage_since_last_result: Option<Value>,
    /// The validated `StructuredOutput` call's input, when the session has a schema.
    #[serde(default)]
    pub structured_output: Option<Value>,
    /// The session the turn ran in.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Diagnostics (`No conversation found with session ID: …` on a failed resume).
    #[serde(default)]
    pub errors: Vec<String>,
    /// Requests plus tool round trips in the turn (0 when nothing was sent).
    #[serde(default)]
    pub num_turns: Option<u64>,
}

impl ResultEvent {
    /// A `result` read field by field, each field of an unexpected type taken as absent — except
    /// `is_error`, which is then taken from the subtype (anything but `success` failed).
    pub fn lenient(value: &Value) -> ResultEvent {
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_string);
        let present = |k: &str| value.get(k).filter(|v| !v.is_null()).cloned();
        let subtype = text("subtype").unwrap_or_default();
        ResultEvent {
            is_error: value
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(subtype != "success"),
            subtype,
            terminal_reason: text("terminal_reason"),
            api_error_status: value
                .get("api_error_status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            result: present("result"),
            stop_reason: text("stop_reason"),
            usage: present("usage").unwrap_or(Value::Null),
            model_usage_since_last_result: present("model_usage_since_last_result"),
            structured_output: present("structured_output"),
            session_id: text("session_id"),
            errors: value
                .get("errors")
                .and_then(Value::as_array)
                .map(|errors| {
                    errors
                        .iter()
                        .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            num_turns: value.get("num_turns").and_then(Value::as_u64),
        }
    }

    /// The `result` field as text (it is `null` after an interrupt).
    pub fn text(&self) -> String {
        match &self.result {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        }
    }
}

/// Decodes one stdout line; `None` for a line that is not JSON (logged by the caller).
pub fn decode(line: &str) -> Option<CliEvent> {
    let value: Value = serde_json::from_str(line).ok()?;
    let field = |k: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (kind, subtype) = (field("type"), field("subtype"));
    let typed = match (kind.as_str(), subtype.as_str()) {
        ("system", "init") => {
            value
                .get("session_id")
                .and_then(Value::as_str)
                .map(|s| CliEvent::Init {
                    session_id: s.to_string(),
                })
        }
        ("system", "api_retry") => serde_json::from_value(value.clone())
            .ok()
            .map(CliEvent::ApiRetry),
        ("system", "compact_boundary") => serde_json::from_value(value.clone())
            .ok()
            .map(CliEvent::CompactBoundary),
        ("assistant", _) => serde_json::from_value(value.clone())
            .ok()
            .map(CliEvent::Assistant),
        // A `result` ends the turn whatever its fields hold: kept as unknown, the turn would
        // wait its whole timeout for a result that came, and then be sent again.
        ("result", _) => Some(CliEvent::Result(Box::new(
            serde_json::from_value(value.clone()).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "claude-cli: a result's fields are not of the known types; read field by field");
                ResultEvent::lenient(&value)
            }),
        ))),
        ("control_response", _) => Some(CliEvent::ControlResponse(value.clone())),
        _ => return Some(CliEvent::Unknown(value)),
    };
    Some(typed.unwrap_or_else(|| {
        tracing::warn!(%kind, %subtype, "claude-cli: a known event type did not parse; kept as unknown");
        CliEvent::Unknown(value)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_result_is_read_by_is_error_not_subtype() {
        let line = json!({"duration_ms":5,"subtype":"success","is_error":true,"terminal_reason":"api_error",
            "api_error_status":529,"result":"API Error: Repeated 529","usage":{"input_tokens":0},"type":"result"});
        let Some(CliEvent::Result(r)) = decode(&line.to_string()) else {
            panic!("not a result")
        };
        assert!(r.is_error);
        assert_eq!(r.subtype, "success");
        assert_eq!(r.api_error_status, Some(529));
        assert_eq!(r.terminal_reason.as_deref(), Some("api_error"));
    }

    #[test]
    fn a_result_with_odd_fields_is_still_a_result() {
        let line = json!({"type":"result","subtype":"error_during_execution","is_error":null,
            "errors":[{"code":1},"No conversation found"],"api_error_status":"529",
            "num_turns":"two","usage":{"input_tokens":4}});
        let Some(CliEvent::Result(r)) = decode(&line.to_string()) else {
            panic!("not a result")
        };
        assert!(r.is_error);
        assert_eq!(r.errors, vec![r#"{"code":1}"#, "No conversation found"]);
        assert_eq!((r.api_error_status, r.num_turns), (None, None));
        assert_eq!(r.usage, json!({"input_tokens":4}));
    }

    #[test]
    fn unknown_and_odd_lines_are_kept_not_fatal() {
        let v = json!({"type":"system","subtype":"status","status":"compacting"});
        assert_eq!(decode(&v.to_string()), Some(CliEvent::Unknown(v)));
        let odd = json!({"type":"system","subtype":"compact_boundary","x":1});
        assert_eq!(decode(&odd.to_string()), Some(CliEvent::Unknown(odd)));
        let odd = json!({"type":"system","subtype":"api_retry","attempt":"one"});
        assert_eq!(decode(&odd.to_string()), Some(CliEvent::Unknown(odd)));
        assert_eq!(decode("not json"), None);
    }

    #[test]
    fn a_compact_boundary_is_typed() {
        let v = json!({"type":"system","subtype":"compact_boundary","session_id":"s",
            "compact_metadata":{"trigger":"auto","pre_tokens":975028,"post_tokens":532,
            "cumulative_dropped_tokens":974496,"duration_ms":96}});
        assert_eq!(
            decode(&v.to_string()),
            Some(CliEvent::CompactBoundary(CompactBoundaryEvent {
                compact_metadata: CompactMetadata {
                    trigger: "auto".into(),
                    pre_tokens: Some(975_028),
                    post_tokens: Some(532),
                }
            }))
        );
    }

    #[test]
    fn api_retry_and_init() {
        let v = json!({"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,
            "retry_delay_ms":2073,"error_status":429,"error":"rate_limit"});
        assert_eq!(
            decode(&v.to_string()),
            Some(CliEvent::ApiRetry(ApiRetryEvent {
                attempt: 1,
                max_retries: Some(10),
                retry_delay_ms: 2073,
                error_status: Some(429),
                error: Some("rate_limit".into()),
            }))
        );
        let init = json!({"type":"system","subtype":"init","session_id":"abc"});
        assert_eq!(
            decode(&init.to_string()),
            Some(CliEvent::Init {
                session_id: "abc".into()
            })
        );
    }
}
