//! Replay throughput and the optimum's scaling, on synthetic traces ([`muninn_workload::synth`]).
//!
//! `cargo bench -p muninn-core --bench replay` prints four tables:
//!
//! 1. **Throughput.** Every plan of [`Plan::all`] replays one synthetic trace of 1,000,000
//!    requests. Plans are run round-robin three times (plan A, B, …, A, B, …) so that every plan
//!    sees the same machine state — turbo, other builders on a shared box — and the median of the
//!    three is reported. The bench is single-threaded, so requests/s is a per-core figure; the
//!    machine-wide column multiplies by `nproc` (an upper bound: `muninn replay` runs plans in
//!    parallel, one per core).
//! 2. **Optimum scaling.** `optimum::plan` alone, and the full optimum replay (reconstruct + plan +
//!    execute), on traces of 10k, 100k and 1M requests. Smaller traces are repeated so that every
//!    size does the same 1M requests of work per measurement; time per request should rise slowly
//!    (n log n: ×1.25 from 10k to 100k, ×1.2 from 100k to 1M), not tenfold.
//!
//! 3. **The optimum with clears.** The mask program ([`optimum::mask_program`]) on synthetic
//!    traces whose tool loops' growth is tool results, with and without dropping dominated
//!    states, interleaved: time, states advanced and the most alive at once. The two must return
//!    the same plan to the micro-dollar; the bench prints FAIL and exits non-zero if not.
//!
//! 4. **A Mind's sessions.** [`replay_traces`] under the default policy over one Mind of 1,000
//!    and of 10,000 short sessions (20 requests each, some overlapping), each session starting
//!    with what the earlier ones taught: time per session at each size and their ratio. Linear
//!    work keeps the ratio near 1 (n log n: about 1.3); a ratio above
//!    [`MAX_SESSION_SCALING`] prints FAIL and the bench exits non-zero (summing every earlier
//!    session's lesson again for each made it about 10).
//!
//! Without `--bench` (as `cargo test --benches` runs it) the sizes shrink a hundredfold (the
//! Mind's sessions tenfold: 100 and 1,000) so that the smoke run takes a few seconds.
//! `MUNINN_BENCH_REQUESTS` overrides the large size. A name after `--` runs only the tables
//! whose name holds it: `throughput`, `optimum`, `clears`, `minds` (`cargo bench -p muninn-core
//! --bench replay -- minds`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_core::cache::CacheRules;
use muninn_core::decide::Policy;
use muninn_core::money::MicroUsd;
use muninn_core::optimum;
use muninn_core::price::ModelPrice;
use muninn_core::price::PriceTable;
use muninn_core::replay::{
    Assumptions, Plan, ReplayConfig, reconstruct, replay_trace, replay_traces,
};
use muninn_core::trace::{ToolResults, Trace};
use muninn_workload::synth::{SynthParams, session};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SEED: u64 = 0x6d75_6e69_6e6e; // "muninn"
const ROUNDS: usize = 3;
/// The most a Mind's time per session may grow from 1,000 to 10,000 sessions before the bench
/// calls it super-linear: linear work gives 1, n log n about 1.3, quadratic 10.
const MAX_SESSION_SCALING: f64 = 3.0;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|a| a == "--bench");
    // `cargo bench -- NAME` passes NAME on: run only the tables whose name holds it.
    let filter: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let wanted = |table: &str| filter.is_empty() || filter.iter().any(|f| table.contains(f));
    let large: usize = std::env::var("MUNINN_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(if full { 1_000_000 } else { 10_000 });
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());

    let params = SynthParams::default();
    let prices = PriceTable::embedded();
    let price = prices
        .model(&params.model)
        .expect("the synthetic model is priced");
    let assumptions = Assumptions::default();
    let rules = CacheRules::default();
    let config = ReplayConfig {
        price,
        assumptions: &assumptions,
        rules: &rules,
    };
    print_setup(full, nproc, &params, &config);

    let bench_started = Instant::now();
    if wanted("throughput") || wanted("optimum") {
        let trace = session(SEED, large, &params);
        let generated = bench_started.elapsed();
        describe(&trace, generated);
        if wanted("throughput") {
            throughput_table(&trace, &config, nproc);
        }
    }
    if wanted("optimum") {
        optimum_scaling_table(large, &params, &config);
    }
    let clears_ok = !wanted("clears") || mask_program_table(full, &config, &assumptions, &params);
    let minds_ok = !wanted("minds") || minds_table(full, &params, &config);
    if let Some(peak) = peak_rss_mib() {
        println!();
        println!("peak RSS of this bench process: {peak:.0} MiB");
    }
    println!("load average at end: {}", loadavg());
    println!(
        "total bench time {:.1} s",
        bench_started.elapsed().as_secs_f64()
    );
    if !(clears_ok && minds_ok) {
        std::process::exit(1);
    }
}

/// What the run is: its size, the trace's parameters, the assumptions, rules and price, and
/// the machine's load.
fn print_setup(full: bool, nproc: usize, params: &SynthParams, config: &ReplayConfig<'_>) {
    println!(
        "muninn-core replay bench ({})",
        if full {
            "full"
        } else {
            "smoke: pass --bench for the full run"
        }
    );
    println!(
        "nproc {nproc}; single-threaded; {ROUNDS} rounds interleaved across plans, median reported"
    );
    println!(
        "synthetic trace: muninn_workload::synth::session(seed {SEED:#x}, n, SynthParams::default())"
    );
    println!("  {params:?}");
    println!("assumptions: {}", config.assumptions);
    println!("cache rules: {:?}", config.rules);
    println!("price: {:?}", config.price);
    // The machine is shared with other builders: the load says how far to trust the figures.
    println!("load average at start: {}", loadavg());
    println!();
}

/// The first table: the throughput of every plan on `trace`, interleaved.
fn throughput_table(trace: &Trace, config: &ReplayConfig<'_>, nproc: usize) {
    let plans = Plan::all();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); plans.len()];
    let mut costs: Vec<MicroUsd> = vec![MicroUsd::ZERO; plans.len()];
    let mut steps: Vec<u64> = vec![0; plans.len()];
    for _ in 0..ROUNDS {
        for (i, &plan) in plans.iter().enumerate() {
            let mut n = 0u64;
            let started = Instant::now();
            let totals = replay_trace(black_box(trace), plan, config, &mut |step| {
                n += 1;
                black_box(step);
            });
            times[i].push(started.elapsed());
            costs[i] = totals.cost;
            steps[i] = n;
        }
    }
    let optimum_cost = plans
        .iter()
        .position(|&p| p == Plan::Optimum)
        .map(|i| costs[i]);
    println!("throughput: {} requests per replay", trace.requests.len());
    println!(
        "{:<16} {:>10} {:>10} {:>14} {:>16} {:>12} {:>10} {:>10}",
        "plan",
        "median s",
        "spread",
        "req/s (1 core)",
        "req/s (×nproc)",
        "cost $",
        "÷ optimum",
        "steps"
    );
    for (i, plan) in plans.iter().enumerate() {
        let m = median(times[i].clone());
        let lo = times[i].iter().min().copied().unwrap_or_default();
        let hi = times[i].iter().max().copied().unwrap_or_default();
        let per_s = trace.requests.len() as f64 / m.as_secs_f64();
        let ratio = optimum_cost
            .filter(|o| o.0 > 0)
            .map_or(f64::NAN, |o| costs[i].0 as f64 / o.0 as f64);
        println!(
            "{:<16} {:>10.3} {:>9.1}% {:>14.0} {:>16.0} {:>12.2} {:>10.4} {:>10}",
            plan.to_string(),
            m.as_secs_f64(),
            100.0 * (hi - lo).as_secs_f64() / m.as_secs_f64(),
            per_s,
            per_s * nproc as f64,
            costs[i].dollars(),
            ratio,
            steps[i],
        );
    }
    println!(
        "(spread = (max − min) / median over the {ROUNDS} rounds; steps = priced requests incl. pings and flushes)"
    );
    println!();
}

/// The second table: the optimum's scaling on traces of a hundredth, a tenth and all of `large`
/// requests, every measurement doing `large` requests of work.
fn optimum_scaling_table(large: usize, params: &SynthParams, config: &ReplayConfig<'_>) {
    let sizes = [large / 100, large / 10, large];
    println!("optimum scaling ({large} requests of work per measurement, median of {ROUNDS})");
    println!(
        "{:>10} {:>6} {:>14} {:>10} {:>18} {:>10}",
        "n", "reps", "plan ns/req", "× prev", "full replay ns/req", "× prev"
    );
    let mut previous: Option<(f64, f64)> = None;
    for &n in &sizes {
        let trace = session(SEED, n, params);
        let reps = (large / n.max(1)).max(1);
        let ttl = config
            .assumptions
            .ttl
            .unwrap_or_else(|| trace.whole_trace_ttl());
        let (head, turns) = reconstruct(&trace, config.assumptions.head_tokens);
        let mut plan_times = Vec::new();
        let mut full_times = Vec::new();
        for _ in 0..ROUNDS {
            let started = Instant::now();
            for _ in 0..reps {
                black_box(optimum::plan(black_box(&turns), head, ttl, config));
            }
            plan_times.push(started.elapsed());
            let started = Instant::now();
            for _ in 0..reps {
                black_box(replay_trace(&trace, Plan::Optimum, config, &mut |s| {
                    black_box(s);
                }));
            }
            full_times.push(started.elapsed());
        }
        let work = (reps * n) as f64;
        let plan_ns = median(plan_times).as_secs_f64() * 1e9 / work;
        let full_ns = median(full_times).as_secs_f64() * 1e9 / work;
        let (plan_x, full_x) = previous.map_or((String::new(), String::new()), |(p, f)| {
            (format!("{:.2}", plan_ns / p), format!("{:.2}", full_ns / f))
        });
        println!("{n:>10} {reps:>6} {plan_ns:>14.1} {plan_x:>10} {full_ns:>18.1} {full_x:>10}");
        previous = Some((plan_ns, full_ns));
    }
    println!(
        "(n log n predicts ×{:.2} and ×{:.2} between consecutive sizes; linear growth would be ×10)",
        (sizes[1] as f64).log2() / (sizes[0] as f64).log2(),
        (sizes[2] as f64).log2() / (sizes[1] as f64).log2()
    );
    println!();
}

/// `session(seed, n)` whose tool-loop requests (those inside a turn) grow by tool results: 70%
/// of each one's growth, one use each — the shape where the mask program's states multiply.
fn with_tool_results(mut trace: Trace) -> Trace {
    let mut previous = 0;
    for r in &mut trace.requests {
        let prompt = r.usage.prompt();
        if !r.boundary && !r.compacted && prompt > previous {
            r.tool_results = ToolResults {
                tokens: (prompt - previous) * 7 / 10,
                uses: 1,
            };
        }
        previous = prompt;
    }
    trace
}

/// Table 3: the mask program with and without dropping dominated states. Returns false (after
/// printing FAIL) if the two plans differ anywhere.
fn mask_program_table(
    full: bool,
    config: &ReplayConfig<'_>,
    assumptions: &Assumptions,
    params: &SynthParams,
) -> bool {
    let sizes: &[usize] = if full { &[665, 2_660, 5_320] } else { &[200] };
    println!(
        "the optimum with clears: the mask program with and without dropping dominated states"
    );
    println!(
        "(synthetic, 70% of each tool-loop request's growth tool results; median of {ROUNDS})"
    );
    println!(
        "{:>7} {:>12} {:>12} {:>8} {:>14} {:>14} {:>9} {:>9}  plan",
        "n", "full s", "dropping s", "×", "states full", "dropping", "peak", "peak"
    );
    let mut ok = true;
    for &n in sizes {
        let trace = with_tool_results(session(SEED ^ n as u64, n, params));
        let ttl = assumptions.ttl.unwrap_or_else(|| trace.whole_trace_ttl());
        let (head, turns) = reconstruct(&trace, assumptions.head_tokens);
        let mut times = [Vec::new(), Vec::new()];
        let mut runs = [None, None];
        for _ in 0..ROUNDS {
            for (i, prune) in [false, true].into_iter().enumerate() {
                let started = Instant::now();
                runs[i] = optimum::mask_program(black_box(&turns), head, ttl, config, prune);
                times[i].push(started.elapsed());
            }
        }
        let [Some(full_run), Some(pruned)] = runs else {
            println!("{n:>7} FAIL: the trace has nothing to clear");
            ok = false;
            continue;
        };
        let same = (full_run.cost, &full_run.starts, &full_run.masks)
            == (pruned.cost, &pruned.starts, &pruned.masks);
        ok &= same;
        let (t_full, t_pruned) = (median(times[0].clone()), median(times[1].clone()));
        println!(
            "{n:>7} {:>12.3} {:>12.3} {:>8.1} {:>14} {:>14} {:>9} {:>9}  {}",
            t_full.as_secs_f64(),
            t_pruned.as_secs_f64(),
            t_full.as_secs_f64() / t_pruned.as_secs_f64().max(1e-9),
            full_run.states,
            pruned.states,
            full_run.peak_states,
            pruned.peak_states,
            if same {
                format!(
                    "same ({} clears, {} segments)",
                    pruned.masks.iter().filter(|&&m| m).count(),
                    pruned.starts.iter().filter(|&&s| s).count()
                )
            } else {
                "FAIL: the plans differ".to_string()
            }
        );
    }
    ok
}

/// One Mind's `n` sessions of 20 requests, begun two hours apart (a session's idle gaps can
/// last hours, so some overlap the next), all in the directory `synth-mind`.
fn mind_sessions(n: usize, params: &SynthParams) -> Vec<Trace> {
    (0..n)
        .map(|k| {
            let params = SynthParams {
                start_ms: params.start_ms + k as i64 * 7_200_000,
                ..params.clone()
            };
            let mut trace = session(SEED ^ k as u64, 20, &params);
            trace.source = format!("synth-mind/{k}.jsonl");
            trace
        })
        .collect()
}

/// Table 4: the default policy over one Mind's sessions at two sizes, time per session and
/// its growth. Returns false (after printing FAIL) if it grows past [`MAX_SESSION_SCALING`].
fn minds_table(full: bool, params: &SynthParams, config: &ReplayConfig<'_>) -> bool {
    let sizes: [usize; 2] = if full { [1_000, 10_000] } else { [100, 1_000] };
    let plan = Plan::Online(Policy::SkiRental);
    println!(
        "a Mind's sessions: replay_traces under {plan}, 20 requests a session, learning carried (median of {ROUNDS})"
    );
    println!(
        "{:>9} {:>10} {:>14} {:>12}",
        "sessions", "median s", "µs / session", "cost $"
    );
    let mut per_session = Vec::new();
    for n in sizes {
        let sessions = mind_sessions(n, params);
        let priced: Vec<(&Trace, &ModelPrice)> =
            sessions.iter().map(|t| (t, config.price)).collect();
        let mut times = Vec::new();
        let mut cost = MicroUsd::ZERO;
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let totals = replay_traces(
                black_box(&priced),
                plan,
                config.assumptions,
                config.rules,
                &mut |_, s| {
                    black_box(s);
                },
            );
            times.push(started.elapsed());
            cost = totals.iter().map(|t| t.cost).sum();
        }
        let m = median(times);
        let us = m.as_secs_f64() * 1e6 / n as f64;
        per_session.push(us);
        println!(
            "{n:>9} {:>10.3} {us:>14.1} {:>12.2}",
            m.as_secs_f64(),
            cost.dollars()
        );
    }
    let scaling = per_session[1] / per_session[0];
    let verdict = if scaling > MAX_SESSION_SCALING {
        "FAIL: super-linear"
    } else {
        "ok"
    };
    println!(
        "time per session × {scaling:.2} from {} to {} sessions (linear 1, n log n about 1.3, quadratic 10; FAIL past {MAX_SESSION_SCALING}) {verdict}",
        sizes[0], sizes[1]
    );
    println!();
    !verdict.starts_with("FAIL")
}

/// Prints what the synthetic trace looks like, so the throughput figures can be read against it.
fn describe(trace: &Trace, generated: Duration) {
    let n = trace.requests.len();
    let mut gaps = [0u64; 5];
    for pair in trace.requests.windows(2) {
        let g = pair[1].at_ms - pair[0].at_ms;
        let i = match g {
            ..60_000 => 0,
            60_000..300_000 => 1,
            300_000..3_600_000 => 2,
            _ => 3,
        };
        gaps[i] += 1;
        gaps[4] += 1;
    }
    let share = |k: u64| 100.0 * k as f64 / gaps[4].max(1) as f64;
    let boundaries = trace.requests.iter().filter(|r| r.boundary).count();
    let compactions = trace.requests.iter().filter(|r| r.compacted).count();
    let mean_prompt =
        trace.requests.iter().map(|r| r.usage.prompt()).sum::<u64>() as f64 / n.max(1) as f64;
    let days = trace
        .requests
        .last()
        .zip(trace.requests.first())
        .map_or(0.0, |(l, f)| (l.at_ms - f.at_ms) as f64 / 86_400_000.0);
    println!(
        "trace: {n} requests over {days:.0} days, generated in {:.2} s; {boundaries} turn boundaries, \
         {compactions} compactions, mean prompt {mean_prompt:.0} tokens",
        generated.as_secs_f64()
    );
    println!(
        "gaps: {:.1}% < 1 min, {:.1}% 1–5 min, {:.1}% 5–60 min, {:.2}% > 1 h",
        share(gaps[0]),
        share(gaps[1]),
        share(gaps[2]),
        share(gaps[3])
    );
    println!();
}
