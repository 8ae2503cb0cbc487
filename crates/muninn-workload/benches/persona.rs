//! The Persona workload (`shared/workloads/persona.md`): every design on every variant.
//!
//! `cargo bench -p muninn-workload --bench persona` generates, for each variant and each seed, a
//! stream of `MUNINN_PERSONA_TURNS` Persona turns (default 2,000) with [`muninn_workload::workload`],
//! prices today's rebuild (1h and 5m) and muninn's session under every plan with
//! [`muninn_workload::persona`] on `claude-opus-5-5`, and prints every parameter, one table per variant
//! (the seeds' turns pooled) and the checks:
//!
//! 1. the default policy (`ski-rental`) within 1.05× of the cheaper of rebuild (1h, 5m) and `never`
//!    on every variant;
//! 2. the default policy cheaper than both rebuilds and `never` on the mix;
//! 3. the default policy within 1.05× of the replay engine's optimum on the same stream;
//! 4. the optimum no dearer than any muninn plan on any seed: it sees every charge the plans pay
//!    (the layer-change charge included), so a plan that beat it would mean a cost it cannot see.
//!
//! A last table runs the mix once on `claude-sonnet-4-5`. Without `--bench` (as
//! `cargo test --bench persona` runs it, and `scripts/test.sh` does in CI) one seed of 300 turns
//! keeps the smoke run short. Any FAIL makes the run exit 1.
//! `MUNINN_PERSONA_SEEDS` (comma-separated) overrides the seeds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_core::cache::Ttl;
use muninn_core::decide::Policy;
use muninn_core::price::{ModelPrice, PriceTable};
use muninn_core::replay::Plan;
use muninn_workload::persona::{Comparison, Design, DesignResult, PersonaConfig, compare};
use muninn_workload::workload::{PersonaParams, Span, Stream, Variant};
use std::time::Instant;

const DEFAULT: Design = Design::Muninn(Plan::Online(Policy::SkiRental));
const NEVER: Design = Design::Muninn(Plan::Online(Policy::Never));
const OPTIMUM: Design = Design::Muninn(Plan::Optimum);
const REBUILD_1H: Design = Design::Rebuild(Ttl::OneHour);
const REBUILD_5M: Design = Design::Rebuild(Ttl::FiveMinutes);

/// The seeds' results pooled per design (turns concatenated).
fn pool(comparisons: &[Comparison]) -> Comparison {
    let mut pooled = comparisons[0].clone();
    for c in &comparisons[1..] {
        for (p, r) in pooled.results.iter_mut().zip(&c.results) {
            assert_eq!(p.design, r.design);
            p.cost.extend(&r.cost);
            p.usage.extend(&r.usage);
            p.pings += r.pings;
            p.refreshes += r.refreshes;
        }
    }
    pooled
}

fn mean(c: &Comparison, d: Design) -> f64 {
    c.summary(d).map_or(f64::NAN, |s| s.mean)
}

fn table(c: &Comparison) {
    let base = mean(c, DEFAULT);
    println!(
        "  {:<14} {:>10} {:>10} {:>8} {:>10} {:>10} {:>9} {:>7} {:>9}",
        "design",
        "mean µ$",
        "p95 µ$",
        "/default",
        "written/t",
        "read/t",
        "doctrine",
        "pings",
        "refreshes"
    );
    for r in &c.results {
        let s = r.summary(c.doctrine_tokens);
        let DesignResult {
            pings, refreshes, ..
        } = r;
        println!(
            "  {:<14} {:>10.0} {:>10} {:>8.3} {:>10.0} {:>10.0} {:>9} {:>7} {:>9}",
            r.design.to_string(),
            s.mean,
            s.p95.0,
            s.mean / base,
            s.written_per_turn,
            s.read_per_turn,
            s.doctrine_writes,
            pings,
            refreshes
        );
    }
    let rebuild = mean(c, REBUILD_1H).min(mean(c, REBUILD_5M));
    println!(
        "  rebuild / default: 1h {:.3}, 5m {:.3}, cheaper rebuild {:.3}",
        mean(c, REBUILD_1H) / base,
        mean(c, REBUILD_5M) / base,
        rebuild / base
    );
}

fn stream_stats(streams: &[Stream]) -> String {
    let turns: usize = streams.iter().map(|s| s.turns.len()).sum();
    let arrivals: usize = streams.iter().map(|s| s.arrivals.len()).sum();
    let hours: f64 = streams
        .iter()
        .map(|s| {
            let first = s.arrivals.first().map_or(0, |a| a.at_ms);
            let last = s.turns.last().map_or(first, |t| t.at_ms);
            (last - first) as f64 / 3.6e6
        })
        .sum();
    let conversations: usize = streams
        .iter()
        .map(|s| s.arrivals.last().map_or(0, |a| a.conversation as usize + 1))
        .sum();
    let dm = streams
        .iter()
        .flat_map(|s| &s.arrivals)
        .filter(|a| a.is_direct)
        .count();
    format!(
        "{turns} turns, {arrivals} deliveries ({:.2}/turn, {:.0}% in DMs), {:.1} h, {:.2} conversations/h",
        arrivals as f64 / turns.max(1) as f64,
        100.0 * dm as f64 / arrivals.max(1) as f64,
        hours,
        conversations as f64 / hours.max(1e-9)
    )
}

/// Where the default loses against the optimum: per band of the idle gap before a turn, the
/// turns, what each paid (with the pings of that gap) and how many turns rewrote the head.
fn losses(streams: &[Stream], c: &Comparison) {
    let (Some(d), Some(o)) = (c.get(DEFAULT), c.get(OPTIMUM)) else {
        return;
    };
    let gaps: Vec<i64> = streams
        .iter()
        .flat_map(|s| {
            let t = &s.turns;
            (0..t.len()).map(move |i| {
                if i == 0 {
                    0
                } else {
                    t[i].at_ms - t[i - 1].at_ms
                }
            })
        })
        .collect();
    let bands: [(&str, i64, i64); 4] = [
        ("< 5 min", 0, 300_000),
        ("5–60 min", 300_000, 3_600_000),
        ("1–2 h", 3_600_000, 7_200_000),
        ("> 2 h", 7_200_000, i64::MAX),
    ];
    println!("  where default loses to optimum, by the idle gap before the turn:");
    for (name, lo, hi) in bands {
        let idx: Vec<usize> = (0..gaps.len())
            .filter(|&i| gaps[i] >= lo && gaps[i] < hi)
            .collect();
        let sum = |r: &DesignResult| idx.iter().map(|&i| r.cost[i].0).sum::<i64>();
        let cold = |r: &DesignResult| {
            idx.iter()
                .filter(|&&i| r.usage[i].written() >= c.head_tokens)
                .count()
        };
        println!(
            "    {name:<9} {:>5} turns: default {:>12} µ$, optimum {:>12} µ$ (diff {:>+12} µ$, {:>+7.0}/turn overall); head rewrites {} vs {}",
            idx.len(),
            sum(d),
            sum(o),
            sum(d) - sum(o),
            (sum(d) - sum(o)) as f64 / gaps.len().max(1) as f64,
            cold(d),
            cold(o)
        );
    }
}

/// The cheapest muninn plan other than the optimum, µ$/turn.
fn cheapest_plan(c: &Comparison) -> f64 {
    c.results
        .iter()
        .filter(|r| matches!(r.design, Design::Muninn(p) if p != Plan::Optimum))
        .map(|r| mean(c, r.design))
        .fold(f64::INFINITY, f64::min)
}

/// The optimum is no dearer than any other muninn plan (to the micro-dollar per turn).
fn optimum_is_cheapest(c: &Comparison) -> bool {
    mean(c, OPTIMUM) <= cheapest_plan(c) + 1.0
}

fn check(name: &str, ok: bool, detail: String) -> bool {
    println!("  {} {name}: {detail}", if ok { "PASS" } else { "FAIL" });
    ok
}

/// What to run: the full size with `--bench`, the smoke size without, either overridden by the
/// environment.
struct RunSize {
    full: bool,
    turns: usize,
    seeds: Vec<u64>,
}

impl RunSize {
    fn from_env() -> RunSize {
        let full = std::env::args().any(|a| a == "--bench");
        let turns: usize = std::env::var("MUNINN_PERSONA_TURNS")
            .ok()
            .and_then(|v| v.replace('_', "").parse().ok())
            .unwrap_or(if full { 2_000 } else { 300 });
        let seeds: Vec<u64> = std::env::var("MUNINN_PERSONA_SEEDS")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
            .unwrap_or_else(|| if full { vec![1, 2, 3] } else { vec![1] });
        RunSize { full, turns, seeds }
    }
}

/// Every parameter of the run: its size, the workload's, the designs' and the model's prices.
fn print_parameters(
    size: &RunSize,
    params: &PersonaParams,
    config: &PersonaConfig,
    opus: &ModelPrice,
) {
    let RunSize { full, turns, seeds } = size;
    println!(
        "muninn-core persona bench ({}): {turns} turns per stream, seeds {seeds:?}, model {}",
        if *full {
            "full"
        } else {
            "smoke: pass --bench for the full run"
        },
        opus.name
    );
    println!("workload parameters:\n{params}");
    println!("designs: {config}");
    println!(
        "prices ({}): input {:.2}, output {:.2}, read {:.3}, write 5m {:.3}, write 1h {:.3} $/Mtok; min cacheable {}",
        opus.name,
        opus.input.usd_per_mtok(),
        opus.output.usd_per_mtok(),
        opus.read.usd_per_mtok(),
        opus.write_5m.usd_per_mtok(),
        opus.write_1h.usd_per_mtok(),
        opus.min_cacheable
    );
}

/// The checks of one variant, seeds pooled.
struct VariantChecks {
    variant: Variant,
    /// 1: within 1.05× of the simple designs.
    simple: bool,
    /// 3 and 4: within 1.05× of the optimum, and the optimum the cheapest plan on every seed.
    optimum: bool,
    /// 2, on the mix only: cheaper than both rebuilds and `never`.
    beats_both: Option<bool>,
}

impl VariantChecks {
    fn passed(&self) -> bool {
        self.simple && self.optimum && self.beats_both.unwrap_or(true)
    }
}

/// One variant on every seed: its table and its checks (and where the default loses, if it is
/// not within 1.05× of the optimum).
fn run_variant(
    variant: Variant,
    size: &RunSize,
    params: &PersonaParams,
    config: &PersonaConfig,
    opus: &ModelPrice,
) -> VariantChecks {
    let streams: Vec<Stream> = size
        .seeds
        .iter()
        .map(|&seed| Stream::build(params, variant, seed, Span::Turns(size.turns)))
        .collect();
    let comparisons: Vec<Comparison> = streams.iter().map(|s| compare(s, opus, config)).collect();
    let c = pool(&comparisons);
    println!(
        "\n== {variant}: {} (head {} tokens)",
        stream_stats(&streams),
        c.head_tokens
    );
    table(&c);
    let c1 = within_simple(&c, &comparisons);
    let c3 = within_optimum(&c, &comparisons);
    let c4 = optimum_cheapest(&c, &comparisons);
    let c2 = (variant == Variant::Mix).then(|| beats_both(&c));
    if !c3 {
        losses(&streams, &c);
    }
    VariantChecks {
        variant,
        simple: c1,
        optimum: c3 && c4,
        beats_both: c2,
    }
}

/// Seeds of `comparisons` on which `f` holds.
fn seeds_passing(comparisons: &[Comparison], f: &dyn Fn(&Comparison) -> bool) -> usize {
    comparisons.iter().filter(|c| f(c)).count()
}

/// Check 1: the default within 1.05× of the cheaper rebuild and `never`.
fn within_simple(c: &Comparison, comparisons: &[Comparison]) -> bool {
    let simple_of = |c: &Comparison| {
        mean(c, REBUILD_1H)
            .min(mean(c, REBUILD_5M))
            .min(mean(c, NEVER))
    };
    let (default, simple) = (mean(c, DEFAULT), simple_of(c));
    check(
        "default ≤ 1.05 × min(rebuild-1h, rebuild-5m, never)",
        default <= 1.05 * simple,
        format!(
            "{default:.0} vs {simple:.0} µ$/turn (×{:.3}); seeds passing {}/{}",
            default / simple,
            seeds_passing(comparisons, &|c| mean(c, DEFAULT) <= 1.05 * simple_of(c)),
            comparisons.len()
        ),
    )
}

/// Check 3: the default within 1.05× of the optimum.
fn within_optimum(c: &Comparison, comparisons: &[Comparison]) -> bool {
    let (default, optimum) = (mean(c, DEFAULT), mean(c, OPTIMUM));
    check(
        "default ≤ 1.05 × optimum",
        default <= 1.05 * optimum,
        format!(
            "{default:.0} vs {optimum:.0} µ$/turn (×{:.3}); seeds passing {}/{}",
            default / optimum,
            seeds_passing(comparisons, &|c| mean(c, DEFAULT)
                <= 1.05 * mean(c, OPTIMUM)),
            comparisons.len()
        ),
    )
}

/// Check 4: the optimum no dearer than any muninn plan, on every seed.
fn optimum_cheapest(c: &Comparison, comparisons: &[Comparison]) -> bool {
    check(
        "optimum ≤ every muninn plan, every seed",
        comparisons.iter().all(optimum_is_cheapest),
        format!(
            "cheapest other plan {:.0} vs optimum {:.0} µ$/turn (pooled); seeds passing {}/{}",
            cheapest_plan(c),
            mean(c, OPTIMUM),
            seeds_passing(comparisons, &optimum_is_cheapest),
            comparisons.len()
        ),
    )
}

/// Check 2 (the mix): the default cheaper than both rebuilds and `never`.
fn beats_both(c: &Comparison) -> bool {
    let default = mean(c, DEFAULT);
    let rebuild = mean(c, REBUILD_1H).min(mean(c, REBUILD_5M));
    let never = mean(c, NEVER);
    check(
        "mix: default < both rebuilds and < never",
        default < rebuild && default < never,
        format!(
            "{default:.0} vs rebuild {rebuild:.0} (×{:.3}), never {never:.0} (×{:.3})",
            default / rebuild,
            default / never
        ),
    )
}

/// The mix once more, on one seed and another model.
fn mix_on(model: &ModelPrice, size: &RunSize, params: &PersonaParams, config: &PersonaConfig) {
    let seed = size.seeds[0];
    let stream = Stream::build(params, Variant::Mix, seed, Span::Turns(size.turns));
    let c = compare(&stream, model, config);
    println!(
        "\n== mix on {} (seed {seed}): {} (head {} tokens)",
        model.name,
        stream_stats(std::slice::from_ref(&stream)),
        c.head_tokens
    );
    table(&c);
}

/// The checks of every variant, one line each.
fn print_checks(checks: &[VariantChecks]) {
    println!("\nchecks (opus, seeds pooled):");
    for v in checks {
        let mark = |b: bool| if b { "PASS" } else { "FAIL" };
        println!(
            "  {:<10} within 1.05× of simple: {}   within 1.05× of optimum (and optimum cheapest): {}{}",
            v.variant.to_string(),
            mark(v.simple),
            mark(v.optimum),
            v.beats_both
                .map_or(String::new(), |b| format!("   beats both: {}", mark(b)))
        );
    }
}

fn main() {
    let size = RunSize::from_env();
    let params = PersonaParams::default();
    let config = PersonaConfig::default();
    let prices = PriceTable::embedded();
    let opus = prices.model("claude-opus-5-5").expect("priced");
    let sonnet = prices.model("claude-sonnet-4-5").expect("priced");
    let started = Instant::now();
    print_parameters(&size, &params, &config, opus);

    let checks: Vec<VariantChecks> = Variant::ALL
        .into_iter()
        .map(|variant| run_variant(variant, &size, &params, &config, opus))
        .collect();
    mix_on(sonnet, &size, &params, &config);
    print_checks(&checks);
    let all_ok = checks.iter().all(VariantChecks::passed);
    println!(
        "overall: {}; {:.1} s",
        if all_ok { "PASS" } else { "FAIL" },
        started.elapsed().as_secs_f64()
    );
    // A FAIL is a result, not a remark: the run fails with it (CI runs the smoke size).
    if !all_ok {
        std::process::exit(1);
    }
}
