//! The bounds on every API input, defined once: the host refuses a request over one with a
//! `400` naming the field and the limit (`{"error":{"type":"limit_exceeded",…}}`), and a client
//! can check before it sends.
//!
//! Sizes are UTF-8 bytes. They follow the chat transports a delivery comes from: Matrix caps an
//! event at 64 KiB and a room alias, room id, user id or event id at 255 bytes; a brief is an
//! operator's instruction, allowed four times a message. Context is room history — a
//! transport sends the last few dozen lines, so a hundred lines and 64 KiB in all is generous
//! while keeping one delivery from filling a prompt. The numbers also bound what one request
//! can make the host store and later put in a prompt.

/// A room: `#alias`, `!room-id` or `@user`.
pub const ROOM_MAX_BYTES: usize = 255;
/// A sender, in a delivery or a context line.
pub const SENDER_MAX_BYTES: usize = 255;
/// A delivery's `source_id`, and a context line's `id`.
pub const SOURCE_ID_MAX_BYTES: usize = 255;
/// A delivery's `text`, and each context line's.
pub const TEXT_MAX_BYTES: usize = 64 * 1024;
/// Lines of `context` one delivery may carry.
pub const CONTEXT_MAX_LINES: usize = 100;
/// All of a delivery's `context` lines together (ids, senders and texts).
pub const CONTEXT_MAX_BYTES: usize = 64 * 1024;
/// A brief's `text`.
pub const BRIEF_MAX_BYTES: usize = 256 * 1024;
/// An outbox request id (path segment of an ack).
pub const REQUEST_ID_MAX_BYTES: usize = 255;
/// The most turns per wake, in settings (`turn_limit`) and configuration (`turns_per_wake`):
/// more is a runaway, not a setting.
pub const MAX_TURNS_PER_WAKE: i64 = 1_000;
/// The longest spend window, ms (a leap year).
pub const MAX_SPEND_WINDOW_MS: i64 = 366 * 86_400_000;
/// The largest spend cap, micro-dollars ($1,000,000): above it a cap would not be one.
pub const MAX_SPEND_CAP_MICRO_USD: i64 = 1_000_000_000_000;

/// One input over its bound: which field, how large it was, and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {actual} {unit} is over the limit of {limit} {unit}")]
pub struct LimitExceeded {
    /// The field, as a JSON path: `text`, `context[3].sender`, `context`.
    pub field: String,
    /// Its size (or value).
    pub actual: u64,
    /// The limit.
    pub limit: u64,
    /// `bytes`, `lines`, or the value's unit.
    pub unit: &'static str,
}

fn bytes(field: impl Into<String>, value: &str, limit: usize) -> Result<(), LimitExceeded> {
    if value.len() <= limit {
        return Ok(());
    }
    Err(LimitExceeded {
        field: field.into(),
        actual: value.len() as u64,
        limit: limit as u64,
        unit: "bytes",
    })
}

/// Checks a delivery against every bound; the first field over its limit is the error.
pub fn check_delivery(request: &crate::wire::PostDeliveryRequest) -> Result<(), LimitExceeded> {
    bytes("room", &request.room, ROOM_MAX_BYTES)?;
    bytes("sender", &request.sender, SENDER_MAX_BYTES)?;
    bytes("source_id", &request.source_id, SOURCE_ID_MAX_BYTES)?;
    bytes("text", &request.text, TEXT_MAX_BYTES)?;
    if request.context.len() > CONTEXT_MAX_LINES {
        return Err(LimitExceeded {
            field: "context".into(),
            actual: request.context.len() as u64,
            limit: CONTEXT_MAX_LINES as u64,
            unit: "lines",
        });
    }
    let mut total = 0usize;
    for (i, line) in request.context.iter().enumerate() {
        if let Some(id) = &line.id {
            bytes(format!("context[{i}].id"), id, SOURCE_ID_MAX_BYTES)?;
        }
        bytes(
            format!("context[{i}].sender"),
            &line.sender,
            SENDER_MAX_BYTES,
        )?;
        bytes(format!("context[{i}].text"), &line.text, TEXT_MAX_BYTES)?;
        total += line.id.as_ref().map_or(0, String::len) + line.sender.len() + line.text.len();
    }
    if total > CONTEXT_MAX_BYTES {
        return Err(LimitExceeded {
            field: "context".into(),
            actual: total as u64,
            limit: CONTEXT_MAX_BYTES as u64,
            unit: "bytes",
        });
    }
    Ok(())
}

/// Checks a brief's text.
pub fn check_brief(request: &crate::wire::PostBriefRequest) -> Result<(), LimitExceeded> {
    bytes("text", &request.text, BRIEF_MAX_BYTES)
}

/// Checks an ack's request id.
pub fn check_request_id(request_id: &str) -> Result<(), LimitExceeded> {
    bytes("request_id", request_id, REQUEST_ID_MAX_BYTES)
}

/// Checks the settings' numbers against their ceilings (positivity is the host's own check).
pub fn check_settings(settings: &crate::wire::PutSettingsRequest) -> Result<(), LimitExceeded> {
    let ceilings = [
        (
            "turn_limit",
            settings.turn_limit,
            MAX_TURNS_PER_WAKE,
            "turns",
        ),
        (
            "spend_window_ms",
            settings.spend_window_ms,
            MAX_SPEND_WINDOW_MS,
            "ms",
        ),
        (
            "spend_cap_micro_usd",
            settings.spend_cap_micro_usd,
            MAX_SPEND_CAP_MICRO_USD,
            "micro-dollars",
        ),
    ];
    for (field, value, limit, unit) in ceilings {
        if let Some(value) = value
            && value > limit
        {
            return Err(LimitExceeded {
                field: field.into(),
                actual: value.unsigned_abs(),
                limit: limit.unsigned_abs(),
                unit,
            });
        }
    }
    Ok(())
}
