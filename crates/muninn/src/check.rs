//! `muninn check-cache`: the cache model against recorded usage, beside the naive TTL rule.

use crate::InputArgs;
use crate::output::outln;
use muninn_core::validate::{Aggregate, ValidateOptions, validate};

/// Arguments of `muninn check-cache`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    input: InputArgs,
    /// `table` (figures and disagreement classes) or `json` (the full report, one row per request).
    #[arg(long, default_value = "table")]
    format: String,
    /// Also list every request the cache model got wrong.
    #[arg(long)]
    disagreements: bool,
    /// Keep each session's tools head private (the default shares it across sessions, as the
    /// provider's organisation-wide cache does).
    #[arg(long)]
    no_shared_head: bool,
}

pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let import = args.input.import()?;
    let options = ValidateOptions {
        share_tools_head: !args.no_shared_head,
        ..ValidateOptions::default()
    };
    let report = validate(&import.traces, &options);
    match args.format.as_str() {
        "json" => outln!("{}", serde_json::to_string_pretty(&report)?)?,
        "table" => {
            outln!(
                "{:<24} {:>10} {:>12} {:>14}",
                "predictor / threads",
                "requests",
                "agreement",
                "read error"
            )?;
            let line = |label: &str, a: &Aggregate| {
                outln!(
                    "{label:<24} {:>10} {:>11.2}% {:>13.3}%",
                    a.requests,
                    100.0 * a.agreement,
                    100.0 * a.read_error
                )
            };
            line("cache model / main", &report.model.main)?;
            line("cache model / all", &report.model.all)?;
            line("naive TTL rule / main", &report.naive.main)?;
            line("naive TTL rule / all", &report.naive.all)?;
            outln!()?;
            outln!("disagreements by class (all threads): cache model | naive rule")?;
            let mut classes: Vec<_> = report
                .model
                .all
                .disagreements
                .keys()
                .chain(report.naive.all.disagreements.keys())
                .collect();
            classes.sort();
            classes.dedup();
            for class in classes {
                outln!(
                    "  {:<24} {:>5} | {:>5}",
                    format!("{class:?}"),
                    report
                        .model
                        .all
                        .disagreements
                        .get(class)
                        .copied()
                        .unwrap_or(0),
                    report
                        .naive
                        .all
                        .disagreements
                        .get(class)
                        .copied()
                        .unwrap_or(0)
                )?;
            }
            if args.disagreements {
                outln!()?;
                for r in report.rows.iter().filter(|r| !r.cache_model.agree) {
                    outln!(
                        "{} #{} gap {} s: recorded read {} ({:?}), model {} ({:?}) — {:?}",
                        r.trace,
                        r.index,
                        r.gap_ms.map_or(0, |g| g / 1000),
                        r.recorded_read,
                        r.recorded_class,
                        r.cache_model.read,
                        r.cache_model.class,
                        r.cache_model.disagreement
                    )?;
                }
            }
        }
        other => anyhow::bail!("unknown format {other:?}: expected table or json"),
    }
    Ok(())
}
