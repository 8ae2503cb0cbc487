//! The formats beyond transcripts and rollouts through the binary: detection, `--input-format`
//! and `--model`, on `muninn-import`'s fixtures (stream-json from the real CLI, an API log from
//! `muninn sim-api`, a TraceLab CSV).

use super::*;

fn import_fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../muninn-import/tests/fixtures")
        .join(rel)
}

#[test]
fn import_detects_each_new_format() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let files = [
        import_fixture("stream-json/runs.jsonl"),
        import_fixture("api-log/proxy.jsonl"),
        import_fixture("tracelab/rounds.csv"),
    ];
    let mut args = vec!["import", "--quiet", "--data-dir", data.to_str().unwrap()];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let (stdout, stderr) = ok(&muninn(&args));
    // 4 requests in 2 runs, 9 in a main thread and a sub-agent, 6 rounds in 2 sessions.
    assert!(
        stdout.starts_with("imported 19 requests in 6 traces from 3 files"),
        "{stdout}"
    );
    assert_eq!(stderr, "");
}

#[test]
fn input_format_forces_a_format_and_refuses_unknown_names() {
    let csv = import_fixture("tracelab/rounds.csv");
    let csv = csv.to_str().unwrap();
    // Read as the format named, as a user who names it asks: its lines are no stream-json.
    let out = muninn(&[
        "check-cache",
        "--quiet",
        "--input-format",
        "stream-json",
        csv,
    ]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("read as stream-json as asked, though it looks like tracelab-csv"),
        "{stderr}"
    );
    assert!(stderr.contains(":1: malformed line, skipped: "), "{stderr}");

    let out = muninn(&["replay", "--quiet", "--input-format", "csv", csv]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("tracelab-csv"), "{stderr}");
}

/// `check-cache` names the classes as the JSON report stores them (`head_unknown`, not
/// `HeadUnknown`): on the API log, whose cache model's two disagreements are a compaction's head
/// unknown and a sub-agent's first read of a head kept warm outside the log, in the table and in
/// `--disagreements`' lines, with the read classes of each.
#[test]
fn check_cache_prints_the_stored_class_names() {
    let log = import_fixture("api-log/proxy.jsonl");
    let (stdout, _) = ok(&muninn(&[
        "check-cache",
        "--quiet",
        "--disagreements",
        log.to_str().unwrap(),
    ]));
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("disagreements by class"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    // The naive rule's one miss of its own, a compaction, is a class of the table too.
    assert_eq!(
        table,
        vec!["external_warm_head", "head_unknown", "compaction_or_switch"],
        "{stdout}"
    );
    let mut listed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": recorded read "))
        .map(|l| l.rsplit(" — ").next().unwrap_or_default())
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        vec!["external_warm_head", "head_unknown"],
        "{stdout}"
    );
    assert!(
        stdout.contains("(head), model 0 (none) — "),
        "read classes by their stored names:\n{stdout}"
    );
}

/// TraceLab records no model: without `--model` its rounds are unpriced (left out, and said so),
/// with it they are replayed.
#[test]
fn model_names_the_model_of_a_tracelab_csv() {
    let csv = import_fixture("tracelab/rounds.csv");
    let (unnamed, _) = replay_json(&[&csv], &["--policy", "recorded"]);
    assert_eq!(unnamed.unpriced.len(), 1);
    assert_eq!(unnamed.unpriced[0].model, "unknown");
    assert_eq!(unnamed.unpriced[0].requests, 6);
    let (named, _) = replay_json(
        &[&csv],
        &[
            "--policy",
            "recorded",
            "--input-format",
            "tracelab-csv",
            "--model",
            "claude-sonnet-4-6",
        ],
    );
    assert!(named.unpriced.is_empty());
    assert_eq!(named.requests, 6);
    assert!(named.rows[0].cost_micro_usd > 0);
}

/// `check-cache` with goals on input holding no main-thread request (here a transcript whose
/// first answer has not come yet; or every request skipped, or sub-agents only) fails, as the
/// cause goal does without a label: it exited 0 without a word on the goals.
#[test]
fn check_cache_goals_fail_when_there_is_nothing_to_check() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.jsonl");
    let line = r#"{"type":"user","sessionId":"s","uuid":"u1","timestamp":"2026-02-10T10:00:01.000Z","message":{"role":"user","content":"hi"}}"#;
    std::fs::write(&path, format!("{line}\n")).unwrap();
    let path = path.to_str().unwrap();
    let out = muninn(&["check-cache", "--quiet", "--goal-agreement", "0.9", path]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("FAIL: no main-thread request in any part"),
        "{stdout}"
    );
    // Without goals there is nothing to fail.
    ok(&muninn(&["check-cache", "--quiet", path]));
}

/// One file that cannot be read (a link to `/proc/self/mem`, an I/O error to any reader) beside
/// a good one: the import goes on, and its summary says how many files it skipped so; the
/// warning names the file and the cause. It aborted the whole import before.
#[test]
fn import_skips_an_unreadable_file_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, input) = (tmp.path().join("data"), tmp.path().join("in"));
    std::fs::create_dir(&input).unwrap();
    std::fs::copy(import_fixture("api-log/proxy.jsonl"), input.join("a.jsonl")).unwrap();
    let unreadable = input.join("b.jsonl");
    std::os::unix::fs::symlink("/proc/self/mem", &unreadable).unwrap();
    let args = [
        "import",
        "--quiet",
        "--data-dir",
        data.to_str().unwrap(),
        input.to_str().unwrap(),
    ];
    let (stdout, stderr) = ok(&muninn(&args));
    assert!(
        stdout.starts_with(
            "imported 9 requests in 2 traces from 1 files (1 unreadable files skipped)"
        ),
        "{stdout}"
    );
    let cause = std::io::Error::from_raw_os_error(5);
    assert_eq!(
        stderr,
        format!(
            "warning: {}:0: could not be read, skipped: {cause}\n\
             warning: 1 unreadable files skipped; the rest imported\n",
            unreadable.display()
        )
    );
}

/// Runs muninn with `args`; fails the test if it has not ended within 60 seconds.
fn muninn_within_bound(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("muninn {args:?} did not end within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `replay --vs-ccusage` walks its own way through the folders it is given: it followed links
/// into folders, so two links to the folder they are in made the walk double at each level
/// (it did not end). It follows none below the top now, as the import does, and reads each
/// file once.
#[test]
fn replay_vs_ccusage_follows_no_link_into_a_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    for name in ["here", "again"] {
        std::os::unix::fs::symlink(".", dir.join(name)).unwrap();
    }
    let args = ["replay", "--quiet", "--vs-ccusage", "--format", "json"];
    let out = muninn_within_bound(&[&args[..], &[dir.to_str().unwrap()]].concat());
    let (stdout, _) = ok(&out);
    let c: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(c["requests"], CLEAN_REQUESTS as u64);
}

/// A usage past any real request's (2^64 − 1 output tokens, on two responses) in a file read by
/// `replay --vs-ccusage`: its sums overflowed (a panic in a debug build, a wrapped figure in a
/// release one). Such lines are left out, as the import leaves them out, and counted.
#[test]
fn replay_vs_ccusage_leaves_out_usage_past_the_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let (clean, _) = ok(&muninn(&[
        "replay",
        "--quiet",
        "--vs-ccusage",
        "--format",
        "json",
        dir.to_str().unwrap(),
    ]));
    let line = |n: u32| {
        format!(
            r#"{{"type":"assistant","sessionId":"huge","uuid":"h{n}","timestamp":"2026-02-10T10:00:0{n}.000Z","message":{{"model":"claude-opus-4-6","id":"msg_huge_{n}","content":[{{"type":"text","text":"x"}}],"usage":{{"input_tokens":3,"output_tokens":18446744073709551615}}}}}}"#
        )
    };
    std::fs::write(
        dir.join("huge.jsonl"),
        format!("{}\n{}\n", line(1), line(2)),
    )
    .unwrap();
    let out = muninn(&[
        "replay",
        "--quiet",
        "--vs-ccusage",
        "--format",
        "json",
        dir.to_str().unwrap(),
    ]);
    let (stdout, _) = ok(&out);
    let (mut clean, got): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&clean).unwrap(),
        serde_json::from_str(&stdout).unwrap(),
    );
    clean["past_limits"] = 2.into();
    assert_eq!(got, clean);
}

/// `replay --vs-ccusage` read each file whole into memory: a walked link to `/dev/zero` was read
/// until memory ran out, and a file holding one line of invalid UTF-8 failed the whole
/// comparison. Files are opened as the import opens them (a device is named and skipped) and
/// read a line at a time (the bad line is passed over, the rest of its file read).
#[test]
fn replay_vs_ccusage_reads_no_device_and_passes_over_a_bad_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = clean_project(tmp.path());
    let args = ["replay", "--quiet", "--vs-ccusage", "--format", "json"];
    let (clean, _) = ok(&muninn(&[&args[..], &[dir.to_str().unwrap()]].concat()));
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.jsonl")).unwrap();
    let session = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
        .unwrap();
    let mut text = std::fs::read(&session).unwrap();
    text.splice(
        0..0,
        b"{\"type\":\"user\",\"x\":\"\xff\"}\n".iter().copied(),
    );
    std::fs::write(&session, text).unwrap();
    let out = muninn_within_bound(&[&args[..], &[dir.to_str().unwrap()]].concat());
    let (stdout, stderr) = ok(&out);
    assert_eq!(stdout, clean);
    assert!(
        stderr.contains("zero.jsonl: could not be read, skipped: not a file nor a folder"),
        "{stderr}"
    );
}

/// `replay --closed-loop` over a folder holding a named pipe named like a ledger export: it
/// opened the pipe, which with no writer blocks for ever. It fails at once now, naming the file
/// and why.
#[test]
fn replay_closed_loop_does_not_block_on_a_named_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let pipe = tmp.path().join("ledger.jsonl");
    let made = Command::new("mkfifo").arg(&pipe).status();
    assert!(made.unwrap().success());
    let out = muninn_within_bound(&["replay", "--closed-loop", tmp.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "opening {}: not a file nor a folder (a pipe, socket or device)",
            pipe.display()
        )),
        "{stderr}"
    );
}

/// `--prices` naming something that is no price table was read until memory ran out: a file
/// past 1 MiB is refused naming the path, and a device (here `/dev/zero`) is not read at all.
#[test]
fn prices_past_their_size_limit_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let large = tmp.path().join("prices.toml");
    std::fs::write(&large, "#".repeat(1_048_577)).unwrap();
    let csv = import_fixture("tracelab/rounds.csv");
    for command in ["replay", "check-cache"] {
        for (prices, refused) in [
            (
                large.display().to_string(),
                format!(
                    "reading {}: larger than the limit of 1048576 bytes for a price table",
                    large.display()
                ),
            ),
            (
                "/dev/zero".to_string(),
                "not a file nor a folder (a pipe, socket or device)".to_string(),
            ),
        ] {
            let out = muninn_within_bound(&[
                command,
                "--quiet",
                "--prices",
                &prices,
                csv.to_str().unwrap(),
            ]);
            assert!(!out.status.success());
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert!(stderr.contains(&refused), "{stderr}");
        }
    }
}

/// `--prices` naming a named pipe (`muninn serve` reads its `prices =` through the same code)
/// opened it, which with no writer waits for ever: the command hung with nothing printed. It
/// is refused at once now, naming the path and why.
#[test]
fn prices_naming_a_named_pipe_are_refused_not_waited_on() {
    let tmp = tempfile::tempdir().unwrap();
    let pipe = tmp.path().join("prices.toml");
    let made = Command::new("mkfifo").arg(&pipe).status();
    assert!(made.unwrap().success());
    let csv = import_fixture("tracelab/rounds.csv");
    for command in ["replay", "check-cache"] {
        let out = muninn_within_bound(&[
            command,
            "--quiet",
            "--prices",
            pipe.to_str().unwrap(),
            csv.to_str().unwrap(),
        ]);
        assert!(!out.status.success());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains(&format!("reading {}", pipe.display()))
                && stderr.contains("not a file nor a folder (a pipe, socket or device)"),
            "{stderr}"
        );
    }
}

/// A token option past any real prompt (`u64::MAX`) or a `--decide-before-s` whose milliseconds
/// overflow an `i64` was taken as given, and the replay's arithmetic on it panicked in a debug
/// build (a wrapped, plausible figure in a release one). Each is refused, naming the option.
#[test]
fn replay_options_past_their_limits_are_refused_not_panicked_on() {
    let csv = import_fixture("tracelab/rounds.csv");
    for (option, value) in [
        ("--rehydrate-tokens", "18446744073709551615"),
        ("--head-tokens", "18446744073709551615"),
        ("--ping-tokens", "18446744073709551615"),
        ("--ping-output-tokens", "18446744073709551615"),
        ("--flush-prompt-tokens", "4294967297"),
        ("--flush-output-tokens", "4294967297"),
        ("--ceiling", "4294967297"),
        ("--decide-before-s", "9223372036854775807"),
        ("--decide-before-s", "-9223372036854775807"),
    ] {
        let out = muninn_within_bound(&[
            "replay",
            "--quiet",
            "--model",
            "claude-sonnet-4-5",
            &format!("{option}={value}"),
            csv.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{option}")),
            "{option} {value}: {stderr}"
        );
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {stderr}");
    }
}

/// Each step of a replay judged its trace's TTL over the whole trace, so a replay was quadratic
/// in a session's length: one session of 100,000 requests ran for more than ten minutes (debug
/// build; 200,000 requests of `--policy recorded` alone ran past the bound here). Linear, it
/// takes seconds.
#[test]
fn a_session_of_200_000_requests_replays_within_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("long.csv");
    let mut text =
        String::from("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n");
    for round in 0..200_000_u64 {
        let prefix = 20_000 + (round % 1_000) * 100;
        let sent = if round % 1_000 == 0 { 0 } else { prefix - 100 };
        text.push_str(&format!("s,{round},{sent},{prefix},50,2000\n"));
    }
    std::fs::write(&csv, text).unwrap();
    let out = muninn_within_bound(&[
        "replay",
        "--quiet",
        "--model",
        "claude-sonnet-4-5",
        "--policy",
        "recorded",
        "--format",
        "json",
        csv.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
}

/// Prices at the table's limits (writes at $10⁹ per million tokens) and rounds at the importers'
/// (4 × 10⁹ tokens) cost 4 × 10¹⁸ micro-dollars each: three pass what an `i64` holds. Each
/// plan's sum saturated and was printed as $9,223,372,036,854.78, and each ratio between two
/// such plans as 1.000, like any figure. The replay refuses instead, naming the plan, in every
/// format and broken down by day.
#[test]
fn costs_past_what_muninn_counts_are_refused_not_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let prices = tmp.path().join("prices.toml");
    std::fs::write(
        &prices,
        "[[model]]\nname = \"x\"\ninput = 1000000.0\noutput = 1000000.0\nwrite_5m = 1000.0\n",
    )
    .unwrap();
    let csv = tmp.path().join("rounds.csv");
    let mut text =
        String::from("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n");
    for round in 0..3 {
        text.push_str(&format!("s,{round},0,4000000000,1,1000\n"));
    }
    std::fs::write(&csv, text).unwrap();
    for extra in [
        &["--format", "json"][..],
        &["--format", "csv", "--policy", "recorded"],
        &["--format", "table"],
        &["--by", "day"],
    ] {
        let mut args = vec!["replay", "--quiet", "--model", "x"];
        args.extend(["--prices", prices.to_str().unwrap(), csv.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let out = muninn(&args);
        let (stdout, stderr) = (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        );
        assert!(
            !out.status.success(),
            "{extra:?} printed a saturated sum as a figure:\n{stdout}"
        );
        assert!(
            stderr.contains("plan recorded costs $9223372036854.7754 or more"),
            "{extra:?}: {stderr}"
        );
    }
}

/// `replay --vs-ccusage` at prices within the table's limits (writes at $10⁹ per million
/// tokens) and usages within the import's (4 × 10⁹ tokens written): it added each response's
/// cost as a plain `i64` — three such responses panicked a debug build (`attempt to add with
/// overflow`) and wrapped to a negative figure in a release one — and one response whose cost
/// saturated (4 × 10⁹ tokens written at each TTL and read, all at 1,000× input) was printed
/// as $9,223,372,036,854.78. Both are refused, naming the reading.
#[test]
fn replay_vs_ccusage_refuses_costs_past_what_muninn_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let prices = tmp.path().join("prices.toml");
    std::fs::write(
        &prices,
        "[[model]]\nname = \"x\"\ninput = 1000000.0\noutput = 1000000.0\nwrite_5m = 1000.0\nwrite_1h = 1000.0\nread = 1000.0\n",
    )
    .unwrap();
    let line = |n: usize, usage: &str| {
        format!(
            r#"{{"type":"assistant","sessionId":"s","uuid":"u{n}","timestamp":"2026-02-10T10:00:0{n}.000Z","requestId":"r{n}","message":{{"model":"x","id":"msg_{n}","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
        )
    };
    let written =
        r#"{"input_tokens":3,"cache_creation_input_tokens":4000000000,"output_tokens":1}"#;
    let everything = r#"{"input_tokens":1,"cache_creation_input_tokens":8000000000,"cache_creation":{"ephemeral_5m_input_tokens":4000000000,"ephemeral_1h_input_tokens":4000000000},"cache_read_input_tokens":4000000000,"output_tokens":1}"#;
    for (name, usages) in [("three", vec![written; 3]), ("one", vec![everything])] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let text: String = (0..usages.len())
            .map(|n| line(n, usages[n]) + "\n")
            .collect();
        std::fs::write(dir.join("s.jsonl"), text).unwrap();
        for format in ["json", "table"] {
            let out = muninn(&[
                "replay",
                "--quiet",
                "--vs-ccusage",
                "--format",
                format,
                "--prices",
                prices.to_str().unwrap(),
                dir.to_str().unwrap(),
            ]);
            let (stdout, stderr) = (
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(out.stderr).unwrap(),
            );
            assert!(!out.status.success(), "{name} {format}: printed\n{stdout}");
            assert!(
                stderr.contains("read muninn's way costs $9223372036854.7754 or more"),
                "{name} {format}: {stderr}"
            );
        }
    }
}
