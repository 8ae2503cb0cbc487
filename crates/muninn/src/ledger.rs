//! `muninn ledger`: a Mind's ledger rows as a table, JSON, JSON Lines (what `muninn replay`
//! and `muninn import` read) or CSV, over a time range people can type (`--since 1h`).

use crate::connect::{ApiArgs, block_on};
use crate::output::{json, out, outln};
use crate::status::usd;
use crate::time::{HumanTime, clock_time};
use muninn_api::wire::{LedgerEntryBody, LedgerParams};

/// How `muninn ledger` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LedgerFormat {
    /// Aligned columns for people, and a total.
    Table,
    /// The API's answer, one JSON document (`{"rows": [{"id", "row"}…]}`).
    Json,
    /// One `LedgerRow` per line, as `muninn import` and `muninn replay` read.
    Jsonl,
    /// One row per request with a header line, for spreadsheets.
    Csv,
}

/// Arguments of `muninn ledger`.
#[derive(Debug, clap::Args)]
pub struct LedgerArgs {
    /// The Mind.
    mind: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: LedgerFormat,
    /// Rows at or after this time: a duration ago (`1h`, `2d`), a date (`2026-01-31`, UTC), an
    /// RFC 3339 time, or Unix ms.
    #[arg(long, alias = "from")]
    since: Option<HumanTime>,
    /// Rows before this time (same forms as --since).
    #[arg(long, alias = "to")]
    until: Option<HumanTime>,
    /// At most this many rows.
    #[arg(long)]
    limit: Option<i64>,
    #[command(flatten)]
    api: ApiArgs,
}

/// The CSV header of `muninn ledger --format csv`.
pub const CSV_HEADER: &str = "at_ms,at,mind,role,segment,turn,model,decision,cache_state,miss_cause,prefix_tokens,input_tokens,cache_write_5m_tokens,cache_write_1h_tokens,cache_read_tokens,output_tokens,cost_usd";

/// A CSV field: quoted when it holds a comma, a quote or a line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

fn csv_line(entry: &LedgerEntryBody) -> String {
    let row = &entry.row;
    let miss = row
        .miss_cause
        .map(|m| serde_json::to_value(m).unwrap_or_default())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6}",
        row.at_ms,
        clock_time(row.at_ms),
        field(&row.mind),
        field(&row.role),
        row.segment,
        row.turn,
        field(&row.model),
        field(&row.decision),
        field(&row.cache_state),
        miss,
        row.prefix_tokens,
        row.usage.input,
        row.usage.cache_write_5m,
        row.usage.cache_write_1h,
        row.usage.cache_read,
        row.usage.output,
        row.cost.0 as f64 / 1e6
    )
}

fn table(rows: &[LedgerEntryBody]) -> anyhow::Result<()> {
    outln!(
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
    )?;
    let mut total = 0;
    for entry in rows {
        let row = &entry.row;
        total += row.cost.0;
        outln!(
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
        )?;
    }
    outln!("{} rows, {}", rows.len(), usd(total))?;
    Ok(())
}

/// `muninn ledger`: the Mind's ledger rows.
pub fn ledger(args: LedgerArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    let now = jiff::Timestamp::now().as_millisecond();
    let params = LedgerParams {
        from_ms: args.since.map(|t| t.at(now)),
        to_ms: args.until.map(|t| t.at(now)),
        limit: args.limit,
        ..LedgerParams::default()
    };
    block_on(async move {
        if args.format == LedgerFormat::Jsonl {
            out!("{}", client.ledger_jsonl(&args.mind, &params).await?)?;
            return Ok(());
        }
        let response = client.ledger(&args.mind, &params).await?;
        match args.format {
            LedgerFormat::Json => json(&response),
            LedgerFormat::Csv => {
                outln!("{CSV_HEADER}")?;
                for entry in &response.rows {
                    outln!("{}", csv_line(entry))?;
                }
                Ok(())
            }
            LedgerFormat::Table | LedgerFormat::Jsonl => table(&response.rows),
        }
    })
}
