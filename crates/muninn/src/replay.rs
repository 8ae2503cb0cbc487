//! `muninn replay`: every policy on the same transcripts, priced by the cache model, against the
//! hindsight optimum and against what was recorded.

use crate::InputArgs;
use crate::output::{out, outln};
use anyhow::Context;
use muninn_core::cache::{CacheRules, Ttl};
use muninn_core::money::{MicroUsd, Tokens};
use muninn_core::price::{PriceError, PriceTable};
use muninn_core::replay::{Assumptions, Plan, RunTotals, rehydration, replay_traces};
use muninn_core::split::{Part, part_of};
use muninn_core::trace::Trace;
use muninn_report::plot::{CostSeries, GapBucket, write_plot};
use muninn_report::{PolicyRow, ReplayReport, Unpriced};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The most tokens a token option may give: the importers' limit on one usage field (2^32).
/// Past it the replay's sums and products of these options overflowed (`--rehydrate-tokens
/// 18446744073709551615` panicked in a debug build); clap refuses it, naming the option.
const MAX_OPTION_TOKENS: u64 = 1 << 32;

/// The most seconds `--decide-before-s` may give, either way: a day, past any TTL. Its milliseconds
/// overflowed an `i64` from 9.2e15 s.
const MAX_DECIDE_BEFORE_S: i64 = 86_400;

/// Arguments of `muninn replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Policies to run: `all`, or one or more of recorded, ski-rental, predictive, rebuild, never,
    /// threshold:F, ceiling:N, keepalive:N, optimum (repeat the flag or separate with commas).
    /// Default: all (with --by: recorded, ski-rental and optimum).
    #[arg(long, value_delimiter = ',')]
    policy: Vec<String>,
    /// Break the replay down by UTC day, by session or by model (as ccusage does), one row each
    /// with its recorded tokens and each policy's cost.
    #[arg(long, value_enum)]
    by: Option<crate::breakdown::By>,
    /// Replay only the sessions of one part of the fixed split (`muninn_core::split`): `tuning`
    /// (the part rules may be chosen on) or `set-aside` (looked at only to report). Default:
    /// every session.
    #[arg(long, value_enum)]
    part: Option<SplitPart>,
    /// Count only what happens at or after this time (the sessions are still replayed from
    /// their start, so the cache state is right): `7d`, `2026-01-31`, an RFC 3339 time.
    #[arg(long)]
    since: Option<crate::time::HumanTime>,
    /// Read the Claude Code files both ways — muninn's and ccusage's — and report where the two
    /// totals differ (output tokens from a message's first streamed line; 1h writes priced as 5m).
    #[arg(long)]
    vs_ccusage: bool,
    /// Output format: table, json or csv.
    #[arg(long, default_value = "table")]
    format: String,
    /// Also draw each policy's cost against the recorded cost, and the idle-gap histogram (.svg
    /// or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// A price table (TOML) to use instead of the embedded one.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Head (tools + system) tokens [default: estimated per trace].
    #[arg(long, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    head_tokens: Option<Tokens>,
    /// Memory/summary tokens a refreshed segment starts with (and the flush writes) [default:
    /// the median rehydration the traces' own compactions measured, else 4000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    rehydrate_tokens: Option<Tokens>,
    /// Tokens of the flush instruction.
    #[arg(long, default_value_t = Assumptions::default().flush_prompt_tokens, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    flush_prompt_tokens: Tokens,
    /// Output tokens of the flush [default: the rehydration size]. With memory written as it
    /// happens, pass 0 here and for --flush-prompt-tokens: refreshes then need no flush request.
    #[arg(long, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    flush_output_tokens: Option<Tokens>,
    /// Uncached tail tokens of a keep-warm ping.
    #[arg(long, default_value_t = Assumptions::default().ping_tokens, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    ping_tokens: Tokens,
    /// Output tokens of a keep-warm ping: 0 for muninn's Anthropic backend, whose pings send
    /// `max_tokens: 0`; 1 for a backend that pings with `max_tokens: 1`.
    #[arg(long, default_value_t = Assumptions::default().ping_output_tokens, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    ping_output_tokens: Tokens,
    /// Requests a segment must hold before a voluntary refresh.
    #[arg(long, default_value_t = Assumptions::default().min_segment_requests)]
    min_segment: u32,
    /// Context ceiling in tokens [default: the model's context window].
    #[arg(long, value_parser = clap::value_parser!(u64).range(..=MAX_OPTION_TOKENS))]
    ceiling: Option<Tokens>,
    /// Seconds before a cache expiry at which the host decides (and pings).
    #[arg(
        long,
        default_value_t = Assumptions::default().decide_before_expiry_ms / 1000,
        value_parser = clap::value_parser!(i64).range(-MAX_DECIDE_BEFORE_S..=MAX_DECIDE_BEFORE_S)
    )]
    decide_before_s: i64,
    /// TTL tier to replay at: 5m or 1h [default: as recorded per trace].
    #[arg(long)]
    ttl: Option<Ttl>,
    /// TTL of the head's own breakpoint: 5m or 1h [default: the session's TTL].
    #[arg(long)]
    head_ttl: Option<Ttl>,
    /// Never clear old tool results (the `mask` action): the policies as they run on a backend
    /// that cannot. By default a policy may mask where the trace records tool-result sizes.
    #[arg(long)]
    no_mask: bool,
    /// Tool uses whose results a clear keeps (the latest).
    #[arg(long, default_value_t = Assumptions::default().mask_keep_tool_uses)]
    mask_keep_tool_uses: u32,
    /// Replay a muninn ledger export in closed loop: under the policy and parameters each row
    /// records, every decision the host took must come out the same and the cost within
    /// --tolerance, or the command fails.
    #[arg(long)]
    closed_loop: bool,
    /// The cost difference --closed-loop accepts, as a fraction (0.001 = 0.1%).
    #[arg(long, default_value_t = 0.001)]
    tolerance: f64,
    /// Goal: the default policy (ski-rental) costs at most this multiple of the optimum; missed,
    /// the command prints FAIL and exits non-zero.
    #[arg(long)]
    goal_vs_optimum: Option<f64>,
    /// Goal: the default policy costs at most this multiple of what was recorded.
    #[arg(long)]
    goal_vs_recorded: Option<f64>,
    /// Goal: at every cell of the sensitivity grid (each rehydration by each minimum segment)
    /// the default policy costs at most this multiple of `never` (no voluntary refresh).
    #[arg(long)]
    goal_vs_never: Option<f64>,
}

/// A part of the fixed split, as `--part` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitPart {
    /// The sessions rules may be tuned on.
    Tuning,
    /// The sessions set aside.
    SetAside,
}

impl From<SplitPart> for Part {
    fn from(p: SplitPart) -> Part {
        match p {
            SplitPart::Tuning => Part::Tuning,
            SplitPart::SetAside => Part::SetAside,
        }
    }
}

/// The plans `--policy` names (each value may hold several, comma-separated); none named, every
/// plan, or with `--by` the recorded, ski-rental and optimum ones.
fn plans_of(policy: &[String], by: Option<crate::breakdown::By>) -> anyhow::Result<Vec<Plan>> {
    let specs = match (policy, by) {
        ([], Some(_)) => vec!["recorded,ski-rental,optimum".to_string()],
        ([], None) => vec!["all".to_string()],
        (given, _) => given.to_vec(),
    };
    let specs: Vec<String> = specs
        .iter()
        .flat_map(|s| s.split(',').map(str::to_owned))
        .collect();
    parse_plans(&specs)
}

fn parse_plans(specs: &[String]) -> anyhow::Result<Vec<Plan>> {
    let mut plans = Vec::new();
    for spec in specs {
        let spec = spec.trim();
        if spec == "all" {
            plans.extend(Plan::all());
        } else {
            plans.push(spec.parse::<Plan>().map_err(anyhow::Error::msg)?);
        }
    }
    plans.dedup();
    Ok(plans)
}

/// Idle-gap buckets of the histogram, in seconds.
const GAP_EDGES_S: [u64; 10] = [0, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200];

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let plans = plans_of(&args.policy, args.by)?;
    if !matches!(args.format.as_str(), "table" | "json" | "csv") {
        anyhow::bail!(
            "unknown format {:?}: expected table, json or csv",
            args.format
        );
    }
    let prices = load_prices(args.prices.as_deref())?;
    if args.closed_loop {
        return crate::closed_loop::run(
            &args.input.paths,
            &prices,
            args.format == "json",
            args.tolerance,
        );
    }
    if args.vs_ccusage {
        let comparison = crate::ccusage::compare(&args.input.paths, &prices)?;
        return crate::ccusage::print(&comparison, &args.format);
    }
    let since_ms = args
        .since
        .map(|t| t.at(jiff::Timestamp::now().as_millisecond()));
    let import = import_part(&args.input, args.part)?;
    // Rehydration measured, not assumed: the traces' own compactions, unless given.
    let samples = rehydration::measured_rehydrations(&import.traces);
    let measured = rehydration::median(&samples);
    let assumptions = assumptions_of(&args, measured, samples.len());

    // Traces whose model has no price are left out, and the report says so.
    let (priced, unpriced) = priced_traces(&import.traces, &prices)?;

    if let Some(by) = args.by {
        let since = since_ms.unwrap_or(i64::MIN);
        let slices = crate::breakdown::breakdown(by, &plans, &priced, &assumptions, since)?;
        return crate::breakdown::print(&slices, &plans, by, &args.format);
    }
    let rules = CacheRules::default();
    let want_plot = args.plot.is_some();
    let results = run_plans(&plans, &priced, &assumptions, &rules, want_plot, since_ms);
    for r in &results {
        refuse_saturated(r.totals.cost, &format!("plan {}", r.plan))?;
    }

    let warnings = import.warnings.len();
    let report = report_of(
        &results,
        &assumptions,
        &priced,
        unpriced,
        warnings,
        since_ms,
    );
    let table = !matches!(args.format.as_str(), "json" | "csv");
    let grid = if table || args.goal_vs_never.is_some() {
        crate::sensitivity::grid(&priced, &assumptions, &rules, measured)?
    } else {
        Vec::new()
    };
    print(&report, &grid, measured, &args.format)?;
    if let Some(path) = &args.plot {
        plot(path, &results, &priced)?;
    }
    check_goals(&report, &args, crate::sensitivity::worst_vs_never(&grid))
}

/// Refuses a sum of costs that saturated ([`MicroUsd::saturated`]). Printed, it read as a
/// figure ($9,223,372,036,854.78, the same for every plan that reached it) and each ratio to it
/// as a measurement (1.000 between two such plans).
pub(crate) fn refuse_saturated(cost: MicroUsd, what: &str) -> anyhow::Result<()> {
    if cost.saturated() {
        anyhow::bail!(
            "{what} costs {} or more, the most muninn counts (an i64 of micro-dollars): the \
             prices (--prices) or the traces' token counts are past any real ones, and no figure \
             is printed",
            MicroUsd::MAX
        );
    }
    Ok(())
}

/// The traces of the paths given, only those of `part` if one is named.
fn import_part(
    input: &InputArgs,
    part: Option<SplitPart>,
) -> anyhow::Result<muninn_import::Import> {
    let mut import = input.import()?;
    if let Some(part) = part {
        // Before anything is measured from the traces (the rehydration): nothing of the other
        // part may inform this part's figures.
        import
            .traces
            .retain(|t| part_of(&t.session) == Part::from(part));
    }
    Ok(import)
}

/// Prints the report in `format`; a table is followed by the sensitivity grid.
fn print(
    report: &ReplayReport,
    grid: &[crate::sensitivity::Cell],
    measured: Option<Tokens>,
    format: &str,
) -> anyhow::Result<()> {
    match format {
        "json" => outln!("{}", serde_json::to_string_pretty(report)?)?,
        "csv" => out!("{}", report.csv())?,
        _ => {
            out!("{}", report.table())?;
            crate::sensitivity::print(grid, measured)?;
        }
    }
    Ok(())
}

/// A trace with its model's price.
type Priced<'a> = (&'a Trace, &'a muninn_core::price::ModelPrice);

/// The largest price table read. The embedded one is a few KiB; past this a path names
/// something that is no price table (`--prices /dev/zero` was read until memory ran out).
const MAX_PRICES_BYTES: u64 = 1 << 20;

/// The price table in `path` (TOML), else the embedded one. Every command that takes
/// `--prices` (or `prices =`) reads it through here. Only a regular file is read, opened as the
/// import opens its files (never blocking): a named pipe there was opened and waited on for a
/// writer, for ever, with nothing printed.
pub(crate) fn load_prices(path: Option<&std::path::Path>) -> anyhow::Result<PriceTable> {
    Ok(match path {
        Some(path) => {
            let text = muninn_fs::read_text_limited(path, MAX_PRICES_BYTES, "a price table")
                .with_context(|| format!("reading {}", path.display()))?;
            PriceTable::parse(&text, &path.display().to_string())?
        }
        None => PriceTable::embedded(),
    })
}

/// The replay's assumptions from the command line, the rehydration measured from the traces'
/// compactions (the median of `samples`) unless one was given (and the choice said on stderr).
fn assumptions_of(args: &ReplayArgs, measured: Option<Tokens>, samples: usize) -> Assumptions {
    let assumptions = Assumptions {
        head_tokens: args.head_tokens,
        rehydrate_tokens: args
            .rehydrate_tokens
            .or(measured)
            .unwrap_or(Assumptions::default().rehydrate_tokens),
        flush_prompt_tokens: args.flush_prompt_tokens,
        flush_output_tokens: args.flush_output_tokens,
        ping_tokens: args.ping_tokens,
        ping_output_tokens: args.ping_output_tokens,
        min_segment_requests: args.min_segment,
        ceiling_tokens: args.ceiling,
        decide_before_expiry_ms: args.decide_before_s * 1000,
        ttl: args.ttl,
        head_ttl: args.head_ttl,
        mask: !args.no_mask,
        mask_keep_tool_uses: args.mask_keep_tool_uses,
    };
    if args.rehydrate_tokens.is_none() {
        match measured {
            Some(m) => eprintln!(
                "rehydration: {m} tokens, the median of {samples} compactions measured in these traces"
            ),
            None => eprintln!(
                "rehydration: no compaction in these traces to measure; assuming {} tokens",
                assumptions.rehydrate_tokens
            ),
        }
    }
    assumptions
}

/// The traces with their model's price, and the requests left out per unpriced model (warned
/// about on stderr).
fn priced_traces<'a>(
    traces: &'a [Trace],
    prices: &'a PriceTable,
) -> anyhow::Result<(Vec<Priced<'a>>, BTreeMap<String, u64>)> {
    let mut unpriced: BTreeMap<String, u64> = BTreeMap::new();
    let mut priced = Vec::new();
    for trace in traces {
        match prices.model(&trace.model) {
            Ok(price) => priced.push((trace, price)),
            Err(PriceError::UnknownModel { model }) => {
                *unpriced.entry(model).or_default() += trace.requests.len() as u64
            }
            Err(e) => return Err(e.into()),
        }
    }
    for (model, n) in &unpriced {
        eprintln!(
            "warning: model {model:?} is not in the price table; its {n} requests are left out (see --prices)"
        );
    }
    Ok((priced, unpriced))
}

/// The report of the plans' results: each plan's totals beside the optimum's and recorded's.
fn report_of(
    results: &[PlanResult],
    assumptions: &Assumptions,
    priced: &[(&Trace, &muninn_core::price::ModelPrice)],
    unpriced: BTreeMap<String, u64>,
    warnings: usize,
    since_ms: Option<i64>,
) -> ReplayReport {
    let cost_of = |plan: Plan| {
        results
            .iter()
            .find(|r| r.plan == plan)
            .map(|r| r.totals.cost)
    };
    let (optimum, recorded) = (cost_of(Plan::Optimum), cost_of(Plan::Recorded));
    let ratio = |c: MicroUsd, base: Option<MicroUsd>| {
        base.filter(|b| b.0 > 0).map(|b| c.0 as f64 / b.0 as f64)
    };
    let rows = results
        .iter()
        .map(|r| {
            row(
                r.plan,
                &r.totals,
                ratio(r.totals.cost, optimum),
                ratio(r.totals.cost, recorded),
            )
        })
        .collect();
    ReplayReport {
        assumptions: assumptions.to_string(),
        traces: priced.len() as u64,
        requests: priced
            .iter()
            .flat_map(|(t, _)| &t.requests)
            .filter(|r| since_ms.is_none_or(|s| r.at_ms >= s))
            .count() as u64,
        warnings: warnings as u64,
        unpriced: unpriced
            .into_iter()
            .map(|(model, requests)| Unpriced { model, requests })
            .collect(),
        rows,
    }
}

/// Draws each plan's cumulative cost and the traces' idle-gap histogram to `path`.
fn plot(
    path: &std::path::Path,
    results: &[PlanResult],
    priced: &[(&Trace, &muninn_core::price::ModelPrice)],
) -> anyhow::Result<()> {
    let series: Vec<CostSeries> = results
        .iter()
        .map(|r| CostSeries {
            label: r.plan.to_string(),
            points: cumulative(&r.timeline),
        })
        .collect();
    write_plot(
        path,
        "muninn replay: each policy's cost against the recorded cost",
        &series,
        &gap_histogram(priced),
    )
    .with_context(|| format!("drawing {}", path.display()))?;
    eprintln!("plot written to {}", path.display());
    Ok(())
}

/// Checks the default policy's ratios against the goals given: PASS or FAIL for each, an error
/// (a non-zero exit) if one is missed or cannot be measured.
fn check_goals(
    report: &ReplayReport,
    args: &ReplayArgs,
    worst: Option<crate::sensitivity::Cell>,
) -> anyhow::Result<()> {
    let default = Plan::Online(muninn_core::decide::Policy::SkiRental).to_string();
    let row = report.rows.iter().find(|r| r.policy == default);
    let mut failed = 0;
    for (goal, what, ratio) in [
        (
            args.goal_vs_optimum,
            "optimum",
            row.and_then(|r| r.ratio_to_optimum),
        ),
        (
            args.goal_vs_recorded,
            "recorded",
            row.and_then(|r| r.ratio_to_recorded),
        ),
        (
            args.goal_vs_never,
            "never at every rehydration and minimum segment",
            worst.map(|c| c.vs_never),
        ),
    ] {
        let Some(goal) = goal else { continue };
        match ratio {
            Some(ratio) if ratio <= goal => {
                outln!("PASS {default} ÷ {what} = {ratio:.3} (goal ≤ {goal:.3})")?
            }
            Some(ratio) => {
                failed += 1;
                outln!("FAIL {default} ÷ {what} = {ratio:.3} (goal ≤ {goal:.3})")?;
            }
            None => {
                failed += 1;
                outln!("FAIL {default} ÷ {what}: not measured (run both plans)")?;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("FAIL: {failed} goal(s) missed");
    }
    Ok(())
}

struct PlanResult {
    plan: Plan,
    totals: RunTotals,
    /// `(Unix ms, cost)` of every priced request, when a plot was asked for.
    timeline: Vec<(i64, MicroUsd)>,
}

/// Runs every plan over every trace, spreading plans over the machine's cores.
fn run_plans(
    plans: &[Plan],
    priced: &[(&Trace, &muninn_core::price::ModelPrice)],
    assumptions: &Assumptions,
    rules: &CacheRules,
    want_timeline: bool,
    since_ms: Option<i64>,
) -> Vec<PlanResult> {
    // Each trace's TTL, judged once: `whole_trace_ttl` reads every request of its trace, and
    // judged at every step it made a replay quadratic in a session's length (a session of
    // 100,000 requests ran for more than ten minutes).
    let ttls: Vec<Ttl> = priced
        .iter()
        .map(|(trace, _)| assumptions.ttl.unwrap_or_else(|| trace.whole_trace_ttl()))
        .collect();
    let run_one = |plan: Plan| -> PlanResult {
        let mut totals = RunTotals::default();
        let mut timeline = Vec::new();
        // With --since the whole trace is replayed (the cache state needs its history) and only
        // the steps in the window are counted. Each Mind's traces run in time order, carrying
        // what it learned of its refreshes and pings.
        let mut kept = RunTotals::default();
        let whole = replay_traces(priced, plan, assumptions, rules, &mut |i, step| {
            if since_ms.is_some_and(|s| step.at_ms < s) {
                return;
            }
            kept.record(step, ttls[i]);
            if want_timeline {
                timeline.push((step.at_ms, step.cost));
            }
        });
        if since_ms.is_some() {
            totals = kept;
        } else {
            for t in &whole {
                totals.add(t);
            }
        }
        PlanResult {
            plan,
            totals,
            timeline,
        }
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(plans.len().max(1));
    let mut results: Vec<Option<PlanResult>> = (0..plans.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let chunks: Vec<Vec<(usize, Plan)>> = (0..workers)
            .map(|w| {
                plans
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|(i, _)| i % workers == w)
                    .collect()
            })
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|(i, p)| (i, run_one(p)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in handles {
            if let Ok(done) = handle.join() {
                for (i, r) in done {
                    results[i] = Some(r);
                }
            }
        }
    });
    results.into_iter().flatten().collect()
}

fn row(plan: Plan, t: &RunTotals, to_optimum: Option<f64>, to_recorded: Option<f64>) -> PolicyRow {
    PolicyRow {
        policy: plan.to_string(),
        cost_micro_usd: t.cost.0,
        ratio_to_optimum: to_optimum,
        ratio_to_recorded: to_recorded,
        cache_hit_ratio: t.hit_ratio(),
        long_gap_write_share: t.long_gap_write_share(),
        requests: t.requests,
        pings: t.pings,
        flushes: t.flushes,
        refreshes: t.refreshes,
        masks: t.masks,
        cleared_tokens: t.cleared_tokens,
        input_tokens: t.usage.input,
        cache_write_tokens: t.usage.written(),
        cache_read_tokens: t.usage.cache_read,
        output_tokens: t.usage.output,
    }
}

/// Sorts a plan's priced requests by time and accumulates them, keeping at most ~2,000 points.
fn cumulative(timeline: &[(i64, MicroUsd)]) -> Vec<(i64, f64)> {
    let mut sorted = timeline.to_vec();
    sorted.sort_by_key(|&(t, _)| t);
    let stride = (sorted.len() / 2000).max(1);
    let mut total = 0i64;
    let mut points = Vec::with_capacity(sorted.len() / stride + 2);
    for (i, &(t, c)) in sorted.iter().enumerate() {
        total += c.0;
        if i % stride == 0 || i + 1 == sorted.len() {
            points.push((t, total as f64 / 1e6));
        }
    }
    points
}

/// The recorded idle gaps (per thread) and the cache writes of the request after each.
fn gap_histogram(priced: &[(&Trace, &muninn_core::price::ModelPrice)]) -> Vec<GapBucket> {
    let mut buckets: Vec<GapBucket> = GAP_EDGES_S
        .iter()
        .enumerate()
        .map(|(i, &from)| GapBucket {
            from_s: from,
            to_s: GAP_EDGES_S.get(i + 1).copied().unwrap_or(u64::MAX),
            requests: 0,
            write_tokens: 0,
        })
        .collect();
    for (trace, _) in priced {
        for pair in trace.requests.windows(2) {
            let gap_s = ((pair[1].at_ms - pair[0].at_ms).max(0) / 1000) as u64;
            let i = GAP_EDGES_S
                .partition_point(|&edge| edge <= gap_s)
                .saturating_sub(1);
            buckets[i].requests += 1;
            buckets[i].write_tokens += pair[1].usage.written();
        }
    }
    buckets
}
