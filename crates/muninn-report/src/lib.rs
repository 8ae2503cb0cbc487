//! # muninn-report
//!
//! What `muninn replay` shows a person: the summary table, JSON and CSV, and the plots (cumulative
//! cost per policy over time; the idle-gap histogram with the cache writes that follow each gap).
//! The data types here are the report's wire format (`--format json`); the rendering is pure
//! except [`plot::write_plot`], which writes a file.

pub mod plot;

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One policy's line of the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRow {
    /// The policy (`recorded`, `ski-rental`, `optimum`, …).
    pub policy: String,
    /// Total cost, integer micro-dollars.
    pub cost_micro_usd: i64,
    /// Cost divided by the optimum's (absent if the optimum was not run).
    pub ratio_to_optimum: Option<f64>,
    /// Cost divided by what was recorded (absent if `recorded` was not run).
    pub ratio_to_recorded: Option<f64>,
    /// Cache reads over all prompt tokens.
    pub cache_hit_ratio: f64,
    /// Share of cache writes that followed an idle gap longer than the TTL.
    pub long_gap_write_share: f64,
    /// The trace's requests.
    pub requests: u64,
    /// Keep-warm pings.
    pub pings: u64,
    /// Memory flushes.
    pub flushes: u64,
    /// New segments.
    pub refreshes: u64,
    /// Requests sent with a tool-result clear (the `mask` action).
    #[serde(default)]
    pub masks: u64,
    /// Tool-result tokens those clears removed.
    #[serde(default)]
    pub cleared_tokens: u64,
    /// Tokens: uncached input.
    pub input_tokens: u64,
    /// Tokens written (5m + 1h).
    pub cache_write_tokens: u64,
    /// Tokens read.
    pub cache_read_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// A model the price table did not know, and how many requests it held (they are left out of
/// every figure, and said so).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unpriced {
    /// The model name.
    pub model: String,
    /// Requests skipped.
    pub requests: u64,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The counterfactual assumptions, as printed.
    pub assumptions: String,
    /// Traces replayed.
    pub traces: u64,
    /// Requests replayed.
    pub requests: u64,
    /// Import warnings (malformed lines and the like).
    pub warnings: u64,
    /// Models left out for want of a price.
    pub unpriced: Vec<Unpriced>,
    /// One row per policy, in the order asked.
    pub rows: Vec<PolicyRow>,
}

impl ReplayReport {
    /// The plain-text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} traces, {} requests replayed{}",
            self.traces,
            self.requests,
            if self.warnings > 0 {
                format!(" ({} import warnings)", self.warnings)
            } else {
                String::new()
            }
        );
        for u in &self.unpriced {
            let _ = writeln!(
                out,
                "not priced: model {:?} ({} requests) — add it to the price table",
                u.model, u.requests
            );
        }
        let _ = writeln!(out, "assumptions: {}", self.assumptions);
        let _ = writeln!(out);
        let header = [
            "policy",
            "cost $",
            "÷ optimum",
            "÷ recorded",
            "hit ratio",
            "long-gap writes",
            "pings",
            "flushes",
            "refreshes",
            "masks",
        ];
        let rows: Vec<[String; 10]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.policy.clone(),
                    format!("{:.4}", r.cost_micro_usd as f64 / 1e6),
                    r.ratio_to_optimum.map_or("-".into(), |x| format!("{x:.3}")),
                    r.ratio_to_recorded
                        .map_or("-".into(), |x| format!("{x:.3}")),
                    format!("{:.3}", r.cache_hit_ratio),
                    format!("{:.1}%", r.long_gap_write_share * 100.0),
                    r.pings.to_string(),
                    r.flushes.to_string(),
                    r.refreshes.to_string(),
                    r.masks.to_string(),
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i == 0 {
                    let _ = write!(s, "{cell:<w$}");
                } else {
                    let _ = write!(s, "  {cell:>w$}");
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(&header.map(String::from)));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row));
        }
        out
    }

    /// CSV: one header line, one line per policy.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "policy,cost_usd,ratio_to_optimum,ratio_to_recorded,cache_hit_ratio,long_gap_write_share,requests,pings,flushes,refreshes,input_tokens,cache_write_tokens,cache_read_tokens,output_tokens,masks,cleared_tokens\n",
        );
        for r in &self.rows {
            let opt = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.6}"));
            let _ = writeln!(
                out,
                "{},{:.6},{},{},{:.6},{:.6},{},{},{},{},{},{},{},{},{},{}",
                r.policy,
                r.cost_micro_usd as f64 / 1e6,
                opt(r.ratio_to_optimum),
                opt(r.ratio_to_recorded),
                r.cache_hit_ratio,
                r.long_gap_write_share,
                r.requests,
                r.pings,
                r.flushes,
                r.refreshes,
                r.input_tokens,
                r.cache_write_tokens,
                r.cache_read_tokens,
                r.output_tokens,
                r.masks,
                r.cleared_tokens
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn report() -> ReplayReport {
        let row = |policy: &str, cost_micro_usd, ratio_to_optimum, ratio_to_recorded| PolicyRow {
            policy: policy.to_string(),
            cost_micro_usd,
            ratio_to_optimum,
            ratio_to_recorded,
            cache_hit_ratio: 0.8125,
            long_gap_write_share: 0.4,
            requests: 10,
            pings: 2,
            flushes: 1,
            refreshes: 0,
            masks: 1,
            cleared_tokens: 900,
            input_tokens: 100,
            cache_write_tokens: 2_000,
            cache_read_tokens: 8_000,
            output_tokens: 50,
        };
        ReplayReport {
            assumptions: "5m TTL".to_string(),
            traces: 1,
            requests: 10,
            warnings: 3,
            unpriced: vec![Unpriced {
                model: "mystery".to_string(),
                requests: 4,
            }],
            rows: vec![
                row("recorded", 1_500_000, Some(1.5), Some(1.0)),
                row("optimum", 1_000_000, Some(1.0), Some(2.0 / 3.0)),
                row("ski-rental", 12_345_678, None, None),
            ],
        }
    }

    #[test]
    fn table_aligns_columns_and_says_what_was_left_out() {
        let expected = "\
1 traces, 10 requests replayed (3 import warnings)
not priced: model \"mystery\" (4 requests) — add it to the price table
assumptions: 5m TTL

policy       cost $  ÷ optimum  ÷ recorded  hit ratio  long-gap writes  pings  flushes  refreshes  masks
recorded     1.5000      1.500       1.000      0.812            40.0%      2        1          0      1
optimum      1.0000      1.000       0.667      0.812            40.0%      2        1          0      1
ski-rental  12.3457          -           -      0.812            40.0%      2        1          0      1
";
        assert_eq!(report().table(), expected);
    }

    #[test]
    fn csv_has_one_line_per_policy_and_blank_missing_ratios() {
        let expected = "\
policy,cost_usd,ratio_to_optimum,ratio_to_recorded,cache_hit_ratio,long_gap_write_share,requests,pings,flushes,refreshes,input_tokens,cache_write_tokens,cache_read_tokens,output_tokens,masks,cleared_tokens
recorded,1.500000,1.500000,1.000000,0.812500,0.400000,10,2,1,0,100,2000,8000,50,1,900
optimum,1.000000,1.000000,0.666667,0.812500,0.400000,10,2,1,0,100,2000,8000,50,1,900
ski-rental,12.345678,,,0.812500,0.400000,10,2,1,0,100,2000,8000,50,1,900
";
        assert_eq!(report().csv(), expected);
    }
}
