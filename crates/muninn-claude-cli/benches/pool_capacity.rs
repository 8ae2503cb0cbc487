//! How many Minds one host serves within a memory budget with parking on: N Minds, each owning
//! its own [`ClaudeCliBackend`] (the real CLI, against the in-process simulator), take turns
//! with idle gaps drawn from a bursty distribution, all joined to one [`SharedPool`] under a
//! memory budget, with a sweeper parking idle sessions as the host would.
//!
//! Time is compressed: the pool's clock runs `MUNINN_BENCH_SPEEDUP` times faster than the wall
//! clock, and the Minds sleep their gaps at that speed, so an hour of a Mind's idle time passes
//! in minutes. The turns themselves run at real speed (a warm turn of ~0.1 s counts as
//! `0.1 × speedup` pool seconds), which makes sessions look longer in a turn than they are: the
//! live counts below are an over-estimate on that account.
//!
//! Gaps (pool time): with probability 0.8 a reply follows soon (exponential, mean 8 s, at
//! least 1 s); with 0.2 the Mind goes quiet for a log-uniform 2–60 min. Mean ≈ 211 s, about
//! 17 turns per Mind per hour. The Minds' first turns are spread evenly over the first third
//! of the run, as on a host whose Minds are already running.
//!
//! The speed-up is bounded by the machine, not the model: relaunches cost ~0.8 s of CPU each
//! in real time, so the real launch rate (Minds × turn rate × speed-up × resumed share) must
//! stay well under what the cores can start — at 14× on 2 busy cores the pool saturated (every
//! turn queued behind parks, 15 s per turn), which measures the machine, not the policy.
//!
//! Prints (stderr): RSS per live session (median, max), the live count over time, parks by
//! reason and resumes, warm and resumed turn latency (p50/p95) and the added latency of a
//! resume, and from these the Minds a 4 GiB budget serves (the model is printed with it).
//!
//! Knobs: `MUNINN_BENCH_MINDS` (24), `MUNINN_BENCH_SECONDS` (wall seconds of turns, 150),
//! `MUNINN_BENCH_SPEEDUP` (6), `MUNINN_BENCH_BUDGET_MIB` (2048), `MUNINN_BENCH_SEED` (1).
//! Needs the real CLI (`MUNINN_CLAUDE_BIN` or the install script's path); without it, prints a
//! note and exits 0. Not a test: run with `cargo bench -p muninn-claude-cli --bench
//! pool_capacity`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_backend::{Backend, SessionSpec, TurnInput};
use muninn_claude_cli::pool::{ParkReason, PoolConfig, PoolEvent, SharedPool};
use muninn_claude_cli::{ClaudeCliBackend, CliConfig, Secret, SessionEvent};
use muninn_core::cache::Ttl;
use muninn_sim::sim::SimConfig;
use muninn_testkit::peers::claude_cli_path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "sk-bench";
/// The budget the extrapolation is for.
const TARGET_MIB: f64 = 4096.0;

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// splitmix64: a small deterministic generator (no dependency for a bench).
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One idle gap in pool seconds (see the module docs).
    fn gap_s(&mut self) -> f64 {
        if self.next_f64() < 0.8 {
            (-8.0 * (1.0 - self.next_f64()).ln()).max(1.0)
        } else {
            let (lo, hi) = (120f64.ln(), 3600f64.ln());
            (lo + (hi - lo) * self.next_f64()).exp()
        }
    }
}

fn spec(mind: usize) -> SessionSpec {
    SessionSpec {
        model: String::new(),
        system: vec![format!(
            "You are MUNINN-POOL-BENCH mind {mind}. {}",
            (0..400)
                .map(|i| format!("Doctrine line {i}: keep the cache warm."))
                .collect::<Vec<_>>()
                .join(" ")
        )],
        tools: Vec::new(),
        output_schema: None,
        system_ttl: Ttl::FiveMinutes,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 1024,
    }
}

/// One turn as its Mind saw it.
struct TurnSample {
    wall: Duration,
    resumed: bool,
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// P(Binomial(n, p) > c).
fn binomial_tail(n: usize, p: f64, c: usize) -> f64 {
    let mut term = (1.0 - p).powi(n as i32); // P(X = 0)
    let mut cdf = 0.0;
    for k in 0..=c.min(n) {
        cdf += term;
        term *= (n - k) as f64 / (k + 1) as f64 * p / (1.0 - p);
    }
    (1.0 - cdf).max(0.0)
}

fn main() {
    let Some(bin) = claude_cli_path() else {
        eprintln!("pool_capacity: SKIP, Claude Code CLI not found (set MUNINN_CLAUDE_BIN)");
        return;
    };
    let minds = env_f64("MUNINN_BENCH_MINDS", 24.0) as usize;
    let seconds = env_f64("MUNINN_BENCH_SECONDS", 150.0);
    let speedup = env_f64("MUNINN_BENCH_SPEEDUP", 6.0).max(1.0);
    let budget_mib = env_f64("MUNINN_BENCH_BUDGET_MIB", 2048.0) as u64;
    let seed = env_f64("MUNINN_BENCH_SEED", 1.0) as u64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(bin, minds, seconds, speedup, budget_mib, seed));
}

/// A sample of the pool: wall seconds since the start, live sessions, each live child's RSS.
type Sample = (f64, usize, Vec<f64>);

/// What one run measured, for the report.
struct Run {
    config: PoolConfig,
    minds: usize,
    speedup: f64,
    wall_s: f64,
    total_turns: usize,
    turns: Vec<TurnSample>,
    samples: Vec<Sample>,
    events: Vec<PoolEvent>,
}

async fn run(bin: PathBuf, minds: usize, seconds: f64, speedup: f64, budget_mib: u64, seed: u64) {
    let sim = muninn_sim::spawn("127.0.0.1:0".parse().unwrap(), SimConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = PoolConfig {
        max_processes: 256,
        memory_budget_mib: budget_mib,
        per_process_mib: 250,
        ..PoolConfig::default()
    };
    let base = Instant::now();
    let clock = Arc::new(move || base + base.elapsed().mul_f64(speedup));
    let pool = SharedPool::with_clock(config.clone(), clock);
    let real_end = base + Duration::from_secs_f64(seconds);

    let sweeper = spawn_sweeper(pool.clone(), real_end, speedup);
    let sampler = spawn_sampler(pool.clone(), base, real_end);
    let tasks: Vec<_> = (0..minds)
        .map(|m| {
            let mut backend = ClaudeCliBackend::new(CliConfig::new(
                &bin,
                dir.path(),
                sim.base_url(),
                Secret::new(KEY),
                format!("9001e000-0000-4000-8000-{m:012x}"),
            ));
            backend.join_pool(pool.clone(), format!("mind-{m:02}"));
            let rng = Rng(seed.wrapping_mul(1_000_003).wrapping_add(m as u64));
            let first = seconds / 3.0 * m as f64 / minds as f64;
            tokio::spawn(mind_turns(backend, m, rng, first, speedup, real_end))
        })
        .collect();
    let mut turns = Vec::new();
    let mut total_turns = 0;
    for t in tasks {
        let (samples, n) = t.await.unwrap();
        turns.extend(samples);
        total_turns += n;
    }
    let wall_s = base.elapsed().as_secs_f64();
    sweeper.await.unwrap();
    let samples = sampler.await.unwrap();
    let events = pool.take_events();
    report(&Run {
        config,
        minds,
        speedup,
        wall_s,
        total_turns,
        turns,
        samples,
        events,
    });
}

/// The host's sweeper: every 15 pool seconds.
fn spawn_sweeper(pool: SharedPool, real_end: Instant, speedup: f64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while Instant::now() < real_end {
            tokio::time::sleep(Duration::from_secs_f64(15.0 / speedup)).await;
            pool.sweep(pool.now()).await;
        }
    })
}

/// Samples the live sessions four times a second (wall).
fn spawn_sampler(
    pool: SharedPool,
    base: Instant,
    real_end: Instant,
) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while Instant::now() < real_end {
            let live = pool.live();
            let rss: Vec<f64> = live
                .iter()
                .filter(|s| s.pid.is_some())
                .map(|s| s.rss_mib)
                .collect();
            samples.push((base.elapsed().as_secs_f64(), live.len(), rss));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        samples
    })
}

/// One Mind's turns until the run ends: its first after `first` wall seconds, then after gaps
/// drawn from `rng`. Returns the turns after each session's first, and how many it took.
async fn mind_turns(
    mut backend: ClaudeCliBackend,
    m: usize,
    mut rng: Rng,
    first: f64,
    speedup: f64,
    real_end: Instant,
) -> (Vec<TurnSample>, usize) {
    let mut turns = Vec::new();
    let mut started = false;
    let mut n = 0;
    loop {
        let gap = Duration::from_secs_f64(if started {
            rng.gap_s() / speedup
        } else {
            first
        });
        if Instant::now() + gap >= real_end {
            break;
        }
        tokio::time::sleep(gap).await;
        if !started {
            // Started when first needed, as a host starts a Mind's session.
            backend.start(spec(m)).await.unwrap();
            started = true;
        }
        n += 1;
        let at = Instant::now();
        let r = backend
            .turn(TurnInput::text(format!(
                "Mind {m} turn {n}: answer briefly."
            )))
            .await;
        let wall = at.elapsed();
        if let Err(e) = r {
            eprintln!("mind {m} turn {n} failed: {e}");
            continue;
        }
        let resumed = backend.last_report().is_some_and(|r| {
            r.session_events
                .iter()
                .any(|e| matches!(e, SessionEvent::Unparked { .. }))
        });
        // The first turn of a started session pays the child's own start-up.
        if n > 1 {
            turns.push(TurnSample { wall, resumed });
        }
    }
    backend.shutdown().await;
    (turns, n)
}

fn report(run: &Run) {
    let (config, minds, speedup, wall_s) = (&run.config, run.minds, run.speedup, run.wall_s);
    let total_turns = run.total_turns;
    let pool_hours = wall_s * speedup / 3600.0;
    let rate = total_turns as f64 / minds as f64 / pool_hours;
    eprintln!(
        "pool_capacity: {minds} Minds, memory budget {} MiB (new child assumed {} MiB), \
         {wall_s:.0} s wall x {speedup} = {:.0} min pool time",
        config.memory_budget_mib,
        config.per_process_mib,
        pool_hours * 60.0
    );
    eprintln!(
        "  turns: {total_turns} ({rate:.1} per Mind per pool hour; first turns of each session \
         left out of the latencies below)"
    );
    let occupancy = report_occupancy(run);
    let memory_parks = report_parks(&run.events);
    let latency = report_latency(&run.turns);
    report_capacity(run, rate, &occupancy, &latency, memory_parks);
}

/// What the samples say of the live sessions.
#[derive(Clone, Copy)]
struct Occupancy {
    rss_median: f64,
    rss_max: f64,
    live_mean: f64,
}

fn report_occupancy(run: &Run) -> Occupancy {
    let (samples, minds, wall_s) = (&run.samples, run.minds, run.wall_s);
    let mut rss: Vec<f64> = samples.iter().flat_map(|s| s.2.iter().copied()).collect();
    let rss_median = quantile(&mut rss, 0.5);
    let rss_max = rss.last().copied().unwrap_or(f64::NAN);
    eprintln!(
        "  RSS per live session: median {rss_median:.0} MiB, max {rss_max:.0} MiB ({} samples)",
        rss.len()
    );

    let mut live: Vec<f64> = samples.iter().map(|s| s.1 as f64).collect();
    let live_mean = live.iter().sum::<f64>() / live.len().max(1) as f64;
    let live_p99 = quantile(&mut live, 0.99);
    let live_max = live.last().copied().unwrap_or(0.0);
    eprintln!(
        "  live sessions: mean {live_mean:.2}, p99 {live_p99:.0}, max {live_max:.0} of {minds}"
    );
    let buckets = 10;
    let line: Vec<String> = (0..buckets)
        .map(|b| {
            let (lo, hi) = (
                wall_s * b as f64 / buckets as f64,
                wall_s * (b + 1) as f64 / buckets as f64,
            );
            let in_bucket: Vec<usize> = samples
                .iter()
                .filter(|s| s.0 >= lo && s.0 < hi)
                .map(|s| s.1)
                .collect();
            let mean = in_bucket.iter().sum::<usize>() as f64 / in_bucket.len().max(1) as f64;
            format!("{mean:.1}/{}", in_bucket.iter().max().copied().unwrap_or(0))
        })
        .collect();
    eprintln!(
        "  live over time (mean/max per tenth of the run): {}",
        line.join("  ")
    );
    Occupancy {
        rss_median,
        rss_max,
        live_mean,
    }
}

/// Prints the parks by reason and the resumes; returns the parks the memory budget forced.
fn report_parks(events: &[PoolEvent]) -> usize {
    let count = |f: &dyn Fn(&ParkReason) -> bool| {
        events
            .iter()
            .filter(|e| matches!(e, PoolEvent::Parked { reason, .. } if f(reason)))
            .count()
    };
    let idle = count(&|r| matches!(r, ParkReason::Idle(_)));
    let memory = count(&|r| matches!(r, ParkReason::MemoryBudget));
    let process = count(&|r| matches!(r, ParkReason::ProcessBudget));
    let resumes = events
        .iter()
        .filter(|e| matches!(e, PoolEvent::Resumed { .. }))
        .count();
    eprintln!(
        "  parks: {idle} idle (sweep), {memory} memory budget, {process} process budget; \
         resumes: {resumes}"
    );
    memory
}

/// Turn latencies in milliseconds.
#[derive(Clone, Copy)]
struct Latency {
    w50: f64,
    r50: f64,
    a50: f64,
    a95: f64,
    resumed_share: f64,
}

fn report_latency(turns: &[TurnSample]) -> Latency {
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let mut warm: Vec<f64> = turns
        .iter()
        .filter(|t| !t.resumed)
        .map(|t| ms(&t.wall))
        .collect();
    let mut resumed: Vec<f64> = turns
        .iter()
        .filter(|t| t.resumed)
        .map(|t| ms(&t.wall))
        .collect();
    let resumed_share = resumed.len() as f64 / turns.len().max(1) as f64;
    let (w50, w95) = (quantile(&mut warm, 0.5), quantile(&mut warm, 0.95));
    let (r50, r95) = (quantile(&mut resumed, 0.5), quantile(&mut resumed, 0.95));
    let mut all: Vec<f64> = turns.iter().map(|t| ms(&t.wall)).collect();
    let (a50, a95) = (quantile(&mut all, 0.5), quantile(&mut all, 0.95));
    eprintln!(
        "  turn latency (turn() call to return, sim replies at once): warm {} turns p50 {w50:.0} ms \
         p95 {w95:.0} ms; resumed {} turns ({:.0}%) p50 {r50:.0} ms p95 {r95:.0} ms; all p50 \
         {a50:.0} ms p95 {a95:.0} ms",
        warm.len(),
        resumed.len(),
        resumed_share * 100.0
    );
    eprintln!(
        "  added latency of a resumed turn (resumed minus warm p50): p50 {:.0} ms, p95 {:.0} ms",
        r50 - w50,
        r95 - w50
    );
    Latency {
        w50,
        r50,
        a50,
        a95,
        resumed_share,
    }
}

fn report_capacity(
    run: &Run,
    rate: f64,
    occupancy: &Occupancy,
    latency: &Latency,
    memory_parks: usize,
) {
    let (config, minds, speedup) = (&run.config, run.minds, run.speedup);
    let Occupancy {
        rss_median,
        rss_max,
        live_mean,
    } = *occupancy;
    let Latency {
        w50,
        r50,
        a50,
        a95,
        resumed_share,
    } = *latency;
    // Extrapolation 1, linear: the budget is the bottleneck, so (memory per Mind) = budget
    // held / Minds served at this turn rate and latency; 4 GiB holds 4096 / that.
    let per_mind = live_mean * rss_median / minds as f64;
    eprintln!(
        "  memory held per Mind (mean live x median RSS / Minds): {per_mind:.1} MiB; \
         {:.0} Minds fill {TARGET_MIB} MiB on average",
        TARGET_MIB / per_mind
    );
    // Extrapolation 2, demand with headroom: each Mind is live a fraction f of the time,
    // independently; a 4 GiB pool holds C children at the max observed RSS (the budget check
    // reserves the configured estimate for a new one). The largest N whose live count exceeds C
    // at most 1% of the time keeps the turns at the latency measured here (beyond it, turns wait
    // for parks and the pool parks more sessions early).
    let f = live_mean / minds as f64;
    let capacity = ((TARGET_MIB - config.per_process_mib as f64) / rss_max).floor() as usize + 1;
    let mut n = 1;
    while binomial_tail(n + 1, f, capacity) <= 0.01 && n < 1_000_000 {
        n += 1;
    }
    eprintln!(
        "  => in {TARGET_MIB} MiB: {capacity} live children at {rss_max:.0} MiB each; with each Mind live \
         {:.1}% of the time (this run's policy and turn rate), about {n} Minds at {rate:.0} turns per Mind-hour \
         before the live count exceeds {capacity} more than 1% of the time; latency target met: p50 {a50:.0} ms, \
         p95 {a95:.0} ms per turn ({:.0}% of turns resumed, each adding ~{:.0} ms)",
        f * 100.0,
        resumed_share * 100.0,
        r50 - w50
    );
    eprintln!(
        "     (model: Minds independent, binomial live count; the bench's own budget of {} MiB bound {} \
         times; compressed time counts turns {speedup}x longer than they are, so f is an over-estimate)",
        config.memory_budget_mib, memory_parks
    );
}
