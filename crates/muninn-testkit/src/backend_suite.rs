//! The behaviour suite every [`Backend`] passes.
//!
//! A backend's tests implement [`SuiteHarness`] (how to make a fresh backend, and, when the
//! provider behind it has a virtual clock, how to advance it) and call
//! [`run_backend_suite`]. Each case opens its own session with a system prompt made unique by
//! the harness's nonce, so cases never share a cache prefix with each other or with other tests
//! talking to the same provider.
//!
//! Cases:
//!
//! 1. `append_reads_grow` — five text turns: the first writes and reads nothing, each later turn
//!    reads strictly more than the one before, usage is conserved against the raw JSON.
//! 2. `tool_round_trip` — a turn asking for a tool gets a call with a schema-valid input; its
//!    result sent back gets a text reply. Skipped by a backend that cannot offer custom tools
//!    ([`Capability::CustomTools`]).
//! 3. `structured_output` — a session with an output schema gets a schema-valid value.
//! 4. `ttl_expiry` (only with a clock) — an idle gap past the 5-minute TTL makes the next turn
//!    read nothing of the expired conversation, attributed to `ttl_expiry`.
//! 5. `capabilities` — after a turn, `ping`, `ping_head` and then `compact` are each either done
//!    (a ping's usage is conserved, its output 0 exactly when the backend says its pings
//!    generate nothing) or refused with [`BackendError::Unsupported`] naming that
//!    capability and without side effects: no session event, and the next turn continues the
//!    session as it was, reading more than the turn before. A compaction may also fail
//!    ([`BackendError::CompactionFailed`]). Which were unsupported is in
//!    [`SuiteReport::unsupported`].

use muninn_backend::{
    Backend, BackendError, Capability, InputPart, SessionSpec, ToolSpec, TurnInput, TurnOutcome,
};
use muninn_core::cache::Ttl;
use muninn_core::ledger::MissCause;
use serde_json::{Value, json};
use std::future::Future;

/// How the suite gets backends and controls the provider behind them.
pub trait SuiteHarness {
    /// The backend under test.
    type B: Backend;

    /// A fresh backend (no session started).
    fn backend(&self) -> impl Future<Output = Self::B>;

    /// The model to open sessions on.
    fn model(&self) -> String;

    /// A string unique to this run, folded into every system prompt.
    fn nonce(&self) -> String;

    /// Advances the provider's clock (and the backend's) by `ms`; `false` if the provider has no
    /// controllable clock, which skips the cases that need one.
    fn advance_clock(&self, ms: u64) -> impl Future<Output = bool>;
}

/// A case that failed: its name and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("backend suite case {case}: {message}")]
pub struct SuiteFailure {
    /// The case.
    pub case: &'static str,
    /// What went wrong.
    pub message: String,
}

/// What the suite ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuiteReport {
    /// Cases that passed.
    pub passed: Vec<&'static str>,
    /// Cases skipped because the harness or the backend does not support them.
    pub skipped: Vec<&'static str>,
    /// What the backend said it cannot do (`capabilities`), in the order asked.
    pub unsupported: Vec<Capability>,
}

fn fail(case: &'static str, message: impl Into<String>) -> SuiteFailure {
    SuiteFailure {
        case,
        message: message.into(),
    }
}

/// A system prompt long enough to be cacheable on every model (≥ 4,096 tokens under
/// `muninn_core::tokenize`), unique to `nonce` and `case`.
fn system_prompt(nonce: &str, case: &str) -> Vec<String> {
    let doctrine: String = (0..900)
        .map(|i| format!("rule{i} keep every promise. "))
        .collect();
    vec![
        format!("You are a suite Mind ({case}, run {nonce}). {doctrine}"),
        "Persona: terse, exact.".to_string(),
    ]
}

fn spec(harness_model: String, nonce: &str, case: &str) -> SessionSpec {
    SessionSpec {
        model: harness_model,
        system: system_prompt(nonce, case),
        tools: Vec::new(),
        output_schema: None,
        system_ttl: Ttl::FiveMinutes,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 1024,
    }
}

fn check_conservation(case: &'static str, o: &TurnOutcome) -> Result<(), SuiteFailure> {
    check_usage(case, o, None)
}

/// Conservation of a reply's usage; `ping_output` is, for a keep-warm ping, the output the
/// backend says a ping pays ([`muninn_backend::Backend::ping_output_tokens`]): with 0
/// (`max_tokens: 0`) the ping must have generated nothing, else it must have generated something.
fn check_usage(
    case: &'static str,
    o: &TurnOutcome,
    ping_output: Option<u64>,
) -> Result<(), SuiteFailure> {
    let raw = |k: &str| o.raw_usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let raw_split = |k: &str| {
        o.raw_usage
            .get("cache_creation")
            .and_then(|c| c.get(k))
            .and_then(Value::as_u64)
    };
    if raw("input_tokens") != o.usage.input
        || raw("cache_read_input_tokens") != o.usage.cache_read
        || raw("cache_creation_input_tokens") != o.usage.written()
        || raw("output_tokens") != o.usage.output
    {
        return Err(fail(
            case,
            format!(
                "parsed usage {:?} differs from raw {}",
                o.usage, o.raw_usage
            ),
        ));
    }
    if let (Some(w5), Some(w1)) = (
        raw_split("ephemeral_5m_input_tokens"),
        raw_split("ephemeral_1h_input_tokens"),
    ) && (w5 != o.usage.cache_write_5m || w1 != o.usage.cache_write_1h)
    {
        return Err(fail(case, "the 5m/1h split differs from the raw usage"));
    }
    let output_as_said = match ping_output {
        Some(0) => o.usage.output == 0,
        _ => o.usage.output > 0,
    };
    if o.usage.prompt() == 0 || !output_as_said {
        return Err(fail(
            case,
            format!("empty usage {:?} (ping output {ping_output:?})", o.usage),
        ));
    }
    if let Some(p) = &o.predicted
        && p.prompt() != o.usage.prompt()
    {
        return Err(fail(
            case,
            format!(
                "predicted prompt {} != reported {}",
                p.prompt(),
                o.usage.prompt()
            ),
        ));
    }
    Ok(())
}

/// Runs every case; the first failure stops the suite.
pub async fn run_backend_suite<H: SuiteHarness>(h: &H) -> Result<SuiteReport, SuiteFailure> {
    let mut report = SuiteReport::default();
    let nonce = h.nonce();
    append_reads_grow(h, &nonce).await?;
    report.passed.push("append_reads_grow");
    report.record("tool_round_trip", tool_round_trip(h, &nonce).await?);
    structured_output(h, &nonce).await?;
    report.passed.push("structured_output");
    report.record("ttl_expiry", ttl_expiry(h, &nonce).await?);
    report.unsupported = capabilities(h, &nonce).await?;
    report.passed.push("capabilities");
    Ok(report)
}

/// Whether a case ran (and passed: a failure is an error) or was skipped.
enum Ran {
    Passed,
    Skipped,
}

impl SuiteReport {
    fn record(&mut self, case: &'static str, ran: Ran) {
        match ran {
            Ran::Passed => self.passed.push(case),
            Ran::Skipped => self.skipped.push(case),
        }
    }
}

/// Case 1: five text turns, the first a cold write, each later one reading more.
async fn append_reads_grow<H: SuiteHarness>(h: &H, nonce: &str) -> Result<(), SuiteFailure> {
    const CASE: &str = "append_reads_grow";
    let mut b = h.backend().await;
    b.start(spec(h.model(), nonce, CASE))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    let mut last_read = 0;
    for turn in 1..=5 {
        let o = b
            .turn(TurnInput::text(format!(
                "message number {turn}: how are you?"
            )))
            .await
            .map_err(|e| fail(CASE, format!("turn {turn}: {e}")))?;
        check_conservation(CASE, &o)?;
        if o.text.is_empty() {
            return Err(fail(CASE, format!("turn {turn}: empty reply")));
        }
        if turn == 1 {
            if o.usage.cache_read != 0 || o.usage.written() == 0 {
                return Err(fail(
                    CASE,
                    format!("turn 1 not a cold write: {:?}", o.usage),
                ));
            }
            if o.miss != Some(MissCause::ColdStart) && o.predicted.is_some() {
                return Err(fail(
                    CASE,
                    format!("turn 1 miss {:?}, not cold_start", o.miss),
                ));
            }
        } else if o.usage.cache_read <= last_read {
            return Err(fail(
                CASE,
                format!(
                    "turn {turn}: read {} did not grow past {last_read}",
                    o.usage.cache_read
                ),
            ));
        }
        last_read = o.usage.cache_read;
    }
    Ok(())
}

/// Case 2: a tool call with a schema-valid input, and a text reply to its result; skipped by a
/// backend without custom tools.
async fn tool_round_trip<H: SuiteHarness>(h: &H, nonce: &str) -> Result<Ran, SuiteFailure> {
    const CASE: &str = "tool_round_trip";
    let schema = json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"]});
    let mut s = spec(h.model(), nonce, CASE);
    s.tools = vec![ToolSpec {
        name: "lookup".to_string(),
        description: "Looks a word up.".to_string(),
        input_schema: schema.clone(),
    }];
    let mut b = h.backend().await;
    match b.start(s).await {
        Ok(()) => {}
        Err(BackendError::Unsupported {
            capability: Capability::CustomTools,
        }) => {
            return Ok(Ran::Skipped);
        }
        Err(e) => return Err(fail(CASE, e.to_string())),
    }
    let o = b
        .turn(TurnInput::text(
            "Please use the lookup tool to find 'raven'.",
        ))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    check_conservation(CASE, &o)?;
    let Some(call) = o.tool_calls.first() else {
        return Err(fail(CASE, format!("no tool call in {o:?}")));
    };
    if call.name != "lookup" || o.stop_reason != "tool_use" {
        return Err(fail(
            CASE,
            format!("unexpected call {call:?} ({})", o.stop_reason),
        ));
    }
    muninn_backend::schema::validate(&schema, &call.input).map_err(|e| fail(CASE, e))?;
    let o = b
        .turn(TurnInput {
            parts: vec![InputPart::ToolResult {
                tool_use_id: call.id.clone(),
                content: "raven: a large black bird".to_string(),
                is_error: false,
            }],
            safe_to_repeat: false,
        })
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    check_conservation(CASE, &o)?;
    if o.text.is_empty() || !o.tool_calls.is_empty() || o.stop_reason != "end_turn" {
        return Err(fail(CASE, format!("after the result: {o:?}")));
    }
    Ok(Ran::Passed)
}

/// Case 3: schema-valid structured replies, twice in one session.
async fn structured_output<H: SuiteHarness>(h: &H, nonce: &str) -> Result<(), SuiteFailure> {
    const CASE: &str = "structured_output";
    let schema = json!({"type": "object", "properties": {"say": {"type": "array", "items": {"type": "object", "properties": {"room": {"enum": ["general", "dm"]}, "text": {"type": "string"}}, "required": ["room", "text"]}}, "start_self_run": {"type": ["object", "null"], "properties": {"brief": {"type": "string"}}}}, "required": ["say"]});
    let mut s = spec(h.model(), nonce, CASE);
    s.output_schema = Some(schema.clone());
    let mut b = h.backend().await;
    b.start(s).await.map_err(|e| fail(CASE, e.to_string()))?;
    let o = b
        .turn(TurnInput::text("[general] alice: hello there"))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    check_conservation(CASE, &o)?;
    let Some(value) = &o.structured else {
        return Err(fail(CASE, format!("no structured reply in {o:?}")));
    };
    muninn_backend::schema::validate(&schema, value).map_err(|e| fail(CASE, e))?;
    // The next turn still works (the structured call is answered in the history).
    let o = b
        .turn(TurnInput::text("[general] bob: and again"))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    if o.structured.is_none() || o.usage.cache_read == 0 {
        return Err(fail(CASE, format!("second structured turn: {o:?}")));
    }
    Ok(())
}

/// Case 4: after an idle gap past the 5-minute TTL the next turn reads nothing; skipped without
/// a clock.
async fn ttl_expiry<H: SuiteHarness>(h: &H, nonce: &str) -> Result<Ran, SuiteFailure> {
    const CASE: &str = "ttl_expiry";
    let mut b = h.backend().await;
    b.start(spec(h.model(), nonce, CASE))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    let mut warm_read = 0;
    for turn in 1..=2 {
        let o = b
            .turn(TurnInput::text(format!("warm turn {turn}")))
            .await
            .map_err(|e| fail(CASE, e.to_string()))?;
        warm_read = o.usage.cache_read;
    }
    // A cache that was never warm reads nothing after the gap either: that would prove nothing
    // about expiry.
    if warm_read == 0 {
        return Err(fail(CASE, "the second warm turn read nothing".to_string()));
    }
    if h.advance_clock(6 * 60 * 1000).await {
        let o = b
            .turn(TurnInput::text("after a long pause"))
            .await
            .map_err(|e| fail(CASE, e.to_string()))?;
        check_conservation(CASE, &o)?;
        if o.usage.cache_read != 0 {
            return Err(fail(
                CASE,
                format!("read {} after expiry", o.usage.cache_read),
            ));
        }
        if o.predicted.is_some() && o.miss != Some(MissCause::TtlExpiry) {
            return Err(fail(CASE, format!("miss {:?}, not ttl_expiry", o.miss)));
        }
        Ok(Ran::Passed)
    } else {
        Ok(Ran::Skipped)
    }
}

/// Case 5: ping, ping_head and compact, each done or refused without side effects; returns the
/// capabilities refused, in the order asked.
async fn capabilities<H: SuiteHarness>(
    h: &H,
    nonce: &str,
) -> Result<Vec<Capability>, SuiteFailure> {
    const CASE: &str = "capabilities";
    let mut b = h.backend().await;
    b.start(spec(h.model(), nonce, CASE))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    let mut last = b
        .turn(TurnInput::text("capabilities: the first turn"))
        .await
        .map_err(|e| fail(CASE, e.to_string()))?;
    b.take_session_events();
    let mut unsupported = Vec::new();
    // Compaction last: done, it changes the session.
    for capability in [Capability::Ping, Capability::PingHead, Capability::Compact] {
        let tried = match capability {
            Capability::Ping => b.ping().await,
            Capability::PingHead => b.ping_head().await,
            _ => b.compact("Keep every rule.").await,
        };
        match tried {
            Ok(o) if capability != Capability::Compact => {
                check_usage(CASE, &o, Some(b.ping_output_tokens()))?
            }
            Ok(_) | Err(BackendError::CompactionFailed(_)) => {}
            Err(BackendError::Unsupported { capability: said }) if said == capability => {
                let events = b.take_session_events();
                if !events.is_empty() {
                    return Err(fail(
                        CASE,
                        format!("cannot {capability}, yet raised {events:?}"),
                    ));
                }
                let next = b
                    .turn(TurnInput::text(format!("capabilities: after {capability}")))
                    .await
                    .map_err(|e| fail(CASE, format!("after {capability}: {e}")))?;
                if next.usage.cache_read <= last.usage.cache_read {
                    return Err(fail(
                        CASE,
                        format!(
                            "after the unsupported {capability} the next turn read {}, not \
                             more than {}: the session was disturbed",
                            next.usage.cache_read, last.usage.cache_read
                        ),
                    ));
                }
                last = next;
                unsupported.push(capability);
            }
            Err(e) => return Err(fail(CASE, format!("{capability}: {e}"))),
        }
    }
    Ok(unsupported)
}
