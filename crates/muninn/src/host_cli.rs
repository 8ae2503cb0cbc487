//! The operator's commands against a running host's HTTP API: `say`, `tail`, `status`,
//! `ledger`, `brake`, `caps`.
//!
//! Each is a thin layer over [`muninn_api::ApiClient`]; of the server's crate only its
//! configuration file format (`muninn_host::config`) is used, to find the host. The address and
//! the bearer token come from flags (`--addr`, `--token-file`) or, failing those, from the host's
//! configuration (`--config`, else the built-in demo): `listen` and `<data_dir>/api-token`. The token is read from its file and never printed. Results go to
//! stdout, diagnostics to stderr.

use anyhow::Context;
use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_api::wire::{
    LedgerParams, PostDeliveryRequest, Role, Segment, Settings, TranscriptItemBody, TranscriptQuery,
};
use muninn_host::config::Config;
use std::path::PathBuf;

/// How to reach the host: shared by every command here.
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// The host's configuration (for its address and data directory); default: the demo's.
    #[arg(long, env = "MUNINN_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The host's API address (`127.0.0.1:7676` or `http://…`); default: the configuration's
    /// `listen`.
    #[arg(long, env = "MUNINN_ADDR", global = true)]
    addr: Option<String>,
    /// The file holding the API token; default: `<data_dir>/api-token`.
    #[arg(long, env = "MUNINN_TOKEN_FILE", global = true)]
    token_file: Option<PathBuf>,
}

impl ApiArgs {
    fn client(&self) -> anyhow::Result<ApiClient> {
        let config = match (&self.addr, &self.token_file) {
            (Some(_), Some(_)) => None,
            _ => Some(Config::load(self.config.as_deref())?),
        };
        let addr = match (&self.addr, &config) {
            (Some(addr), _) => addr.clone(),
            (None, Some(config)) => config.listen.clone(),
            (None, None) => unreachable_config()?,
        };
        let token_file = match (&self.token_file, &config) {
            (Some(path), _) => path.clone(),
            (None, Some(config)) => config.api_token_path(),
            (None, None) => unreachable_config()?,
        };
        let token = ApiToken::read(&token_file)
            .context("reading the API token (is `muninn serve` running with this data dir?)")?;
        Ok(ApiClient::new(&addr, token)?)
    }
}

fn unreachable_config<T>() -> anyhow::Result<T> {
    anyhow::bail!("no configuration to take the address or token file from")
}

/// Runs `future` on a small single-threaded runtime (these commands make a few requests).
fn block_on<T>(future: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

/// Arguments of `muninn say`.
#[derive(Debug, clap::Args)]
pub struct SayArgs {
    /// The Mind.
    mind: String,
    /// The message.
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
    #[command(flatten)]
    api: ApiArgs,
}

/// `muninn say`: posts a delivery.
pub fn say(args: SayArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let room = match (args.room, args.dm) {
            (Some(room), _) => room,
            (None, true) => args.sender.clone(),
            (None, false) => {
                let status = client.mind(&args.mind).await?;
                status
                    .config
                    .as_ref()
                    .and_then(|c| c["rooms"][0].as_str())
                    .map(str::to_owned)
                    .context("the Mind has no configured room: pass --room")?
            }
        };
        let source_id = match args.source_id {
            Some(id) => id,
            None => format!("cli-{}", random_hex()?),
        };
        let request = PostDeliveryRequest {
            room: room.clone(),
            sender: args.sender,
            is_direct: args.dm,
            to_you: false,
            text: args.text,
            source_id,
            context: Vec::new(),
        };
        let posted = client.post_delivery(&args.mind, &request).await?;
        let what = if posted.created {
            "delivered"
        } else {
            "already delivered"
        };
        println!("{what} to {} in {room}: seq {}", args.mind, posted.seq);
        Ok(())
    })
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
                println!("{}", item_line(item));
            }
            let outbox = client.outbox(&args.mind, after_outbox, 0).await?;
            for message in &outbox.messages {
                println!(
                    "{} outbox {} → {}: {}",
                    clock_time(message.created_at_ms),
                    message.request_id,
                    message.room,
                    message.text
                );
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

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC (civil-from-days), without a date-time dependency.
fn clock_time(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60
    )
}

fn usd(micro: i64) -> String {
    format!("${:.4}", micro as f64 / 1e6)
}

/// Arguments of `muninn status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `muninn status`: every Mind with its lease holder, open segments, spend and brake, then each
/// send a transport gave up on (when and why).
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let minds = client.minds().await?.minds;
        println!(
            "{:<16} {:<20} {:<12} {:<12} {:>22} {:<6}",
            "MIND", "LEASE", "PERSONA", "SELF", "SPEND / CAP", "BRAKE"
        );
        for mind in &minds {
            let lease = match &mind.lease {
                Some(lease) if mind.lease_live => lease.holder.clone(),
                Some(lease) => format!("({} expired)", lease.holder),
                None if mind.registered => "-".into(),
                None => "(not registered)".into(),
            };
            let segment = |s: &Option<Segment>| match s {
                Some(s) if s.ended_at_ms.is_none() => format!("#{} open", s.number),
                Some(s) => format!("#{} ended", s.number),
                None => "-".into(),
            };
            let cap = mind
                .spend
                .cap_micro_usd
                .map_or_else(|| "no cap".into(), usd);
            println!(
                "{:<16} {:<20} {:<12} {:<12} {:>22} {:<6}",
                mind.id,
                lease,
                segment(&mind.segments.persona),
                segment(&mind.segments.self_role),
                format!("{} / {cap}", usd(mind.spend.spent_micro_usd)),
                if mind.settings.brake { "ON" } else { "off" },
            );
        }
        for mind in &minds {
            for failed in &mind.failed_sends {
                println!(
                    "{}: send {} to {} failed{}: {}",
                    mind.id,
                    failed.request_id,
                    failed.room,
                    failed
                        .failed_at_ms
                        .map_or_else(String::new, |at| format!(" at {}", clock_time(at))),
                    failed.failure.as_deref().unwrap_or("(no reason given)")
                );
            }
        }
        let braked = minds.iter().filter(|m| m.settings.brake).count();
        println!(
            "brake: {}",
            match braked {
                0 => "off".to_owned(),
                n if n == minds.len() => "on for every Mind".to_owned(),
                n => format!("on for {n} of {} Minds", minds.len()),
            }
        );
        Ok(())
    })
}

/// How `muninn ledger` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LedgerFormatArg {
    /// Aligned columns for people.
    Table,
    /// One `LedgerRow` per line, as `muninn import` reads.
    Jsonl,
}

/// Arguments of `muninn ledger`.
#[derive(Debug, clap::Args)]
pub struct LedgerArgs {
    /// The Mind.
    mind: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: LedgerFormatArg,
    /// Rows at or after this Unix-ms time.
    #[arg(long)]
    from: Option<i64>,
    /// Rows before this Unix-ms time.
    #[arg(long)]
    to: Option<i64>,
    /// At most this many rows.
    #[arg(long)]
    limit: Option<i64>,
    #[command(flatten)]
    api: ApiArgs,
}

/// `muninn ledger`: the Mind's ledger rows.
pub fn ledger(args: LedgerArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    let params = LedgerParams {
        from_ms: args.from,
        to_ms: args.to,
        limit: args.limit,
        ..LedgerParams::default()
    };
    block_on(async move {
        match args.format {
            LedgerFormatArg::Jsonl => {
                print!("{}", client.ledger_jsonl(&args.mind, &params).await?);
            }
            LedgerFormatArg::Table => {
                let rows = client.ledger(&args.mind, &params).await?.rows;
                println!(
                    "{:<19} {:<7} {:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>7} {:>10}  DECISION",
                    "AT",
                    "ROLE",
                    "SEG",
                    "TURN",
                    "PREFIX",
                    "READ",
                    "WRITE",
                    "INPUT",
                    "OUTPUT",
                    "COST"
                );
                let mut total = 0;
                for entry in &rows {
                    let row = &entry.row;
                    total += row.cost.0;
                    println!(
                        "{:<19} {:<7} {:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>7} {:>10}  {}",
                        clock_time(row.at_ms),
                        row.role,
                        row.segment,
                        row.turn,
                        row.prefix_tokens,
                        row.usage.cache_read,
                        row.usage.written(),
                        row.usage.input,
                        row.usage.output,
                        usd(row.cost.0),
                        row.decision
                    );
                }
                println!("{} rows, {}", rows.len(), usd(total));
            }
        }
        Ok(())
    })
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OnOff {
    /// Stop every Mind's turns.
    On,
    /// Let them run again.
    Off,
}

/// Arguments of `muninn brake`.
#[derive(Debug, clap::Args)]
pub struct BrakeArgs {
    /// `on` stops every Mind's turns; `off` releases them.
    #[arg(value_enum)]
    state: OnOff,
    #[command(flatten)]
    api: ApiArgs,
}

/// `muninn brake on|off`: the operator brake for every Mind at once.
pub fn brake(args: BrakeArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let answer = client.brake(matches!(args.state, OnOff::On)).await?;
        println!(
            "brake {} for {} Minds: {}",
            if answer.brake { "on" } else { "off" },
            answer.minds.len(),
            answer.minds.join(", ")
        );
        Ok(())
    })
}

/// Arguments of `muninn caps`.
#[derive(Debug, clap::Args)]
pub struct CapsArgs {
    /// The Mind.
    mind: String,
    /// The spend cap per window, in dollars.
    #[arg(long, conflicts_with = "no_spend_cap")]
    spend_cap_usd: Option<f64>,
    /// Remove the operator's spend cap (the configuration's applies).
    #[arg(long)]
    no_spend_cap: bool,
    /// The spend window, seconds.
    #[arg(long)]
    window_s: Option<i64>,
    /// The most turns per start.
    #[arg(long, conflicts_with = "no_turn_limit")]
    turn_limit: Option<i64>,
    /// Remove the turn limit.
    #[arg(long)]
    no_turn_limit: bool,
    #[command(flatten)]
    api: ApiArgs,
}

/// `muninn caps`: changes the given settings and leaves the rest (and the brake) as they are;
/// with no option, prints them.
pub fn caps(args: CapsArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let mut settings: Settings = client.settings(&args.mind).await?;
        let before = settings.clone();
        if let Some(usd) = args.spend_cap_usd {
            anyhow::ensure!(
                usd.is_finite() && usd > 0.0,
                "--spend-cap-usd must be positive"
            );
            settings.spend_cap_micro_usd = Some((usd * 1e6).round() as i64);
        }
        if args.no_spend_cap {
            settings.spend_cap_micro_usd = None;
        }
        if let Some(window_s) = args.window_s {
            settings.spend_window_ms = Some(window_s.saturating_mul(1000));
        }
        if let Some(limit) = args.turn_limit {
            settings.turn_limit = Some(limit);
        }
        if args.no_turn_limit {
            settings.turn_limit = None;
        }
        if settings != before {
            settings = client.put_settings(&args.mind, &settings).await?;
        }
        println!(
            "{}: spend cap {}, window {}, turn limit {}, brake {}",
            args.mind,
            settings
                .spend_cap_micro_usd
                .map_or_else(|| "from config".into(), usd),
            settings
                .spend_window_ms
                .map_or_else(|| "from config".into(), |ms| format!("{}s", ms / 1000)),
            settings
                .turn_limit
                .map_or_else(|| "none".into(), |n| n.to_string()),
            if settings.brake { "on" } else { "off" },
        );
        Ok(())
    })
}
