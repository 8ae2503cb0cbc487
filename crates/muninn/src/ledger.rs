//! `muninn ledger`: a Mind's ledger rows as a table, JSON, JSON Lines (what `muninn replay`
//! and `muninn import` read) or CSV, over a time range people can type (`--since 1h`).

use crate::connect::{ApiArgs, block_on};
use crate::output::{out, outln};
use crate::status::usd;
use crate::time::{HumanTime, clock_time};
use muninn_api::client::ledger_line;
use muninn_api::wire::{LedgerEntryBody, LedgerParams};
use muninn_core::ledger::ATTEMPT_LOST;

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

/// The table's header line.
fn table_header() -> anyhow::Result<()> {
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
    Ok(())
}

/// What the table says of an `attempt_lost` row, after its decision: the next holder wrote it
/// at the cache model's estimate, and a host killed after recording the delivery but before
/// sending it leaves the same trace (`runtime/lost.rs` in muninn-host).
const ESTIMATED: &str = "(estimate; may not have been sent or billed)";

/// A row of the table: a lost request's is labelled as the estimate it is, as its JSON row's
/// event says, so a reader does not take it for a bill.
fn table_line(entry: &LedgerEntryBody) -> String {
    let row = &entry.row;
    let label = if row.decision == ATTEMPT_LOST {
        format!("{} {ESTIMATED}", row.decision)
    } else {
        row.decision.clone()
    };
    format!(
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
        label
    )
}

/// The table's last line: the rows and their cost, and how much of it is `estimated` (the
/// `attempt_lost` rows'), when some is.
fn table_total(rows: u64, total: i64, estimated: i64) -> String {
    let mut line = format!("{rows} rows, {}", usd(total));
    if estimated != 0 {
        line.push_str(&format!(
            " ({} of it estimated: requests lost with their host, which may not have been \
             sent or billed)",
            usd(estimated)
        ));
    }
    line
}

/// One entry of `--format json`'s `rows` array, as `serde_json::to_string_pretty` of the whole
/// answer lays it out: its own pretty form indented two levels (JSON strings hold no raw line
/// breaks, so indenting every line is exact), after the array's opening or the comma.
fn json_entry(entry: &LedgerEntryBody, first: bool) -> anyhow::Result<String> {
    let mut text = String::from(if first { "{\n  \"rows\": [\n" } else { ",\n" });
    let pretty = serde_json::to_string_pretty(entry)?;
    for (i, line) in pretty.lines().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str("    ");
        text.push_str(line);
    }
    Ok(text)
}

/// What closes `--format json`'s document after `rows` entries.
fn json_end(rows: u64) -> &'static str {
    if rows == 0 {
        "{\n  \"rows\": []\n}\n"
    } else {
        "\n  ]\n}\n"
    }
}

/// `muninn ledger`: the Mind's ledger rows, printed a page at a time as they are read (a
/// ledger of millions of rows was collected whole in memory before its first line was
/// printed); each format's output is what it was when printed at once.
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
        let mut pages = client.ledger_pages(&args.mind, &params);
        match args.format {
            LedgerFormat::Table => table_header()?,
            LedgerFormat::Csv => outln!("{CSV_HEADER}")?,
            LedgerFormat::Json | LedgerFormat::Jsonl => {}
        }
        let (mut rows, mut total, mut estimated) = (0u64, 0i64, 0i64);
        while let Some(page) = pages.next().await? {
            for entry in &page {
                match args.format {
                    LedgerFormat::Table => outln!("{}", table_line(entry))?,
                    LedgerFormat::Csv => outln!("{}", csv_line(entry))?,
                    LedgerFormat::Jsonl => outln!("{}", ledger_line(entry)?)?,
                    LedgerFormat::Json => out!("{}", json_entry(entry, rows == 0)?)?,
                }
                rows += 1;
                total += entry.row.cost.0;
                if entry.row.decision == ATTEMPT_LOST {
                    estimated += entry.row.cost.0;
                }
            }
        }
        match args.format {
            LedgerFormat::Table => outln!("{}", table_total(rows, total, estimated))?,
            LedgerFormat::Json => out!("{}", json_end(rows))?,
            LedgerFormat::Csv | LedgerFormat::Jsonl => {}
        }
        Ok(())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{json_end, json_entry, table_line, table_total};
    use muninn_api::wire::{LedgerEntryBody, LedgerResponse};

    /// A row at `decision`, costing five cents.
    fn entry(decision: &str) -> LedgerEntryBody {
        let row = serde_json::from_value(serde_json::json!({
            "mind": "vala", "role": "persona", "segment": 2, "turn": 7, "at_ms": 1000,
            "idle_gap_ms": 0, "model": "m", "prefix_tokens": 5, "rehydration_tokens": 0,
            "usage": {"input": 0, "cache_write_5m": 2, "cache_write_1h": 0, "cache_read": 3, "output": 0},
            "raw_usage": null, "cost": 50000, "predicted_read": 3, "predicted_write": 2,
            "cache_state": "warm", "miss_cause": null, "decision": decision, "boundary": true,
            "events": [], "decided": null, "provider_miss": null
        }))
        .unwrap();
        LedgerEntryBody { id: 1, row }
    }

    /// A request lost with its host is ledgered at the cache model's estimate by the next
    /// holder, and a kill before its send leaves the same trace: the table says so on its row
    /// and in its total, as the JSON row's event does — not as a bill like the others.
    #[test]
    fn the_table_labels_a_lost_requests_row_and_its_cost_as_an_estimate() {
        let lost = table_line(&entry("attempt_lost"));
        assert!(
            lost.ends_with("attempt_lost (estimate; may not have been sent or billed)"),
            "{lost}"
        );
        let billed = table_line(&entry("append:Warm"));
        assert!(billed.ends_with("  append:Warm"), "{billed}");
        assert_eq!(
            table_total(3, 150_000, 50_000),
            "3 rows, $0.1500 ($0.0500 of it estimated: requests lost with their host, \
             which may not have been sent or billed)"
        );
        assert_eq!(table_total(3, 150_000, 0), "3 rows, $0.1500");
    }

    /// `--format json`, printed an entry at a time, is byte for byte the pretty document of the
    /// whole answer it printed before, with no rows, one, or several.
    #[test]
    fn json_printed_by_entry_is_the_whole_documents_pretty_form() {
        let row: muninn_core::ledger::LedgerRow = serde_json::from_value(serde_json::json!({
            "mind": "vala", "role": "persona", "segment": 2, "turn": 7, "at_ms": 1000,
            "idle_gap_ms": 0, "model": "m \"quoted\"\nline", "prefix_tokens": 1,
            "rehydration_tokens": 0,
            "usage": {"input": 1, "cache_write_5m": 2, "cache_write_1h": 0, "cache_read": 3, "output": 4},
            "raw_usage": {"nested": {"a": [1, 2]}}, "cost": 5, "predicted_read": 0,
            "predicted_write": 0, "cache_state": "warm", "miss_cause": null,
            "decision": "append", "boundary": false, "events": [], "decided": null,
            "provider_miss": null
        }))
        .unwrap();
        for n in [0, 1, 3] {
            let rows: Vec<LedgerEntryBody> = (0..n)
                .map(|id| LedgerEntryBody {
                    id,
                    row: row.clone(),
                })
                .collect();
            let mut printed = String::new();
            for (i, entry) in rows.iter().enumerate() {
                printed.push_str(&json_entry(entry, i == 0).unwrap());
            }
            printed.push_str(json_end(rows.len() as u64));
            let whole = serde_json::to_string_pretty(&LedgerResponse { rows }).unwrap() + "\n";
            assert_eq!(printed, whole, "{n} rows");
        }
    }
}
