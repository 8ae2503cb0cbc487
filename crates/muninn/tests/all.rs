//! The `muninn` binary end to end: the one integration-test binary of this crate.
//!
//! Every test runs the built binary (`CARGO_BIN_EXE_muninn`) on Claude Code transcripts it writes
//! itself into a temporary directory: sessions drawn from [`muninn_workload::synth`] and written line by
//! line in Claude Code's JSONL shape (one `assistant` line per content block repeating `message.id`
//! and `usage`, `user` lines with text or `tool_result` blocks, `compact_boundary` system lines).
//! Nothing is copied from outside the repository.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod client_inputs;
mod closed_loop;
mod crash;
mod crash_points;
mod doctor;
mod failover;
mod host_cli;
mod input_formats;
mod learning;
mod ledger_pages;
mod logs;
mod matrix;
mod security;
mod serving;
mod storage_faults;
mod storage_postgres;
mod storage_runtime;
mod terminal;
mod two_hosts;

use muninn_core::replay::Plan;
use muninn_core::trace::Trace;
use muninn_report::ReplayReport;
use muninn_testkit::transcript::timestamp;
use muninn_workload::synth::{SynthParams, session};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A synthetic trace as a Claude Code session file's lines.
fn claude_lines(sid: &str, trace: &Trace) -> Vec<String> {
    let common = format!(
        "\"isSidechain\":false,\"userType\":\"external\",\"cwd\":\"/home/u/proj\",\"sessionId\":\"{sid}\",\"version\":\"2.1.39\",\"gitBranch\":\"main\""
    );
    let mut lines = Vec::new();
    for (j, r) in trace.requests.iter().enumerate() {
        let asked = timestamp(r.at_ms - 1_000);
        if r.compacted {
            lines.push(format!(
                "{{\"parentUuid\":null,{common},\"type\":\"system\",\"subtype\":\"compact_boundary\",\"content\":\"Conversation compacted\",\"uuid\":\"c-{j}\",\"timestamp\":\"{asked}\"}}"
            ));
        }
        lines.push(if r.boundary {
            format!(
                "{{\"parentUuid\":null,{common},\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":\"Next: step {j}, and mind the \\\"quotes\\\"\"}},\"uuid\":\"u-{j}\",\"timestamp\":\"{asked}\"}}"
            )
        } else {
            format!(
                "{{\"parentUuid\":\"a-{p}\",{common},\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":[{{\"tool_use_id\":\"toolu_{sid}_{p}\",\"type\":\"tool_result\",\"content\":\"ok\\nall tests passed\"}}]}},\"uuid\":\"u-{j}\",\"timestamp\":\"{asked}\"}}",
                p = j - 1
            )
        });
        let u = &r.usage;
        let usage = format!(
            "{{\"input_tokens\":{},\"cache_creation_input_tokens\":{},\"cache_read_input_tokens\":{},\"cache_creation\":{{\"ephemeral_5m_input_tokens\":{},\"ephemeral_1h_input_tokens\":{}}},\"output_tokens\":{},\"service_tier\":\"standard\"}}",
            u.input,
            u.cache_write_5m + u.cache_write_1h,
            u.cache_read,
            u.cache_write_5m,
            u.cache_write_1h,
            u.output
        );
        let blocks = [
            "{\"type\":\"text\",\"text\":\"Running it.\"}".to_string(),
            format!(
                "{{\"type\":\"tool_use\",\"id\":\"toolu_{sid}_{j}\",\"name\":\"Bash\",\"input\":{{\"command\":\"cargo test\"}}}}"
            ),
        ];
        for (b, block) in blocks.iter().enumerate() {
            lines.push(format!(
                "{{\"parentUuid\":\"u-{j}\",{common},\"message\":{{\"model\":\"{}\",\"id\":\"msg_{sid}_{j}\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{block}],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{usage}}},\"requestId\":\"req_{sid}_{j}\",\"type\":\"assistant\",\"uuid\":\"a-{j}-{b}\",\"timestamp\":\"{}\"}}",
                trace.model,
                timestamp(r.at_ms + 300 * b as i64)
            ));
        }
    }
    lines
}

fn write_session(dir: &Path, sid: &str, lines: &[String]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut text = String::new();
    for line in lines {
        let _ = writeln!(text, "{line}");
    }
    let path = dir.join(format!("{sid}.jsonl"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Requests in the two clean sessions.
const CLEAN_REQUESTS: usize = 80 + 45;

/// A project directory of two well-formed sessions on priced models (one compacts, both have idle
/// gaps past the 5-minute TTL).
fn clean_project(root: &Path) -> PathBuf {
    let dir = root.join("clean");
    let params = SynthParams::default();
    let a = session(1, 80, &params);
    write_session(&dir, "11111111-aaaa", &claude_lines("11111111-aaaa", &a));
    let sonnet = SynthParams {
        model: "claude-sonnet-4-5".into(),
        ..SynthParams::default()
    };
    let b = session(2, 45, &sonnet);
    write_session(&dir, "22222222-bbbb", &claude_lines("22222222-bbbb", &b));
    dir
}

fn muninn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> (String, String) {
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(
        out.status.success(),
        "muninn failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn replay_json(paths: &[&Path], extra: &[&str]) -> (ReplayReport, String) {
    let mut args = vec!["replay", "--quiet", "--format", "json"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let (stdout, stderr) = ok(&muninn(&args));
    (serde_json::from_str(&stdout).unwrap(), stderr)
}

fn plan_names() -> Vec<String> {
    Plan::all().iter().map(Plan::to_string).collect()
}

#[test]
fn replay_table_has_every_policy_row_and_the_assumptions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (stdout, _) = ok(&muninn(&["replay", "--quiet", dir.to_str().unwrap()]));
    assert!(
        stdout.contains(&format!("2 traces, {CLEAN_REQUESTS} requests replayed")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("assumptions: head tokens:")),
        "{stdout}"
    );
    for name in plan_names() {
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&name)),
            "no row for {name}:\n{stdout}"
        );
    }
}

/// Every table report carries the sensitivity of the default policy to the rehydration and the
/// minimum segment, and says where its advantage over recorded disappears; with no compaction in
/// the traces the rehydration is assumed and stderr says so.
#[test]
fn replay_table_prints_the_sensitivity_to_rehydration() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (stdout, stderr) = ok(&muninn(&["replay", "--quiet", dir.to_str().unwrap()]));
    assert!(
        stdout.contains("sensitivity: the default policy"),
        "{stdout}"
    );
    for size in ["4000", "10000", "20000", "40000", "80000"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.trim_start().starts_with(size) && l.contains('|')),
            "no row for {size}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("disappears from a rehydration of")
            || stdout.contains("costs less than recorded at every rehydration"),
        "{stdout}"
    );
    assert!(stderr.contains("rehydration:"), "{stderr}");
}

#[test]
fn replay_json_parses_and_no_policy_beats_the_optimum() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (report, _) = replay_json(&[&dir], &[]);
    assert_eq!(report.traces, 2);
    assert_eq!(report.requests, CLEAN_REQUESTS as u64);
    assert!(report.unpriced.is_empty());
    let names: Vec<&str> = report.rows.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(names, plan_names());
    for row in &report.rows {
        let ratio = row.ratio_to_optimum.unwrap();
        // The optimum masks too: no policy, clearing tool results or not, costs less.
        assert!(ratio >= 0.999, "{} costs {ratio} × the optimum", row.policy);
        assert_eq!(row.requests, CLEAN_REQUESTS as u64, "{}", row.policy);
        assert!(row.cost_micro_usd > 0, "{}", row.policy);
    }
}

#[test]
fn replay_csv_has_a_header_and_one_line_per_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (stdout, _) = ok(&muninn(&[
        "replay",
        "--quiet",
        "--format",
        "csv",
        dir.to_str().unwrap(),
    ]));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("policy,cost_usd,ratio_to_optimum,"));
    let columns = lines[0].split(',').count();
    let policies: Vec<&str> = lines[1..]
        .iter()
        .map(|l| {
            assert_eq!(l.split(',').count(), columns, "{l}");
            l.split(',').next().unwrap()
        })
        .collect();
    assert_eq!(policies, plan_names());
}

#[test]
fn replay_runs_only_the_policies_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (report, _) = replay_json(&[&dir], &["--policy", "ski-rental,optimum"]);
    let names: Vec<&str> = report.rows.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(names, ["ski-rental", "optimum"]);
    assert_eq!(report.rows[1].ratio_to_optimum, Some(1.0));
    // No `recorded` row, so nothing to compare with.
    assert_eq!(report.rows[0].ratio_to_recorded, None);
}

#[test]
fn a_bad_policy_fails_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    for (spec, expected) in [
        ("bogus", "unknown policy \"bogus\""),
        ("threshold", "policy threshold needs an argument"),
        (
            "ceiling:lots",
            "ceiling:lots: expected a positive token count",
        ),
    ] {
        let out = muninn(&["replay", "--quiet", "--policy", spec, dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--policy {spec} succeeded");
        assert!(stderr.contains(expected), "--policy {spec}: {stderr}");
        assert!(out.stdout.is_empty(), "--policy {spec} printed a report");
    }
}

#[test]
fn an_unknown_model_is_a_warning_and_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let unknown = SynthParams {
        model: "claude-imaginary-9".into(),
        ..SynthParams::default()
    };
    let t = session(3, 12, &unknown);
    write_session(&dir, "33333333-cccc", &claude_lines("33333333-cccc", &t));
    let (report, stderr) = replay_json(&[&dir], &[]);
    let warning = stderr
        .lines()
        .find(|l| l.contains("claude-imaginary-9"))
        .unwrap_or_else(|| panic!("no warning naming the model:\n{stderr}"));
    assert!(warning.starts_with("warning:"), "{warning}");
    assert!(warning.contains("12 requests are left out"), "{warning}");
    assert_eq!(report.unpriced.len(), 1);
    assert_eq!(report.unpriced[0].model, "claude-imaginary-9");
    assert_eq!(report.unpriced[0].requests, 12);
    // Left out, not priced at zero: the replayed requests are the priced ones only, and the costs
    // are exactly those of the clean sessions alone.
    assert_eq!(report.requests, CLEAN_REQUESTS as u64);
    let clean_dir = clean_project(&tmp.path().join("again"));
    let (clean, _) = replay_json(&[&clean_dir], &[]);
    for (a, b) in report.rows.iter().zip(&clean.rows) {
        assert_eq!(a.requests, CLEAN_REQUESTS as u64, "{}", a.policy);
        assert_eq!(a.cost_micro_usd, b.cost_micro_usd, "{}", a.policy);
    }
    // The table says so too.
    let (table, _) = ok(&muninn(&["replay", "--quiet", dir.to_str().unwrap()]));
    assert!(
        table.contains("not priced: model \"claude-imaginary-9\" (12 requests)"),
        "{table}"
    );
}

#[test]
fn a_malformed_line_is_reported_with_file_and_line_and_the_run_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let t = session(4, 10, &SynthParams::default());
    let mut lines = claude_lines("44444444-dddd", &t);
    // Line 3: a line cut off mid-object, as a crash while writing leaves it.
    lines.insert(
        2,
        "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":".into(),
    );
    let path = write_session(&dir, "44444444-dddd", &lines);
    let (report, stderr) = replay_json(&[&dir], &[]);
    let expected = format!("warning: {}:3: ", path.display());
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in:\n{stderr}"
    );
    assert_eq!(report.warnings, 1);
    assert_eq!(report.traces, 3);
    assert_eq!(report.requests, (CLEAN_REQUESTS + 10) as u64);
}

#[test]
fn plot_writes_an_svg() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let svg = tmp.path().join("x.svg");
    let (_, stderr) = ok(&muninn(&[
        "replay",
        "--quiet",
        "--plot",
        svg.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]));
    assert!(stderr.contains("plot written to"), "{stderr}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("<svg"),
        "not an SVG: {}",
        &text[..text.len().min(200)]
    );
    assert!(text.trim_end().ends_with("</svg>"));
    assert!(text.contains("ski-rental"), "the legend names the policies");
}

#[test]
fn import_then_replay_stored_traces_gives_the_same_costs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let data = tmp.path().join("data");
    let (stdout, _) = ok(&muninn(&[
        "import",
        "--quiet",
        "--data-dir",
        data.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]));
    assert!(
        stdout.starts_with(&format!("imported {CLEAN_REQUESTS} requests in 2 traces")),
        "{stdout}"
    );
    let stored = data.join("traces");
    assert_eq!(std::fs::read_dir(&stored).unwrap().count(), 2);
    let (original, _) = replay_json(&[&dir], &[]);
    let (again, _) = replay_json(&[&stored], &[]);
    assert_eq!(again, original);
}

#[test]
fn check_cache_prints_the_agreement_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (stdout, _) = ok(&muninn(&["check-cache", "--quiet", dir.to_str().unwrap()]));
    let parts = stdout.lines().next().unwrap();
    for part in ["tuning part", "set-aside part", "all"] {
        assert!(parts.contains(part), "{parts}");
    }
    let header = stdout
        .lines()
        .find(|l| l.starts_with("predictor / threads"))
        .unwrap_or_else(|| panic!("no header:\n{stdout}"));
    for column in ["requests", "agreement", "read error"] {
        assert!(header.contains(column), "{header}");
    }
    for label in [
        "cache model / main",
        "cache model / all",
        "naive TTL rule / main",
        "naive TTL rule / all",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} row:\n{stdout}"));
        // Two cells of figures (a part without requests shows dashes) and the total.
        assert!(line.matches('%').count() >= 4, "{line}");
        assert_eq!(line.matches('|').count(), 3, "{line}");
    }
    assert!(stdout.contains("disagreements by class"), "{stdout}");
    assert!(!stdout.contains("PASS"), "no goal, no verdict:\n{stdout}");
}

#[test]
fn check_cache_fails_on_a_missed_goal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let dir = dir.to_str().unwrap();
    let (stdout, _) = ok(&muninn(&[
        "check-cache",
        "--quiet",
        "--goal-agreement",
        "0",
        "--goal-read-error",
        "1e9",
        dir,
    ]));
    assert!(
        stdout.contains("PASS") && !stdout.contains("FAIL"),
        "{stdout}"
    );
    let out = muninn(&["check-cache", "--quiet", "--goal-agreement", "1.01", dir]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !out.status.success(),
        "a goal above 100% must fail:\n{stdout}"
    );
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("goal(s) missed"),
        "the exit says why"
    );
}

#[test]
fn check_cache_scores_causes_against_the_providers_labels() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../muninn-import/tests/fixtures/claude-diagnostics");
    let fixture = fixture.to_str().unwrap();
    let (stdout, _) = ok(&muninn(&[
        "check-cache",
        "--quiet",
        "--goal-cause-agreement",
        "0.6",
        fixture,
    ]));
    // A compaction and a model switch are named as the API named them; a tool change no
    // transcript line shows, which read nothing of the prefix the model expected in a session
    // whose tools head the model never saw (it opened cold), is a prefix change of unknown level:
    // without a head known, a read of nothing does not say where the prompt diverged.
    assert!(stdout.contains("all 3 of 3 (100.00%)"), "{stdout}");
    assert!(
        stdout.contains("agreeing at the provider's level (the rest tools or system, or a prefix change of unknown level): tuning 0 of 0 (0 tools or system) | set aside 2 of 3 (0 tools or system) | all 2 of 3 (0 tools or system)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("PASS set aside part: causes agree"),
        "{stdout}"
    );
    let out = muninn(&[
        "check-cache",
        "--quiet",
        "--goal-cause-agreement",
        "1.01",
        fixture,
    ]);
    // A goal above the agreement fails the command.
    assert!(!out.status.success());
    // Traces without any label cannot meet a cause goal.
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let out = muninn(&[
        "check-cache",
        "--quiet",
        "--goal-cause-agreement",
        "0",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("FAIL miss causes: no request carries"),
        "{stdout}"
    );
}

#[test]
fn replay_goals_print_pass_or_fail_and_set_the_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let dir = dir.to_str().unwrap();
    let (stdout, _) = ok(&muninn(&[
        "replay",
        "--quiet",
        "--goal-vs-optimum",
        "100",
        "--goal-vs-recorded",
        "100",
        dir,
    ]));
    assert_eq!(stdout.matches("PASS ski-rental").count(), 2, "{stdout}");
    let out = muninn(&["replay", "--quiet", "--goal-vs-optimum", "0.5", dir]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !out.status.success(),
        "nothing beats the optimum by half:\n{stdout}"
    );
    assert!(stdout.contains("FAIL ski-rental ÷ optimum"), "{stdout}");
    // A goal on a ratio the run did not measure fails rather than passing silently.
    let out = muninn(&[
        "replay",
        "--quiet",
        "--policy",
        "ski-rental",
        "--goal-vs-recorded",
        "9",
        dir,
    ]);
    assert!(!out.status.success());
}

#[test]
fn replay_breaks_down_by_day_session_model_kind_and_thread_and_the_rows_add_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (report, _) = replay_json(&[&dir], &["--policy", "recorded"]);
    let recorded = report.rows[0].cost_micro_usd;
    for by in ["day", "session", "model", "kind", "thread"] {
        let (stdout, _) = ok(&muninn(&[
            "replay",
            "--quiet",
            "--by",
            by,
            "--format",
            "json",
            dir.to_str().unwrap(),
        ]));
        let slices: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
        let total: i64 = slices
            .iter()
            .map(|s| s["cost_micro_usd"]["recorded"].as_i64().unwrap())
            .sum();
        assert_eq!(total, recorded, "--by {by}");
        let requests: u64 = slices.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
        assert_eq!(requests, CLEAN_REQUESTS as u64, "--by {by}");
        if by == "kind" {
            // Keyed by the kind's stable name (`ThreadKind::as_str`).
            let keys: Vec<&str> = slices.iter().map(|s| s["key"].as_str().unwrap()).collect();
            assert!(
                keys.iter()
                    .all(|k| ["main", "subagent", "compaction", "mind"].contains(k))
                    && keys.contains(&"main"),
                "{keys:?}"
            );
        }
        assert!(
            slices[0]["cost_micro_usd"]["ski-rental"].is_i64(),
            "{stdout}"
        );
    }
    let (models, _) = ok(&muninn(&[
        "replay",
        "--quiet",
        "--by",
        "model",
        dir.to_str().unwrap(),
    ]));
    assert!(
        models.contains("claude-sonnet-4-5") && models.contains("total"),
        "{models}"
    );
    // --part keeps one part of the fixed split: both sessions here are set aside
    // (`muninn_core::split::part_of`).
    let (tuning, _) = replay_json(&[&dir], &["--part", "tuning", "--policy", "recorded"]);
    let (set_aside, _) = replay_json(&[&dir], &["--part", "set-aside", "--policy", "recorded"]);
    assert_eq!(
        (tuning.requests, set_aside.requests),
        (0, CLEAN_REQUESTS as u64)
    );
    assert_eq!(set_aside.rows[0].cost_micro_usd, recorded);
    // --since far in the future leaves nothing; far in the past, everything.
    let (later, _) = replay_json(&[&dir], &["--since", "2100-01-01", "--policy", "recorded"]);
    assert_eq!((later.requests, later.rows[0].cost_micro_usd), (0, 0));
    let (all, _) = replay_json(&[&dir], &["--since", "2000-01-01", "--policy", "recorded"]);
    assert_eq!(all.rows[0].cost_micro_usd, recorded);
}

#[test]
fn replay_vs_ccusage_reads_the_files_both_ways() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (report, _) = replay_json(&[&dir], &["--policy", "recorded"]);
    let (stdout, _) = ok(&muninn(&[
        "replay",
        "--quiet",
        "--vs-ccusage",
        "--format",
        "json",
        dir.to_str().unwrap(),
    ]));
    let c: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(c["requests"], CLEAN_REQUESTS as u64);
    // muninn's reading is what replay reports as recorded.
    assert_eq!(
        c["muninn_micro_usd"].as_i64(),
        Some(report.rows[0].cost_micro_usd)
    );
    let parts = c["from_output_micro_usd"].as_i64().unwrap()
        + c["from_1h_writes_micro_usd"].as_i64().unwrap();
    assert_eq!(
        c["muninn_micro_usd"].as_i64().unwrap() - c["ccusage_micro_usd"].as_i64().unwrap(),
        parts
    );
}
