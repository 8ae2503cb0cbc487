//! `muninn replay --by day|session|model|kind|thread`: the replay split the way ccusage users
//! read their spend — one row per day (UTC), per session or per model — or the way the replay's
//! own model is checked (per kind of thread, per thread), with the recorded tokens and, per
//! policy, what that slice cost (recorded) or would have cost.

use crate::output::{json, outln};
use crate::time::day;
use muninn_core::cache::CacheRules;
use muninn_core::money::MicroUsd;
use muninn_core::price::ModelPrice;
use muninn_core::replay::{Assumptions, Plan, replay_traces};
use muninn_core::trace::{Trace, Usage};
use serde::Serialize;
use std::collections::BTreeMap;

/// What a breakdown's rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// One row per UTC day (of each request's time).
    Day,
    /// One row per session (a Claude Code session id, a Codex rollout, a Mind).
    Session,
    /// One row per model.
    Model,
    /// One row per kind of thread (main, subagent, compaction, mind): where the replay's model
    /// of a kind of traffic departs from what it was billed.
    Kind,
    /// One row per thread (a trace: session, thread and model).
    Thread,
}

/// One row of a breakdown.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Slice {
    /// The day, session or model.
    pub key: String,
    /// Requests recorded in it.
    pub requests: u64,
    /// Tokens as recorded.
    pub usage: Usage,
    /// Per policy, in the order asked: what the slice cost (`recorded`) or would have cost,
    /// micro-dollars (a ping or flush counts on the day it is sent).
    pub cost_micro_usd: BTreeMap<String, i64>,
}

/// The slice key of a request at `at_ms` in `trace`.
fn key(by: By, trace: &Trace, at_ms: i64) -> String {
    match by {
        By::Day => day(at_ms),
        By::Session => trace.session.clone(),
        By::Model => trace.model.clone(),
        By::Kind => trace.kind.as_str().to_string(),
        By::Thread => trace.id.clone(),
    }
}

/// The breakdown of `priced` under `plans`, counting only what happens at or after `since_ms`;
/// an error if a plan's cost saturated ([`crate::replay::refuse_saturated`]).
pub fn breakdown(
    by: By,
    plans: &[Plan],
    priced: &[(&Trace, &ModelPrice)],
    assumptions: &Assumptions,
    since_ms: i64,
) -> anyhow::Result<Vec<Slice>> {
    let rules = CacheRules::default();
    let mut slices: BTreeMap<String, Slice> = BTreeMap::new();
    for &(trace, _) in priced {
        for r in trace.requests.iter().filter(|r| r.at_ms >= since_ms) {
            let slice = slices.entry(key(by, trace, r.at_ms)).or_default();
            slice.requests += 1;
            slice.usage.add(&r.usage);
        }
    }
    for &plan in plans {
        let name = plan.to_string();
        // Each Mind's traces in time order, carrying what it learned (as the table does).
        let mut costs: BTreeMap<String, MicroUsd> = BTreeMap::new();
        let mut total = MicroUsd::ZERO;
        replay_traces(priced, plan, assumptions, &rules, &mut |i, step| {
            if step.at_ms >= since_ms {
                *costs.entry(key(by, priced[i].0, step.at_ms)).or_default() += step.cost;
                total += step.cost;
            }
        });
        // Every slice's cost, and the total line's sum of them, is at most this.
        crate::replay::refuse_saturated(total, &format!("plan {name}"))?;
        for (k, cost) in costs {
            let slice = slices.entry(k).or_default();
            *slice.cost_micro_usd.entry(name.clone()).or_default() += cost.0;
        }
    }
    Ok(slices
        .into_iter()
        .map(|(key, slice)| Slice { key, ..slice })
        .collect())
}

/// A breakdown as CSV: a header, then one line per slice (costs in dollars).
fn print_csv(slices: &[Slice], names: &[String], by: By) -> anyhow::Result<()> {
    let columns: Vec<String> = names.iter().map(|n| format!("{n}_usd")).collect();
    outln!(
        "{},requests,input_tokens,output_tokens,cache_write_tokens,cache_read_tokens,{}",
        format!("{by:?}").to_lowercase(),
        columns.join(",")
    )?;
    for s in slices {
        let costs: Vec<String> = names
            .iter()
            .map(|n| {
                let micro = s.cost_micro_usd.get(n).copied().unwrap_or(0);
                format!("{:.2}", micro as f64 / 1e6)
            })
            .collect();
        outln!(
            "{},{},{},{},{},{},{}",
            s.key,
            s.requests,
            s.usage.input,
            s.usage.output,
            s.usage.written(),
            s.usage.cache_read,
            costs.join(",")
        )?;
    }
    Ok(())
}

/// Prints a breakdown as a table (with a total line), JSON or CSV.
pub fn print(slices: &[Slice], plans: &[Plan], by: By, format: &str) -> anyhow::Result<()> {
    let names: Vec<String> = plans.iter().map(Plan::to_string).collect();
    let cost = |s: &Slice, n: &str| s.cost_micro_usd.get(n).copied().unwrap_or(0);
    let usd = |m: i64| format!("{:.2}", m as f64 / 1e6);
    match format {
        "json" => return json(&slices),
        "csv" => return print_csv(slices, &names, by),
        _ => {}
    }
    let width = slices
        .iter()
        .map(|s| s.key.len())
        .max()
        .unwrap_or(4)
        .clamp(10, 40);
    let head: Vec<String> = names.iter().map(|n| format!("{n:>13}")).collect();
    outln!(
        "{:<width$} {:>8} {:>10} {:>10} {:>12} {:>14} {}",
        format!("{by:?}").to_uppercase(),
        "REQUESTS",
        "INPUT",
        "OUTPUT",
        "CACHE WRITE",
        "CACHE READ",
        head.join(" ")
    )?;
    let mut total = Slice {
        key: "total".into(),
        ..Slice::default()
    };
    for s in slices {
        let costs: Vec<String> = names
            .iter()
            .map(|n| format!("{:>13}", usd(cost(s, n))))
            .collect();
        outln!(
            "{:<width$} {:>8} {:>10} {:>10} {:>12} {:>14} {}",
            s.key,
            s.requests,
            s.usage.input,
            s.usage.output,
            s.usage.written(),
            s.usage.cache_read,
            costs.join(" ")
        )?;
        total.requests += s.requests;
        total.usage.add(&s.usage);
        for n in &names {
            *total.cost_micro_usd.entry(n.clone()).or_default() += cost(s, n);
        }
    }
    let costs: Vec<String> = names
        .iter()
        .map(|n| format!("{:>13}", usd(cost(&total, n))))
        .collect();
    outln!(
        "{:<width$} {:>8} {:>10} {:>10} {:>12} {:>14} {}",
        "total",
        total.requests,
        total.usage.input,
        total.usage.output,
        total.usage.written(),
        total.usage.cache_read,
        costs.join(" ")
    )?;
    outln!(
        "(costs in dollars; a key is a UTC day, a session id, a model, a kind of thread or a thread)"
    )?;
    Ok(())
}
