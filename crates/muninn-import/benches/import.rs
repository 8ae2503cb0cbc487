//! Peak memory (and throughput) of importing Claude Code transcripts: the importer's memory must
//! be bounded by its output (requests), not by its input (bytes, line lengths).
//!
//! `cargo bench -p muninn-import --bench import` measures two imports, each in a child process of
//! its own (the bench re-executes itself with `--child`) so that each peak RSS (`VmHWM`) is that
//! import's alone:
//!
//! 1. the recorded transcripts in `MUNINN_BENCH_CLAUDE_DIR` (default
//!    `/work/shared/traces/claude-code`; skipped with a note if absent);
//! 2. a generated Claude-Code-format corpus of `MUNINN_BENCH_IMPORT_BYTES` (default 1 GB) written to
//!    a temporary directory and deleted afterwards: real line shapes (one `assistant` line per
//!    content block repeating `message.id` and `usage`, `user` lines with `tool_result` blocks and
//!    the `toolUseResult` copy), usage from [`muninn_workload::synth::session`], tool outputs of
//!    2–60 KB with one in a hundred of 1–4 MB.
//!
//! 3. a generated Messages API log (`api-log`) of one line of `MUNINN_BENCH_API_LINE_BYTES` (default
//!    56 MiB, within the 64 MiB line limit): a long tool-using conversation of short blocks, the
//!    shape whose decoding cost most per byte. The import may take at most
//!    [`API_LINE_PEAK_PER_BYTE`] times the line in memory beyond its baseline; past that the bench
//!    prints `FAIL` and exits non-zero. (The whole-`Value` decoding this replaced took 10.7
//!    times such a line, `large_lines::` in the tests.)
//!
//! Without `--bench` (as `cargo test --benches` runs it) the corpus is 8 MB and the API line 4 MiB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_import::{ImportOptions, import_paths};
use muninn_testkit::transcript::{api_log_line, timestamp};
use muninn_workload::synth::{SplitMix64, SynthParams, session};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The most memory (beyond the baseline) importing one API log line may take, per byte of the
/// line: the line itself and its read buffer's slack, one message's canonical bytes and one block
/// decoded at a time.
const API_LINE_PEAK_PER_BYTE: u64 = 4;

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The child: import the paths and print one line of figures for the parent.
fn child(paths: &[PathBuf]) {
    let before = status_kib("VmHWM:").unwrap_or(0);
    let started = Instant::now();
    let import = import_paths(paths, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let peak = status_kib("VmHWM:").unwrap_or(0);
    println!(
        "{} {} {} {} {} {} {} {:.6}",
        import.warnings.len(),
        import.stats.files,
        import.stats.lines,
        import.stats.bytes,
        import.stats.requests,
        before,
        peak,
        elapsed
    );
}

struct Measured {
    warnings: u64,
    files: u64,
    lines: u64,
    bytes: u64,
    requests: u64,
    before_kib: u64,
    peak_kib: u64,
    seconds: f64,
}

fn measure(path: &Path) -> Measured {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let f: Vec<&str> = text.split_whitespace().collect();
    let n = |i: usize| f[i].parse::<u64>().unwrap();
    Measured {
        warnings: n(0),
        files: n(1),
        lines: n(2),
        bytes: n(3),
        requests: n(4),
        before_kib: n(5),
        peak_kib: n(6),
        seconds: f[7].parse().unwrap(),
    }
}

fn report(label: &str, m: &Measured) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "{label:<22} {:>7} {:>10} {:>10.1} {:>9} {:>8} {:>9.1} {:>9.1} {:>8.1} {:>8.1}",
        m.files,
        m.lines,
        m.bytes as f64 / 1e6,
        m.requests,
        m.warnings,
        mib(m.before_kib),
        mib(m.peak_kib),
        mib(m.peak_kib.saturating_sub(m.before_kib)),
        m.bytes as f64 / 1e6 / m.seconds.max(1e-9),
    );
}

/// Writes Claude Code sessions into `dir` until they hold `target` bytes; returns the bytes and
/// the longest line's length.
fn generate(dir: &Path, target: u64) -> (u64, usize) {
    // Tool output text, already JSON-escaped, in 64-byte units so that any multiple of 64 is a
    // valid cut (no escape sequence is split).
    let unit = "src/lib.rs:42:    let x = \\\"muninn\\\"; // tool output line\\n";
    let unit = format!("{unit:<64}");
    assert_eq!(unit.len(), 64);
    let text = unit.repeat(4 << 20 >> 6); // 4 MiB
    let params = SynthParams::default();
    let per_file = (target / 16).max(1 << 20);
    let mut rng = SplitMix64::new(7);
    let mut written = 0u64;
    let mut longest = 0usize;
    let mut file_no = 0u64;
    while written < target {
        let sid = format!("00000000-0000-4000-8000-{file_no:012}");
        let trace = session(file_no, 200_000, &params);
        let path = dir.join(format!("{sid}.jsonl"));
        let mut out =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
        let mut bytes = 0u64;
        let common = format!(
            "\"isSidechain\":false,\"userType\":\"external\",\"cwd\":\"/home/u/proj\",\"sessionId\":\"{sid}\",\"version\":\"2.1.39\",\"gitBranch\":\"main\""
        );
        for (j, r) in trace.requests.iter().enumerate() {
            if bytes >= per_file || written + bytes >= target {
                break;
            }
            let ts = timestamp(r.at_ms - 2_000);
            let mut line = if r.boundary {
                format!(
                    "{{\"parentUuid\":null,{common},\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":\"Please carry on with step {j}\"}},\"uuid\":\"u-{j}\",\"timestamp\":\"{ts}\"}}\n"
                )
            } else {
                let big = rng.range(&(0..=99)) == 0;
                let len = if big {
                    rng.range(&(1 << 20..=4 << 20))
                } else {
                    rng.range(&(2_048..=61_440))
                };
                let out_text = &text[..(len as usize & !63).min(text.len())];
                format!(
                    "{{\"parentUuid\":\"a-{}\",{common},\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":[{{\"tool_use_id\":\"toolu_{sid}_{}\",\"type\":\"tool_result\",\"content\":\"{out_text}\",\"is_error\":false}}]}},\"uuid\":\"u-{j}\",\"timestamp\":\"{ts}\",\"toolUseResult\":{{\"stdout\":\"{out_text}\",\"stderr\":\"\",\"interrupted\":false,\"isImage\":false}}}}\n",
                    j - 1,
                    j - 1
                )
            };
            let u = &r.usage;
            let usage = format!(
                "{{\"input_tokens\":{},\"cache_creation_input_tokens\":{},\"cache_read_input_tokens\":{},\"cache_creation\":{{\"ephemeral_5m_input_tokens\":{},\"ephemeral_1h_input_tokens\":0}},\"output_tokens\":{},\"service_tier\":\"standard\"}}",
                u.input, u.cache_write_5m, u.cache_read, u.cache_write_5m, u.output
            );
            // One line per content block, each repeating id and usage, as Claude Code streams them.
            let blocks = [
                "{\"type\":\"thinking\",\"thinking\":\"Let me look at the output.\",\"signature\":\"c2lnbmF0dXJl\"}".to_string(),
                "{\"type\":\"text\",\"text\":\"Running the next command.\"}".to_string(),
                format!("{{\"type\":\"tool_use\",\"id\":\"toolu_{sid}_{j}\",\"name\":\"Bash\",\"input\":{{\"command\":\"cargo test -p muninn-core\"}}}}"),
            ];
            for (b, block) in blocks.iter().enumerate() {
                line.push_str(&format!(
                    "{{\"parentUuid\":\"u-{j}\",{common},\"message\":{{\"model\":\"{}\",\"id\":\"msg_{sid}_{j}\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{block}],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{usage}}},\"requestId\":\"req_{j}\",\"type\":\"assistant\",\"uuid\":\"a-{j}-{b}\",\"timestamp\":\"{}\"}}\n",
                    params.model,
                    timestamp(r.at_ms + b as i64 * 500)
                ));
            }
            longest = longest.max(line.lines().map(str::len).max().unwrap_or(0));
            out.write_all(line.as_bytes()).unwrap();
            bytes += line.len() as u64;
        }
        out.flush().unwrap();
        written += bytes;
        file_no += 1;
    }
    (written, longest)
}

/// Measures the import of one generated API log line; whether its peak stayed within
/// [`API_LINE_PEAK_PER_BYTE`] times the line.
fn measure_api_log_line(target: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.jsonl");
    let line = api_log_line(target as usize);
    std::fs::write(&path, format!("{line}\n")).unwrap();
    let line = line.len() as u64;
    let m = measure(&path);
    report(&format!("api-log line {:.0} MB", line as f64 / 1e6), &m);
    let grown = (m.peak_kib.saturating_sub(m.before_kib)) * 1024;
    let ratio = grown as f64 / line as f64;
    let ok = m.requests == 1 && grown <= API_LINE_PEAK_PER_BYTE * line;
    println!(
        "{} api-log line: {:.1}x the line in memory beyond the baseline (at most {API_LINE_PEAK_PER_BYTE}x), {} request",
        if ok { "ok  " } else { "FAIL" },
        ratio,
        m.requests,
    );
    ok
}

/// The run's title and the table's column names.
fn print_header(full: bool) {
    println!(
        "muninn-import import bench ({})",
        if full {
            "full"
        } else {
            "smoke: pass --bench for the full run"
        }
    );
    println!(
        "each import runs in a child process; peak RSS = its VmHWM; baseline = VmHWM before importing"
    );
    println!();
    println!(
        "{:<22} {:>7} {:>10} {:>10} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8}",
        "input",
        "files",
        "lines",
        "MB",
        "requests",
        "warnings",
        "base MiB",
        "peak MiB",
        "Δ MiB",
        "MB/s"
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let paths: Vec<PathBuf> = args[2..].iter().map(PathBuf::from).collect();
        child(&paths);
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let target: u64 = std::env::var("MUNINN_BENCH_IMPORT_BYTES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(if full { 1_000_000_000 } else { 8_000_000 });
    let recorded = std::env::var_os("MUNINN_BENCH_CLAUDE_DIR").map_or_else(
        || PathBuf::from("/work/shared/traces/claude-code"),
        PathBuf::from,
    );

    print_header(full);
    if recorded.is_dir() {
        report("recorded claude-code", &measure(&recorded));
    } else {
        println!(
            "recorded claude-code   skipped: {} is absent (set MUNINN_BENCH_CLAUDE_DIR)",
            recorded.display()
        );
    }
    // A tenth of the corpus, then all of it: bounded memory means about the same peak for both.
    let mut notes = Vec::new();
    for size in [target / 10, target] {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let (written, longest) = generate(dir.path(), size);
        let generated_in = started.elapsed().as_secs_f64();
        report(
            &format!("generated {:.0} MB", written as f64 / 1e6),
            &measure(dir.path()),
        );
        notes.push(format!(
            "{written} bytes (longest line {:.1} MB) in {generated_in:.1} s",
            longest as f64 / 1e6
        ));
        // Dropping the TempDir deletes the corpus before the next, larger one is written.
        drop(dir);
    }
    let api_line: u64 = std::env::var("MUNINN_BENCH_API_LINE_BYTES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(if full { 56 << 20 } else { 4 << 20 });
    let api_ok = measure_api_log_line(api_line);
    println!();
    println!(
        "generated corpora: {} (tool outputs 2–60 KB, 1 % of 1–4 MB, each twice per line), deleted afterwards; generator peak RSS {:.1} MiB",
        notes.join(", "),
        status_kib("VmHWM:").unwrap_or(0) as f64 / 1024.0
    );
    if !api_ok {
        std::process::exit(1);
    }
}
