//! `muninn say` (a delivery, and with `--wait` the Mind's reply) and `muninn tail` (the
//! transcript and the outbox, as they come).

use crate::connect::{ApiArgs, block_on};
use crate::output::{json, outln};
use crate::status::{Format, will_not_answer};
use crate::time::{clock_time, parse_duration};
use anyhow::Context;
use muninn_api::client::ApiClient;
use muninn_api::limits::TEXT_MAX_BYTES;
use muninn_api::wire::{
    OutboxMessage, PostDeliveryRequest, Role, TranscriptItemBody, TranscriptQuery,
};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Arguments of `muninn say`.
#[derive(Debug, clap::Args)]
pub struct SayArgs {
    /// The Mind.
    mind: String,
    /// The message; `-` reads it from stdin.
    text: String,
    /// The room; default: the Mind's first configured room (or, with `--dm`, a DM from the
    /// sender).
    #[arg(long)]
    room: Option<String>,
    /// Send it as a direct message.
    #[arg(long)]
    dm: bool,
    /// Who says it.
    #[arg(long, default_value = "@operator")]
    sender: String,
    /// The idempotency key; repeating it delivers nothing new. Default: a fresh random one.
    #[arg(long)]
    source_id: Option<String>,
    /// Wait for the Mind's reply and print it (the outbox messages of the turn that answered).
    #[arg(long)]
    wait: bool,
    /// How long `--wait` waits: `30s`, `2m`, `1h`.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    timeout: i64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    api: ApiArgs,
}

/// What `muninn say --format json` prints.
#[derive(Debug, Serialize)]
struct Said {
    mind: String,
    room: String,
    seq: i64,
    created: bool,
    /// Why the Mind will not answer now, if it will not.
    warning: Option<String>,
    /// With `--wait`: the reply's messages (empty if it said nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    replies: Option<Vec<OutboxMessage>>,
}

/// The message text: the argument (the host refuses one over its limit), or stdin for `-`
/// (see [`stdin_text`]).
fn message_text(text: &str) -> anyhow::Result<String> {
    if text != "-" {
        return Ok(text.to_owned());
    }
    let read = stdin_text(std::io::stdin().lock())?;
    anyhow::ensure!(!read.trim().is_empty(), "stdin held no message");
    Ok(read)
}

/// The text on `stdin`, its final line ending dropped. At most [`TEXT_MAX_BYTES`], a line
/// ending and one byte more are read: stdin used to be read whole before anything looked at
/// it, so a stream without end (`yes | muninn say vala -`) was read until memory ran out.
fn stdin_text(stdin: impl std::io::Read) -> anyhow::Result<String> {
    use std::io::Read as _;
    let too_long = || {
        anyhow::anyhow!(
            "the message on stdin is longer than the limit of {TEXT_MAX_BYTES} bytes a \
             delivery's text may have: nothing was sent"
        )
    };
    // Room for the text at the limit and a `\r\n`, and one byte to tell a longer text.
    let cap = TEXT_MAX_BYTES + 3;
    let mut bytes = Vec::new();
    stdin
        .take(cap as u64)
        .read_to_end(&mut bytes)
        .context("reading stdin")?;
    if bytes.len() == cap {
        return Err(too_long());
    }
    let mut text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("the message on stdin is not UTF-8 text: nothing was sent"))?;
    text.truncate(text.trim_end_matches(['\n', '\r']).len());
    if text.len() > TEXT_MAX_BYTES {
        return Err(too_long());
    }
    Ok(text)
}

/// `muninn say`: posts a delivery; warns (stderr) when the Mind will not answer now; with
/// `--wait`, prints the reply.
pub fn say(args: SayArgs) -> anyhow::Result<()> {
    let text = message_text(&args.text)?;
    let client = args.api.client()?;
    block_on(async move {
        let status = client.mind(&args.mind).await?;
        let room = match (&args.room, args.dm) {
            (Some(room), _) => room.clone(),
            (None, true) => args.sender.clone(),
            (None, false) => status
                .config
                .as_ref()
                .and_then(|c| c["rooms"][0].as_str())
                .map(str::to_owned)
                .context("the Mind has no configured room: pass --room")?,
        };
        let source_id = match &args.source_id {
            Some(id) => id.clone(),
            None => format!("cli-{}", random_hex()?),
        };
        let request = PostDeliveryRequest {
            room: room.clone(),
            sender: args.sender.clone(),
            is_direct: args.dm,
            to_you: false,
            text,
            source_id,
            context: Vec::new(),
        };
        let posted = client.post_delivery(&args.mind, &request).await?;
        let warning = will_not_answer(&status);
        if let Some(warning) = &warning {
            eprintln!("warning: {warning}");
        }
        if args.format == Format::Text {
            let what = if posted.created {
                "delivered"
            } else {
                "already delivered"
            };
            outln!("{what} to {} in {room}: seq {}", args.mind, posted.seq)?;
        }
        let timeout = Duration::from_millis(args.timeout.max(0) as u64);
        let replies = match args.wait {
            true => Some(wait_for_reply(&client, &args.mind, posted.seq, timeout).await?),
            false => None,
        };
        match args.format {
            Format::Json => json(&Said {
                mind: args.mind.clone(),
                room,
                seq: posted.seq,
                created: posted.created,
                warning,
                replies,
            }),
            Format::Text => {
                for message in replies.iter().flatten() {
                    outln!("{} → {}: {}", args.mind, message.room, message.text)?;
                }
                if replies.as_ref().is_some_and(Vec::is_empty) {
                    eprintln!("{} answered without a message", args.mind);
                }
                Ok(())
            }
        }
    })
}

/// The batch a request id `<mind>-<first seq>-<last seq>-<index>` answered: `(first, last)`;
/// also `<mind>-<seq>-<seq>-undeliverable`, the notice the host sends in place of an answer to
/// a delivery too large for any request (the only answer it gets).
fn batch_of(request_id: &str, mind: &str) -> Option<(i64, i64)> {
    let rest = request_id.strip_prefix(mind)?.strip_prefix('-')?;
    let mut parts = rest.split('-');
    let first = parts.next()?.parse().ok()?;
    let last = parts.next()?.parse().ok()?;
    let last_part = parts.next()?;
    let answers = last_part == "undeliverable" || last_part.parse::<i64>().is_ok();
    (answers && parts.next().is_none()).then_some((first, last))
}

/// Waits until the Mind has answered delivery `seq` (its ack position reached it: the turn's
/// outbox messages were recorded in the same transaction), then returns the messages of the
/// batch that held it. Between looks it long-polls the outbox, so it returns within moments of
/// the reply and costs nothing while the Mind thinks.
async fn wait_for_reply(
    client: &ApiClient,
    mind: &str,
    seq: i64,
    timeout: Duration,
) -> anyhow::Result<Vec<OutboxMessage>> {
    let deadline = Instant::now() + timeout;
    let mut after = 0;
    loop {
        if client.mind(mind).await?.ack_position >= seq {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        anyhow::ensure!(
            !left.is_zero(),
            "{mind} did not answer delivery {seq} within {}s (see `muninn status`)",
            timeout.as_secs()
        );
        let page = client
            .outbox(mind, after, left.as_secs().clamp(1, 25))
            .await?;
        after = page.next_after;
    }
    let mut replies = Vec::new();
    let mut after = 0;
    loop {
        let page = client.outbox(mind, after, 0).await?;
        if page.messages.is_empty() {
            return Ok(replies);
        }
        after = page.next_after;
        replies.extend(page.messages.into_iter().filter(|m| {
            batch_of(&m.request_id, mind).is_some_and(|(first, last)| first <= seq && seq <= last)
        }));
    }
}

fn random_hex() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Arguments of `muninn tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The Mind.
    mind: String,
    /// Keep printing new items and outbox messages as they come.
    #[arg(long, short)]
    follow: bool,
    /// Which transcript: `persona` or `self`.
    #[arg(long, default_value = "persona", value_parser = parse_role)]
    role: Role,
    /// How many recent items to print first.
    #[arg(long, short = 'n', default_value_t = 20)]
    lines: i64,
    /// Output format: `json` prints one JSON object per line (`{"item": …}` or
    /// `{"outbox": …}`).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    api: ApiArgs,
}

fn parse_role(text: &str) -> Result<Role, String> {
    match text {
        "persona" => Ok(Role::Persona),
        "self" => Ok(Role::SelfRole),
        other => Err(format!("{other:?}: expected persona or self")),
    }
}

/// `muninn tail`: prints the transcript's last items and the unacknowledged outbox, then, with
/// `--follow`, whatever arrives (long polls, so it prints within moments and costs nothing idle).
pub fn tail(args: TailArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let last = TranscriptQuery {
            last: Some(args.lines.max(1)),
            ..TranscriptQuery::default()
        };
        let mut page = client.transcript(&args.mind, args.role, &last).await?;
        let mut after_item = page.next_after;
        let mut after_outbox = 0;
        loop {
            for item in &page.items {
                match args.format {
                    Format::Json => outln!("{}", serde_json::json!({ "item": item }))?,
                    Format::Text => outln!("{}", item_line(item))?,
                }
            }
            let outbox = client.outbox(&args.mind, after_outbox, 0).await?;
            for message in &outbox.messages {
                match args.format {
                    Format::Json => outln!("{}", serde_json::json!({ "outbox": message }))?,
                    Format::Text => outln!(
                        "{} outbox {} → {}: {}",
                        clock_time(message.created_at_ms),
                        message.request_id,
                        message.room,
                        message.text
                    )?,
                }
            }
            after_outbox = outbox.next_after;
            if !args.follow {
                return Ok(());
            }
            let next = TranscriptQuery {
                after: Some(after_item),
                wait_s: Some(25),
                ..TranscriptQuery::default()
            };
            page = client.transcript(&args.mind, args.role, &next).await?;
            after_item = page.next_after;
        }
    })
}

fn item_line(item: &TranscriptItemBody) -> String {
    let body = match &item.body {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Object(map) if map.get("text").is_some_and(|t| t.is_string()) => {
            map["text"].as_str().unwrap_or_default().to_owned()
        }
        other => other.to_string(),
    };
    format!(
        "{} {}#{} [{}] seg {}: {body}",
        clock_time(item.created_at_ms),
        item.role.as_str(),
        item.seq,
        item.kind,
        item.segment
    )
}

#[cfg(test)]
mod tests {
    use super::batch_of;

    #[test]
    fn request_ids_name_their_batch() {
        assert_eq!(batch_of("vala-3-7-0", "vala"), Some((3, 7)));
        assert_eq!(batch_of("my-mind-1-1-2", "my-mind"), Some((1, 1)));
        assert_eq!(batch_of("vala-3-7", "vala"), None);
        assert_eq!(batch_of("valb-3-7-0", "vala"), None);
        assert_eq!(batch_of("vala-3-7-0-1", "vala"), None);
        // The notice of a delivery set aside as too large for any request is its answer.
        assert_eq!(batch_of("vala-3-3-undeliverable", "vala"), Some((3, 3)));
        assert_eq!(batch_of("vala-3-3-other", "vala"), None);
    }
}
