//! Turn latency of the long-lived CLI process (this crate) against spawning a new
//! `claude -p --resume` per turn (the design it replaces), side by side against the in-process
//! simulator; the driver's own overhead per turn; and the live child's memory.
//!
//! Bounded: `MUNINN_BENCH_TURNS` turns per mode (default 10), one conversation each, the two
//! modes alternated over `MUNINN_BENCH_REPS` repetitions (default 2). Needs the real CLI
//! (`MUNINN_CLAUDE_BIN` or the install script's path); without it, prints a note and exits 0.
//! Figures go to stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_backend::{Backend, SessionSpec, TurnInput};
use muninn_claude_cli::{ClaudeCliBackend, CliConfig, Secret, vm_rss_kb};
use muninn_core::cache::Ttl;
use muninn_sim::sim::SimConfig;
use muninn_testkit::peers::claude_cli_path;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const KEY: &str = "sk-bench";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn system() -> String {
    format!(
        "You are MUNINN-BENCH. {}",
        (0..400)
            .map(|i| format!("Doctrine line {i}: keep the cache warm."))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn session_id(mode: u8, rep: usize) -> String {
    format!("b0000000-0000-4000-8000-{mode:02x}{rep:010x}")
}

/// One conversation with a long-lived process: per-turn wall time and driver overhead.
async fn long_lived(
    bin: &Path,
    base_url: &str,
    dir: &Path,
    turns: usize,
    rep: usize,
) -> (Vec<Duration>, Vec<Duration>, Option<u64>) {
    let config = CliConfig::new(bin, dir, base_url, Secret::new(KEY), session_id(1, rep));
    let mut b = ClaudeCliBackend::new(config);
    let spec = SessionSpec {
        model: String::new(),
        system: vec![system()],
        tools: Vec::new(),
        output_schema: None,
        system_ttl: Ttl::FiveMinutes,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 1024,
    };
    // Measured from `start`, as the per-turn design pays start-up on every turn: the first
    // turn's figure includes the process start (which `start` begins ahead of the turn).
    let mut started = Instant::now();
    b.start(spec).await.unwrap();
    let mut walls = Vec::new();
    let mut overheads = Vec::new();
    for i in 1..=turns {
        b.turn(TurnInput::text(format!("Turn {i}: please answer briefly.")))
            .await
            .unwrap();
        walls.push(started.elapsed());
        let r = b.last_report().unwrap();
        overheads.push(r.to_write + r.from_result);
        started = Instant::now();
    }
    let pid = b.child_pid().await;
    let rss = pid.and_then(vm_rss_kb);
    b.shutdown().await;
    (walls, overheads, rss)
}

/// One conversation spawning `claude -p` per turn (`--session-id`, then `--resume`): spawn to
/// exit.
fn spawn_per_turn(
    bin: &Path,
    base_url: &str,
    dir: &Path,
    turns: usize,
    rep: usize,
) -> Vec<Duration> {
    let home = dir.join("home");
    let work = dir.join("work");
    for d in [home.join(".claude"), dir.join("tmp"), work.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    let id = session_id(2, rep);
    let system = system();
    (1..=turns)
        .map(|i| {
            let started = Instant::now();
            let out = std::process::Command::new(bin)
                .args(["-p", "--output-format", "stream-json", "--verbose"])
                .arg(if i == 1 { "--session-id" } else { "--resume" })
                .arg(&id)
                .arg("--system-prompt")
                .arg(&system)
                .arg("--tools=")
                .arg("--")
                .arg(format!("Turn {i}: please answer briefly."))
                .current_dir(&work)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("HOME", &home)
                .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
                .env("TMPDIR", dir.join("tmp"))
                .env("ANTHROPIC_BASE_URL", base_url)
                .env("ANTHROPIC_API_KEY", KEY)
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
                .env("CLAUDE_CODE_PROMPT_CACHE_TTL", "5m")
                .env("DISABLE_AUTO_COMPACT", "1")
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .unwrap();
            assert!(out.status.success(), "spawn-per-turn turn {i} failed");
            started.elapsed()
        })
        .collect()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let Some(bin) = claude_cli_path() else {
        eprintln!("turn_latency: SKIP, Claude Code CLI not found (set MUNINN_CLAUDE_BIN)");
        return;
    };
    let turns = env_usize("MUNINN_BENCH_TURNS", 10).max(2);
    let reps = env_usize("MUNINN_BENCH_REPS", 2).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sim = rt
        .block_on(muninn_sim::spawn(
            "127.0.0.1:0".parse().unwrap(),
            SimConfig::default(),
        ))
        .unwrap();
    let base_url = sim.base_url();
    let (mut b_first, mut b_later, mut b_over, mut rss) = (vec![], vec![], vec![], vec![]);
    let (mut a_first, mut a_later) = (vec![], vec![]);
    for rep in 0..reps {
        let dir = tempfile::tempdir().unwrap();
        let (walls, over, r) = rt.block_on(long_lived(
            &bin,
            &base_url,
            &dir.path().join("b"),
            turns,
            rep,
        ));
        b_first.push(walls[0]);
        b_later.extend_from_slice(&walls[1..]);
        b_over.extend(over);
        rss.extend(r);
        let walls = spawn_per_turn(&bin, &base_url, &dir.path().join("a"), turns, rep);
        a_first.push(walls[0]);
        a_later.extend_from_slice(&walls[1..]);
    }
    let (bl, al) = (median(&mut b_later), median(&mut a_later));
    eprintln!("turn_latency: {turns} turns x {reps} reps, against the in-process sim (medians)");
    eprintln!("  mode                         turn 1        turns 2..{turns}");
    eprintln!(
        "  spawn-per-turn (-p --resume) {:>8.1} ms   {:>8.1} ms (spawn to exit)",
        ms(median(&mut a_first)),
        ms(al)
    );
    eprintln!(
        "  long-lived (this crate)      {:>8.1} ms   {:>8.1} ms (turn() call to return; turn 1 from start())",
        ms(median(&mut b_first)),
        ms(bl)
    );
    eprintln!(
        "  ratio, later turns: {:.1}x",
        al.as_secs_f64() / bl.as_secs_f64().max(1e-9)
    );
    let max_over = b_over.iter().max().copied().unwrap_or_default();
    eprintln!(
        "  driver overhead per turn (call->stdin write + result line->return): median {:.3} ms, max {:.3} ms",
        ms(median(&mut b_over)),
        ms(max_over)
    );
    eprintln!("  child VmRSS after {turns} turns: {rss:?} kB");
}
