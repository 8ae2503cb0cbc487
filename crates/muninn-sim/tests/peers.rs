//! Real peers nobody here wrote, against `sim-api`: the official Anthropic Python SDK and the
//! real Claude Code CLI 2.1.332. Each checks that the usage the peer reports equals what the
//! cache model computes, independently, for the requests the peer actually sent.
//!
//! Peers are found by `muninn_testkit::peers`: `MUNINN_PYTHON` (default `python3`, with
//! `anthropic` importable; see `scripts/install-python-peers.sh`) and `MUNINN_CLAUDE_BIN`
//! (default: where `scripts/install-claude-cli.sh` installs it). A missing peer fails the test
//! (prints `SKIP` only when `MUNINN_SKIP_PEERS=1` asks for it).

use crate::support::{T0, message_records, recompute};
use muninn_core::trace::Usage;
use muninn_sim::sim::{RecordedRequest, SimConfig};
use muninn_testkit::peers::{claude_cli, python_sdk};
use muninn_testkit::wire::last_user;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.written(),
        "cache_read_input_tokens": u.cache_read,
        "output_tokens": u.output,
        "cache_creation": {"ephemeral_5m_input_tokens": u.cache_write_5m, "ephemeral_1h_input_tokens": u.cache_write_1h},
    })
}

/// The fields of a reported usage object that the cache model determines.
fn pick(reported: &Value) -> Value {
    json!({
        "input_tokens": reported["input_tokens"],
        "cache_creation_input_tokens": reported["cache_creation_input_tokens"],
        "cache_read_input_tokens": reported["cache_read_input_tokens"],
        "output_tokens": reported["output_tokens"],
        "cache_creation": {
            "ephemeral_5m_input_tokens": reported["cache_creation"]["ephemeral_5m_input_tokens"],
            "ephemeral_1h_input_tokens": reported["cache_creation"]["ephemeral_1h_input_tokens"],
        },
    })
}

/// A simulator on its own runtime thread, so the test body can block on a child process.
fn sim_on_thread() -> (tokio::runtime::Runtime, muninn_sim::SimHandle) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = rt.block_on(crate::support::sim_with(SimConfig {
        frozen_at_ms: Some(T0),
        ..Default::default()
    }));
    (rt, handle)
}

#[test]
fn the_official_python_sdk() {
    let Some(python) = python_sdk() else { return };
    let (_rt, h) = sim_on_thread();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/python_sdk.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(h.base_url())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python peer failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["step"], json!("done"));
    let reported: Vec<Value> = lines
        .iter()
        .filter(|l| l.get("usage").is_some())
        .map(|l| pick(&l["usage"]))
        .collect();
    let records = h.sim.requests();
    let expected: Vec<Value> = recompute(&records).iter().map(usage_json).collect();
    // Every answered request's usage, as the SDK parsed it, is the cache model's.
    // (The answered requests are exactly the ones with usage lines, plus the broken stream,
    // which the SDK never finished.)
    let answered: Vec<&Value> = records
        .iter()
        .filter(|r| r.path == "/v1/messages" && r.usage.is_some())
        .map(|r| &r.body)
        .collect();
    assert_eq!(answered.len(), reported.len() + 1);
    let broken = records
        .iter()
        .filter(|r| r.path == "/v1/messages" && r.usage.is_some())
        .position(|r| r.fault.is_some())
        .unwrap();
    let mut expected_reported = expected.clone();
    expected_reported.remove(broken);
    assert_eq!(reported, expected_reported);
    let reads: Vec<u64> = reported[..5]
        .iter()
        .map(|u| u["cache_read_input_tokens"].as_u64().unwrap())
        .collect();
    assert!(
        reads[0] == 0 && reads.windows(2).all(|w| w[1] > w[0]),
        "{reads:?}"
    );
    eprintln!(
        "python SDK passes the simulator's usage through: {} of {} as recomputed (consistency, not validation of the cache model); reads grow {reads:?}",
        reported.len(),
        reported.len()
    );
}

/// The official SDK's stream accumulator puts together the compaction block the simulator
/// streams (`"content": null` at the start, the summary in a `compaction_delta`) as the block
/// the whole reply holds: the simulator streams it as the API does.
#[test]
fn the_official_python_sdk_assembles_a_streamed_compaction() {
    let Some(python) = python_sdk() else { return };
    let (_rt, h) = sim_on_thread();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/python_sdk_compaction.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(h.base_url())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python peer failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let block: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(
        block["content"].as_str().unwrap().contains("<summary>"),
        "{block}"
    );
}

/// Reads stdout lines of the child on a thread, so the test can wait with a timeout.
fn line_reader(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// One long-lived `claude -p` stream-json session against the simulator, in a fresh HOME.
struct Claude {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
    home: tempfile::TempDir,
}

impl Claude {
    fn start(
        bin: &std::path::Path,
        base_url: &str,
        session: &str,
        extra_env: &[(&str, &str)],
        extra_args: &[&str],
    ) -> Claude {
        let home = tempfile::tempdir().unwrap();
        for d in [".claude", "tmp", "proj"] {
            std::fs::create_dir_all(home.path().join(d)).unwrap();
        }
        // Long enough to be cacheable on its own (over the model's 512-token minimum).
        let system: String = format!(
            "You are MUNINN-PEER, a test Mind. {}",
            (0..400)
                .map(|i| format!("Doctrine line {i}: keep the cache warm."))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut command = Command::new(bin);
        command
            .args([
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--session-id",
                session,
                "--system-prompt",
                &system,
                "--tools",
                "",
            ])
            .current_dir(home.path().join("proj"))
            .env_clear()
            .env("ANTHROPIC_BASE_URL", base_url)
            .env("ANTHROPIC_API_KEY", "sk-test")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
            .env("HOME", home.path())
            .env("CLAUDE_CONFIG_DIR", home.path().join(".claude"))
            .env("TMPDIR", home.path().join("tmp"))
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in extra_env {
            command.env(k, v);
        }
        command.args(extra_args);
        // stderr goes to a file in the temporary HOME: a pipe nobody drains could fill and
        // stall the child.
        let stderr = std::fs::File::create(home.path().join("stderr.log")).unwrap();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = line_reader(child.stdout.take().unwrap());
        Claude {
            child,
            stdin,
            lines,
            home,
        }
    }

    /// Sends one user line; returns its `result` and the `api_retry` events before it.
    fn turn(&mut self, text: &str) -> (Value, Vec<Value>) {
        let line = json!({"type": "user", "message": {"role": "user", "content": text}});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut retries = Vec::new();
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(90))
                .unwrap_or_else(|e| panic!("no result for {text:?}: {e}"));
            let Ok(event) = serde_json::from_str::<Value>(&l) else {
                continue;
            };
            if event["type"] == json!("system") && event["subtype"] == json!("api_retry") {
                retries.push(event.clone());
            }
            if event["type"] == json!("result") {
                assert_eq!(event["is_error"], json!(false), "{event}");
                return (event, retries);
            }
        }
    }

    /// Closes stdin and waits for a clean exit; returns the HOME for the transcript.
    fn finish(self) -> tempfile::TempDir {
        let Claude {
            mut child,
            stdin,
            home,
            ..
        } = self;
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "claude exited {status:?}: {}",
            std::fs::read_to_string(home.path().join("stderr.log")).unwrap_or_default()
        );
        home
    }
}

#[test]
fn the_real_claude_code_cli() {
    let Some(bin) = claude_cli() else { return };
    let (_rt, h) = sim_on_thread();
    let session = "7e1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a5b";
    let claude = Claude::start(&bin, &h.base_url(), session, &[], &[]);
    let (results, retries, home_dir) = eight_turns_with_a_429_and_a_compaction(claude, &h);
    let home = home_dir.path();
    assert_the_429_was_honoured(&retries);
    let (answered, expected) = answered_as_recomputed(&h);
    let turn_usages = each_turn_reports_its_requests_usage(&results, &answered, &expected);
    let reads: Vec<u64> = turn_usages[..6].iter().map(|u| u.cache_read).collect();
    the_compaction_reused_the_prefix_and_its_summary_went_on(&answered, &expected, &reads);

    // The transcript's assistant lines carry the same (merged) usage.
    let transcript_usages = transcript_usages(home, session);
    let want: Vec<Value> = turn_usages.iter().map(usage_json).collect();
    assert_eq!(transcript_usages, want);
    eprintln!(
        "Claude Code CLI 2.1.332 passes the simulator's usage through (consistency, not validation): {} of {} answered requests as recomputed; {} of {} turn result.usage and {} of {} transcript usages carry it unchanged; reads grow {reads:?}",
        answered.len(),
        answered.len(),
        turn_usages.len(),
        turn_usages.len(),
        transcript_usages.len(),
        want.len()
    );
}

/// The lines the CLI is given, one turn each.
const LINES_IN: [&str; 8] = [
    "hello, first message",
    "second: what is a raven?",
    "third: and a crow?",
    "fourth: which is larger?",
    "fifth: thanks, summarise",
    "sixth: one more thing",
    "/compact",
    "seventh: after the compaction",
];

/// A turn's line and the CLI's `result` line for it.
type TurnResult = (&'static str, Value);

/// Six turns; a 429 with retry-after before the third; /compact after the sixth, then one more
/// turn on the compacted history. Returns each turn's result, the CLI's retry lines and its
/// home once it has exited.
fn eight_turns_with_a_429_and_a_compaction(
    mut claude: Claude,
    h: &muninn_sim::SimHandle,
) -> (Vec<TurnResult>, Vec<Value>, tempfile::TempDir) {
    let mut results = Vec::new();
    let mut retries = Vec::new();
    for (i, text) in LINES_IN.iter().enumerate() {
        if i == 2 {
            h.sim.push_faults([muninn_sim::sim::Fault {
                kind: muninn_sim::sim::FaultKind::RateLimit {
                    retry_after_s: Some(1.0),
                },
                times: 1,
            }]);
        }
        let (result, r) = claude.turn(text);
        retries.extend(r);
        results.push((*text, result));
    }
    (results, retries, claude.finish())
}

/// The CLI saw our 429 and honoured its retry-after.
fn assert_the_429_was_honoured(retries: &[Value]) {
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["error_status"], json!(429));
    assert!(
        retries[0]["retry_delay_ms"].as_u64().unwrap() >= 1000,
        "{}",
        retries[0]
    );
}

/// The requests the simulator answered (all but the 429), each with the usage the cache model
/// computes for it; returns them and those usages.
fn answered_as_recomputed(h: &muninn_sim::SimHandle) -> (Vec<RecordedRequest>, Vec<Usage>) {
    let records = message_records(h);
    let answered: Vec<_> = records
        .iter()
        .filter(|r| r.usage.is_some())
        .cloned()
        .collect();
    assert_eq!(records.len(), answered.len() + 1, "one refused (the 429)");
    let expected = recompute(&answered);
    for (r, exp) in answered.iter().zip(&expected) {
        assert_eq!(
            r.usage.as_ref(),
            Some(exp),
            "the sim answered what the model computes"
        );
    }
    (answered, expected)
}

/// Each turn's `result.usage` is the usage of the request the CLI sent for it, and its reply
/// the simulator's; /compact is a turn of none. Returns the turns' usages.
fn each_turn_reports_its_requests_usage(
    results: &[TurnResult],
    answered: &[RecordedRequest],
    expected: &[Usage],
) -> Vec<Usage> {
    let mut turn_usages = Vec::new();
    for (text, result) in results {
        if *text == "/compact" {
            // The CLI took our summary: the next request carries it.
            assert_eq!(result["num_turns"], json!(0), "{result}");
            continue;
        }
        // The request the CLI sent for this turn is the last answered one ending with its text.
        let i = answered
            .iter()
            .rposition(|r| last_user(&r.body).contains(text))
            .unwrap();
        assert_eq!(
            pick(&result["usage"]),
            usage_json(&expected[i]),
            "{text}: result.usage"
        );
        let n = results
            .iter()
            .take_while(|(t, _)| t != text)
            .filter(|(t, _)| *t != "/compact")
            .count()
            + 1;
        if *text != "seventh: after the compaction" {
            assert_eq!(
                result["result"],
                json!(format!("Reply to turn {n}: '{text}'"))
            );
        }
        turn_usages.push(expected[i]);
    }
    turn_usages
}

/// The summary reached the request after the compaction; the six turns before it read more
/// each time, and the compaction request reused the warm prefix.
fn the_compaction_reused_the_prefix_and_its_summary_went_on(
    answered: &[RecordedRequest],
    expected: &[Usage],
    reads: &[u64],
) {
    let compaction = answered
        .iter()
        .position(|r| last_user(&r.body).contains("<summary> block"))
        .expect("a compaction request");
    let after = answered.last().unwrap();
    assert!(
        last_user(&after.body).contains("Primary Request and Intent: hello, first message")
            || after
                .body
                .to_string()
                .contains("Primary Request and Intent: hello, first message"),
        "the summary reached the next request"
    );
    assert!(
        reads[0] == 0 && reads.windows(2).all(|w| w[1] > w[0]),
        "reads {reads:?}"
    );
    // The compaction request reused the warm prefix.
    assert!(
        expected[compaction].cache_read >= reads[5],
        "{:?}",
        expected[compaction]
    );
}

/// The usages of the session's transcript's assistant lines (synthetic ones left out).
fn transcript_usages(home: &std::path::Path, session: &str) -> Vec<Value> {
    let transcript = walk(&home.join(".claude/projects"))
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n == format!("{session}.jsonl").as_str())
        })
        .expect("transcript");
    std::fs::read_to_string(&transcript)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["type"] == json!("assistant") && v["message"]["model"] != json!("<synthetic>")
        })
        .map(|v| pick(&v["message"]["usage"]))
        .collect()
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn the_real_claude_code_cli_with_a_1h_ttl_and_count_tokens() {
    let Some(bin) = claude_cli() else { return };
    let (_rt, h) = sim_on_thread();
    let session = "0f0e0d0c-0b0a-4908-8706-050403020100";
    let mut claude = Claude::start(
        &bin,
        &h.base_url(),
        session,
        &[("CLAUDE_CODE_PROMPT_CACHE_TTL", "1h")],
        &[],
    );
    let turns = ["one hour, first", "one hour, second", "one hour, third"];
    let mut results = Vec::new();
    for t in turns {
        results.push(claude.turn(t).0);
    }
    let (context, _) = claude.turn("/context");
    claude.finish();
    let records = h.sim.requests();
    let messages = message_records(&h);
    assert_eq!(messages.len(), 3);
    for r in &messages {
        // The CLI asked for 1h on its three markers, with the beta.
        assert_eq!(
            r.body.to_string().matches(r#""ttl":"1h""#).count(),
            3,
            "{}",
            r.body
        );
        assert!(
            r.anthropic_beta
                .as_deref()
                .unwrap_or("")
                .contains("extended-cache-ttl-2025-04-11")
        );
    }
    let expected = recompute(&messages);
    for (result, exp) in results.iter().zip(&expected) {
        assert_eq!(pick(&result["usage"]), usage_json(exp));
        assert_eq!(exp.cache_write_5m, 0, "every write is a 1h write");
        assert!(exp.cache_write_1h > 0);
    }
    // /context asked count_tokens, and got the mapping's totals.
    let counts: Vec<_> = records
        .iter()
        .filter(|r| r.path == "/v1/messages/count_tokens")
        .collect();
    assert!(
        !counts.is_empty() && counts.iter().all(|r| r.status == 200),
        "{counts:?}"
    );
    for r in &counts {
        let total = muninn_anthropic::prompt::shape(&r.body)
            .unwrap()
            .total_tokens;
        assert!(total > 0);
    }
    assert!(
        context["result"]
            .as_str()
            .unwrap_or("")
            .contains("Context Usage"),
        "{context}"
    );
    eprintln!(
        "Claude Code CLI 2.1.332 (1h TTL) passes the usage through: {} of {} result.usage as recomputed; {} count_tokens calls answered",
        results.len(),
        expected.len(),
        counts.len()
    );
}

#[test]
fn the_real_claude_code_cli_gets_schema_valid_structured_output() {
    let Some(bin) = claude_cli() else { return };
    let (_rt, h) = sim_on_thread();
    let schema = json!({"type": "object", "properties": {
        "say": {"type": "array", "items": {"type": "object", "properties": {"room": {"enum": ["general", "dm"]}, "text": {"type": "string", "minLength": 3}}, "required": ["room", "text"], "additionalProperties": false}},
        "start_self_run": {"type": ["object", "null"], "properties": {"brief": {"type": "string"}}}},
        "required": ["say"], "additionalProperties": false});
    let session = "5c5c5c5c-1111-4222-8333-444455556666";
    let schema_text = schema.to_string();
    let mut claude = Claude::start(
        &bin,
        &h.base_url(),
        session,
        &[],
        &["--json-schema", &schema_text],
    );
    let (first, _) = claude.turn("[general] alice: hello");
    let (second, _) = claude.turn("[general] bob: again");
    claude.finish();
    for (result, said) in [
        (&first, "[general] alice: hello"),
        (&second, "[general] bob: again"),
    ] {
        // The CLI validated our call against the schema itself and accepted it: the generated
        // reply, answered like a Mind (a sentence to the sender, in the room addressed).
        let mut expected = muninn_backend::schema::generate(&schema);
        muninn_sim::reply::answer_like_a_mind(&schema, said, &mut expected);
        assert_eq!(result["structured_output"], expected, "{result}");
        assert_eq!(
            muninn_backend::schema::validate(&schema, &result["structured_output"]),
            Ok(())
        );
    }
    let records = message_records(&h);
    assert_eq!(
        records.len(),
        2,
        "one request per turn: the call ends the turn"
    );
    let expected = recompute(&records);
    for (result, exp) in [&first, &second].iter().zip(&expected) {
        assert_eq!(pick(&result["usage"]), usage_json(exp));
    }
    assert!(expected[1].cache_read > 0);
    eprintln!(
        "Claude Code CLI 2.1.332 (--json-schema) passes the usage through: 2 of 2 result.usage as recomputed"
    );
}
