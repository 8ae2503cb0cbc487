//! The Self's tool loop, driven by the host request by request, on the in-process simulator:
//! the model's side is the simulator's scripted loop (`[sim: tool calls …]`), the tools are the
//! host's read-only ones over a real directory, and each request is decided, sent (through
//! `turn_cleared` when the decider masks), billed and recorded as one ledger row.

use crate::runtime::{T0, World, ledger, mind, runner, set_cap, spent, stored_brief, world_with};
use crate::scripted::brief;
use muninn_core::closed_loop::verify;
use muninn_core::decide::Action;
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;
use muninn_host::runtime::{MindRunner, Step};
use muninn_sim::inprocess::SimBackend;
use muninn_store::{BriefStatus, Role, TranscriptItem, TranscriptKind};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

mod landed;
mod measured;

/// Files of the test workspace: each a few thousand tokens of distinct lines, so the results
/// grow the prompt quickly and the clear has something worth clearing. The briefs read the first
/// [`READ`] of them (the closed loop's brief reads them all).
const FILES: usize = 28;
/// Files the usual brief reads.
const READ: usize = 16;

/// A workspace of [`FILES`] text files under `src/`, and a file beside it (outside it).
fn workspace(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("ws");
    std::fs::create_dir_all(root.join("src")).unwrap();
    for f in 0..FILES {
        let text: String = (0..180)
            .map(|l| {
                format!(
                    "file {f} line {l}: the archive keeps entry {} of {}\n",
                    l * 7 + f,
                    f * 13 + l
                )
            })
            .collect();
        std::fs::write(root.join(format!("src/f{f:02}.txt")), text).unwrap();
    }
    std::fs::write(dir.join("secret.txt"), "outside the workspace: s3cret\n").unwrap();
    root
}

/// A brief whose scripted loop lists the workspace, reads [`READ`] files, tries one path
/// outside it (after the third read), and greps.
fn script() -> Value {
    script_of(READ)
}

fn script_of(files: usize) -> Value {
    let mut calls = vec![json!({"name": "list_dir", "input": {"path": "src"}})];
    for f in 0..files {
        calls.push(json!({"name": "read_file", "input": {"path": format!("src/f{f:02}.txt")}}));
        if f == 2 {
            calls.push(json!({"name": "read_file", "input": {"path": "../secret.txt"}}));
        }
    }
    calls.push(json!({"name": "grep", "input": {"pattern": "entry 77 "}}));
    Value::Array(calls)
}

fn brief_text(calls: &Value) -> String {
    format!("Survey the archive and report. [sim: tool calls {calls}]")
}

struct Run {
    w: World,
    _dir: tempfile::TempDir,
    r: MindRunner<SimBackend>,
}

/// A world whose Self works in a fresh workspace, under `extra` Mind settings and `session`
/// lines of `[backend.self_session]`.
async fn setup(extra: &str, session: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let root = workspace(dir.path());
    let w = world_with(&format!(
        "[backend.self_session]\nworkspace = {:?}\n{session}",
        root.display().to_string()
    ))
    .await;
    let r = runner(&w, mind(extra), "host-a");
    r.register().await.unwrap();
    Run { w, _dir: dir, r }
}

/// Runs one brief to its end (one step: the whole loop), after the Persona turns that come
/// first (the reports of earlier runs).
async fn run_brief(run: &mut Run, text: &str) -> i64 {
    let seq = brief(&run.w, text).await;
    for _ in 0..4 {
        run.r.woken();
        if run.r.step().await.unwrap() == (Step::SelfTurn { brief: seq }) {
            return seq;
        }
    }
    panic!("brief {seq} did not run");
}

/// The tokens the rows' clears removed, as the provider reported them (`context_edited` events).
pub(crate) fn cleared_tokens<'a>(rows: impl IntoIterator<Item = &'a LedgerRow>) -> u64 {
    rows.into_iter()
        .flat_map(|r| r.events.iter())
        .filter(|e| e["type"] == "context_edited")
        .filter_map(|e| e["cleared_input_tokens"].as_u64())
        .sum()
}

fn self_rows(rows: &[LedgerRow]) -> Vec<&LedgerRow> {
    rows.iter().filter(|r| r.role == "self").collect()
}

async fn self_transcript(w: &World) -> Vec<TranscriptItem> {
    w.host
        .store
        .transcript_range("vala", Role::SelfRole, 1, None, 10_000)
        .await
        .unwrap()
}

fn is_mask(row: &LedgerRow) -> bool {
    row.decided
        .as_ref()
        .is_some_and(|d| d.action == Some(Action::Mask))
}

/// The decider masks inside the run: the masked request went out with the clear, its ledger row
/// is the simulator's bill for it (usage and micro-dollars), and the next request reads the
/// whole prompt the clear wrote.
#[tokio::test]
async fn a_self_tool_loop_masks_and_the_row_is_the_simulators_bill() {
    let mut run = setup("", "").await;
    let seq = run_brief(&mut run, &brief_text(&script())).await;
    let rows = ledger(&run.w).await;
    let rows = self_rows(&rows);
    let requests: Vec<_> = run
        .w
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .collect();
    // Every request is one row, in order: the brief, each call's results, the final answer.
    let calls = script().as_array().unwrap().len();
    assert_eq!(requests.len(), calls + 1);
    assert_eq!(rows.len(), requests.len(), "{rows:#?}");
    let masks: Vec<usize> = (0..rows.len()).filter(|&i| is_mask(rows[i])).collect();
    assert!(
        !masks.is_empty(),
        "no mask: {:?}",
        rows.iter().map(|r| &r.decision).collect::<Vec<_>>()
    );
    let prices = PriceTable::embedded();
    let price = prices.model(&rows[0].model).unwrap();
    for &i in &masks {
        let (row, sent) = (rows[i], &requests[i]);
        let billed = sent.usage.unwrap();
        assert_eq!(row.usage, billed, "row {i}");
        assert_eq!(row.cost, price.cost(&billed), "row {i}");
        // Sent with the clear, and the provider applied it.
        let edits = &sent.body["context_management"]["edits"];
        assert_eq!(edits[0]["type"], "clear_tool_uses_20250919", "{edits}");
        let cleared = row
            .events
            .iter()
            .find(|e| e["type"] == "context_edited")
            .unwrap_or_else(|| panic!("{:#?}", row.events));
        assert!(cleared["cleared_input_tokens"].as_u64().unwrap() > 0);
        // The clear rewrote the prompt: it read only what came before the first cleared result.
        assert!(
            row.usage.written() > row.usage.cache_read,
            "{:?}",
            row.usage
        );
        // The next request reads everything the clear wrote.
        let next = rows[i + 1];
        assert_eq!(
            next.usage.cache_read,
            row.usage.cache_read + row.usage.written(),
            "row {} after the mask at {i}",
            i + 1
        );
        assert!(!is_mask(next));
    }
    let brief = run.w.host.store.briefs("vala", None, 10).await.unwrap();
    let brief = brief.iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(brief.status, BriefStatus::Done, "{brief:?}");
    eprintln!(
        "masks at requests {masks:?} of {}; decisions {:?}",
        rows.len(),
        rows.iter().map(|r| r.decision.as_str()).collect::<Vec<_>>()
    );
}

/// The run's transcript holds every call and every result exactly once, in the order they were
/// made, and each call is the one the model made (the simulator's request log); a path outside
/// the workspace is a tool error the model reads, and the run goes on past it.
#[tokio::test]
async fn the_transcript_holds_each_call_and_result_once_and_an_escape_is_refused() {
    let mut run = setup("", "").await;
    run_brief(&mut run, &brief_text(&script())).await;
    let items = self_transcript(&run.w).await;
    let kinds: Vec<&TranscriptKind> = items.iter().map(|i| &i.kind).collect();
    let calls = script().as_array().unwrap().len();
    assert_eq!(kinds.first(), Some(&&TranscriptKind::Brief));
    assert_eq!(kinds.last(), Some(&&TranscriptKind::Result));
    let uses: Vec<&TranscriptItem> = items
        .iter()
        .filter(|i| i.kind == TranscriptKind::ToolUse)
        .collect();
    let results: Vec<&TranscriptItem> = items
        .iter()
        .filter(|i| i.kind == TranscriptKind::ToolResult)
        .collect();
    assert_eq!(uses.len(), calls);
    assert_eq!(results.len(), calls);
    // The mark that the brief was sent, then alternating: each reply that called a tool,
    // then its result.
    assert_eq!(kinds.get(1), Some(&&TranscriptKind::Notice));
    for pair in kinds[2..kinds.len() - 1].chunks(2) {
        assert_eq!(
            pair,
            [&TranscriptKind::ToolUse, &TranscriptKind::ToolResult]
        );
    }
    // Each call id once among the calls and once among the results, as the model made them.
    let seen = call_ids_counted(&uses, &results);
    assert_eq!(seen.len(), calls);
    assert!(seen.values().all(|&n| n == (1, 1)), "{seen:?}");
    let made = calls_the_model_made(&run.w);
    // Every call was answered by a later request, which carries it in the history.
    assert_eq!(made.len(), calls, "{made:?}");
    assert!(made.iter().all(|id| seen.contains_key(id)), "{made:?}");
    assert_the_escape_refused_and_the_run_went_on(&results);
    // A real read: the file's own lines, numbered.
    let first_read = &results[1].body;
    assert_eq!(first_read["input"]["path"], "src/f00.txt");
    assert!(
        first_read["text"]
            .as_str()
            .unwrap()
            .starts_with("     1\tfile 0 line 0: the archive keeps entry 0 of 0\n"),
        "{first_read}"
    );
}

/// How often each call id appears among the `uses`' calls and among the `results`.
fn call_ids_counted(
    uses: &[&TranscriptItem],
    results: &[&TranscriptItem],
) -> BTreeMap<String, (u32, u32)> {
    let mut seen = BTreeMap::<String, (u32, u32)>::new();
    for u in uses {
        for c in u.body["calls"].as_array().unwrap() {
            seen.entry(c["id"].as_str().unwrap().into()).or_default().0 += 1;
        }
    }
    for r in results {
        seen.entry(r.body["tool_use_id"].as_str().unwrap().into())
            .or_default()
            .1 += 1;
    }
    seen
}

/// The ids of the tool calls the model made, from the assistant turns the simulator's requests
/// carried back in their history, each once.
fn calls_the_model_made(w: &World) -> Vec<String> {
    w.sim
        .requests()
        .iter()
        .filter_map(|q| q.body["messages"].as_array().cloned())
        .flat_map(|m| m.into_iter())
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["id"].as_str().map(String::from))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The escape (a read of `../secret.txt`): refused, said why, nothing of the file read; the
/// next call still ran.
fn assert_the_escape_refused_and_the_run_went_on(results: &[&TranscriptItem]) {
    let escape = results
        .iter()
        .position(|r| r.body["input"]["path"] == "../secret.txt")
        .unwrap();
    let refused = &results[escape].body;
    assert_eq!(refused["is_error"], true, "{refused}");
    let said = refused["text"].as_str().unwrap();
    assert!(said.contains("outside the workspace"), "{said}");
    assert!(!said.contains("s3cret"), "{said}");
    let after = &results[escape + 1].body;
    assert_eq!(after["is_error"], false, "{after}");
    assert!(
        after["text"].as_str().unwrap().contains("file 3 line 0"),
        "{after}"
    );
}

/// The request cap ends the run loudly: no request past it, the brief failed with the cap in
/// its result, the Persona told, and the next brief still runs (on a rebuilt session, since the
/// last calls went unanswered).
#[tokio::test]
async fn the_request_cap_ends_the_run_loudly() {
    let mut run = setup("", "max_requests = 4").await;
    let seq = run_brief(&mut run, &brief_text(&script())).await;
    let rows = ledger(&run.w).await;
    assert_eq!(self_rows(&rows).len(), 4, "{rows:#?}");
    let briefs = run.w.host.store.briefs("vala", None, 10).await.unwrap();
    let brief = briefs.iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(brief.status, BriefStatus::Failed);
    let result = brief.result.as_deref().unwrap();
    assert!(result.contains("cap of 4 requests"), "{result}");
    let told = run
        .w
        .host
        .store
        .pending_deliveries("vala", 0, 10)
        .await
        .unwrap();
    assert!(
        told.iter()
            .any(|d| d.room == "self" && d.text.contains("was stopped by a cap")),
        "{told:#?}"
    );
    // The last reply is recorded (its calls, no results), then the run's result.
    let items = self_transcript(&run.w).await;
    let n = items.len();
    assert_eq!(items[n - 2].kind, TranscriptKind::ToolUse);
    assert_eq!(items[n - 1].kind, TranscriptKind::Result);
    // The next brief runs on a session rebuilt from the transcript.
    run_brief(&mut run, "What did you find?").await;
    let rows = ledger(&run.w).await;
    let last = self_rows(&rows).last().unwrap().decision.clone();
    assert!(last.starts_with("start"), "{last}");
}

/// The flush protocol inside the host's loop: once the context reaches the trigger (the
/// ceiling less the headroom), the flush is asked for with the next results, its answer ends
/// the run, no request passes the ceiling, and the next brief starts a segment from the memory.
#[tokio::test]
async fn the_flush_trigger_ends_the_loop_with_a_flush_and_the_next_brief_starts_from_it() {
    let mut run = setup("ceiling_tokens = 30000", "flush_headroom_tokens = 10000").await;
    let seq = run_brief(&mut run, &brief_text(&script())).await;
    let rows = ledger(&run.w).await;
    let selfs = self_rows(&rows);
    assert!(
        selfs.len() < script().as_array().unwrap().len() + 1,
        "no flush"
    );
    assert!(
        selfs.iter().all(|r| r.usage.prompt() <= 30_000),
        "{selfs:#?}"
    );
    let last = run
        .w
        .sim
        .requests()
        .into_iter()
        .rfind(|q| q.path == "/v1/messages")
        .unwrap();
    let sent = last.body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    let types: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["type"].as_str())
        .collect();
    assert_eq!(types, ["tool_result", "text"], "{sent}");
    assert_eq!(
        sent[1]["text"],
        muninn_host::runtime::SELF_RUN_FLUSH_MESSAGE
    );
    // The flush went with the first request at or past the trigger (30,000 − 10,000).
    let n = selfs.len();
    assert!(
        selfs[n - 1].usage.prompt() >= 20_000,
        "{:?}",
        selfs[n - 1].usage
    );
    assert!(
        selfs[n - 2].usage.prompt() < 20_000,
        "{:?}",
        selfs[n - 2].usage
    );
    let briefs = run.w.host.store.briefs("vala", None, 10).await.unwrap();
    let brief = briefs.iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(brief.status, BriefStatus::Done, "{brief:?}");
    let items = self_transcript(&run.w).await;
    assert_eq!(items.last().unwrap().kind, TranscriptKind::MemoryFlush);
    run_brief(&mut run, "Carry on.").await;
    let rows = ledger(&run.w).await;
    let next = self_rows(&rows).last().unwrap().decision.clone();
    assert_eq!(next, "start:flushed");
}

/// The brief's budget ends the run before a request that could cross it.
#[tokio::test]
async fn the_brief_budget_ends_the_run_before_it_is_crossed() {
    let budget = 60_000i64;
    let mut run = setup("", &format!("brief_budget_micro_usd = {budget}")).await;
    let seq = run_brief(&mut run, &brief_text(&script())).await;
    let rows = ledger(&run.w).await;
    let spent: i64 = self_rows(&rows).iter().map(|r| r.cost.0).sum();
    assert!(spent <= budget, "{spent} > {budget}");
    let calls = script().as_array().unwrap().len();
    assert!(self_rows(&rows).len() < calls + 1, "the budget never bit");
    let briefs = run.w.host.store.briefs("vala", None, 10).await.unwrap();
    let brief = briefs.iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(brief.status, BriefStatus::Failed);
    assert!(
        brief.result.as_deref().unwrap().contains("brief's budget"),
        "{brief:?}"
    );
}

/// Replaying the host's ledger in closed loop reproduces every decision of the tool loop, the
/// masks included, and its cost.
#[tokio::test]
async fn replaying_a_masking_tool_loop_reproduces_its_decisions() {
    let mut run = setup("", "").await;
    // Long enough that the prompts after the clear grow past ends cached before it, which the
    // replay must not read as prefixes of the cleared prompt.
    run_brief(&mut run, &brief_text(&script_of(FILES))).await;
    // A second brief in the same segment: its arrival is decided on the accounting the loop
    // (and its clears) left.
    run_brief(&mut run, "Summarise what you read.").await;
    let rows = ledger(&run.w).await;
    let selfs = self_rows(&rows);
    // A clear inside the loop, and the second brief's arrival decided after it (the growth
    // rule's refresh, which the clear is weighed against: it lost once the accounting stopped
    // counting a result the loop's clear had already removed).
    assert!(
        selfs[..selfs.len() - 1].iter().any(|r| is_mask(r)),
        "{rows:#?}"
    );
    let last = selfs[selfs.len() - 1].decided.as_ref().unwrap();
    assert!(last.action.is_some(), "{rows:#?}");
    let report = verify(&rows, &PriceTable::embedded(), &Default::default());
    assert!(report.holds(0.0), "{report:#?}");
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    assert_eq!(report.rows, rows.len());
    assert_eq!(report.rows_unchecked, 0);
    assert_eq!(report.agreed, report.decisions);
    assert_eq!(rows[0].at_ms, T0);
}

/// One count of clearable tokens online and in replay: the host's ledger rows (what each
/// request's tool results came to, as the backend counted the blocks it sent) and a `claude -p
/// --output-format stream-json` log of the same exchange, imported, give every request the same
/// tool uses and the same clearable tokens.
#[tokio::test]
async fn the_ledger_and_an_imported_log_of_the_run_count_the_same_clearable_tokens() {
    let mut run = setup("", "").await;
    run_brief(&mut run, &brief_text(&script())).await;
    let rows = ledger(&run.w).await;
    let rows = self_rows(&rows);
    let items = self_transcript(&run.w).await;
    // The results each request after the first sent, in the order the run sent them.
    let mut groups: Vec<Vec<Value>> = Vec::new();
    for item in &items {
        match item.kind {
            TranscriptKind::ToolUse => groups.push(Vec::new()),
            TranscriptKind::ToolResult => {
                let b = &item.body;
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": b["tool_use_id"],
                    "content": b["text"],
                });
                if b["is_error"] == json!(true) {
                    block["is_error"] = json!(true);
                }
                groups.last_mut().unwrap().push(block);
            }
            _ => {}
        }
    }
    assert_eq!(groups.len() + 1, rows.len(), "{} groups", groups.len());
    let sid = "5e55a0f1-0000-4000-8000-00000000bbbb";
    let mut lines = vec![
        json!({"type": "system", "subtype": "init", "session_id": sid,
        "model": "claude-sonnet-4-5", "tools": ["read_file"]}),
    ];
    for (k, row) in rows.iter().enumerate() {
        if k > 0 {
            lines.push(
                json!({"type": "user", "parent_tool_use_id": null, "session_id": sid,
                "message": {"role": "user", "content": groups[k - 1]}}),
            );
        }
        let u = row.usage;
        lines.push(
            json!({"type": "assistant", "parent_tool_use_id": null, "session_id": sid,
            "message": {"id": format!("msg_{k}"), "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "."}],
                "usage": {"input_tokens": u.input,
                    "cache_creation_input_tokens": u.written(),
                    "cache_read_input_tokens": u.cache_read,
                    "cache_creation": {"ephemeral_5m_input_tokens": u.cache_write_5m,
                        "ephemeral_1h_input_tokens": u.cache_write_1h},
                    "output_tokens": u.output}}}),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let opts = muninn_import::ImportOptions {
        format: Some(muninn_import::InputFormat::StreamJson),
        ..muninn_import::ImportOptions::default()
    };
    let got = muninn_import::import_paths(&[path], &opts, &mut |_, _| {}).unwrap();
    let imported: Vec<_> = got
        .traces
        .iter()
        .flat_map(|t| &t.requests)
        .map(|r| r.tool_results)
        .collect();
    let online: Vec<_> = rows
        .iter()
        .map(|r| r.decided.as_ref().unwrap().tool_results)
        .collect();
    assert_eq!(imported, online);
    assert!(
        online.iter().map(|t| t.tokens).sum::<u64>() > 10_000,
        "{online:?}"
    );
}

/// A host that dies in the middle of a Self run (here: the brief claimed, then the runner
/// dropped without releasing its lease, as a `kill -9` leaves it) leaves its brief `running`, and
/// nothing would ever finish it: the Persona would wait for a report that never comes. The next
/// runner on the same data fails it loudly, tells the Persona exactly once — a second restart
/// adds nothing — and the next brief runs.
#[tokio::test]
async fn a_run_its_host_abandoned_is_failed_and_reported_once() {
    let mut run = setup("", "").await;
    run_brief(&mut run, &brief_text(&script())).await;
    let seq = brief(&run.w, "Survey it again.").await;
    let store = run.w.host.store.clone();
    let lease = store
        .lease("vala")
        .await
        .unwrap()
        .expect("host-a holds the lease");
    let claimed = store
        .claim_brief("vala", lease.token, run.w.sim.now_ms())
        .await
        .unwrap()
        .expect("the brief is queued");
    assert_eq!(claimed.seq, seq);
    // The crash: no release, no finish.
    let Run { w, _dir, r } = run;
    drop(r);
    let reported = |w: &World| {
        let store = w.host.store.clone();
        async move {
            store
                .pending_deliveries("vala", 0, 100)
                .await
                .unwrap()
                .into_iter()
                .filter(|d| d.source_id == format!("self-brief-{seq}"))
                .count()
        }
    };
    for restart in 0..2 {
        let mut r = runner(&w, mind(""), "host-a");
        r.register().await.unwrap();
        r.woken();
        r.step().await.unwrap();
        let brief = stored_brief(&w, seq).await;
        assert_eq!(
            brief.status,
            BriefStatus::Failed,
            "restart {restart}: {brief:?}"
        );
        assert!(
            brief
                .result
                .as_deref()
                .unwrap_or("")
                .starts_with("its host stopped"),
            "{brief:?}"
        );
        assert_eq!(reported(&w).await, 1, "restart {restart}");
    }
    let told = store.pending_deliveries("vala", 0, 100).await.unwrap();
    assert!(
        told.iter().any(
            |d| d.room == "self" && d.text.contains(&format!("Self run {seq} was interrupted"))
        ),
        "{told:#?}"
    );
    // The Mind goes on: the next brief runs to its end.
    let mut run = Run {
        r: runner(&w, mind(""), "host-a"),
        w,
        _dir,
    };
    run.r.register().await.unwrap();
    let next = run_brief(&mut run, "What did you find?").await;
    let done = store
        .briefs("vala", Some(BriefStatus::Done), 10)
        .await
        .unwrap();
    assert!(done.iter().any(|b| b.seq == next), "{done:#?}");
}

/// A crash after a run posted its report and before it finished its brief (the report goes
/// first, so that no crash loses it): the recovery finishes the brief and posts nothing more —
/// the Persona keeps the one report, the run's own.
#[tokio::test]
async fn a_crash_between_the_report_and_the_briefs_end_reports_once() {
    let run = setup("", "").await;
    let store = run.w.host.store.clone();
    let mut r = run.r;
    r.woken();
    r.step().await.unwrap();
    let seq = brief(&run.w, "Survey it.").await;
    let lease = store
        .lease("vala")
        .await
        .unwrap()
        .expect("host-a holds the lease");
    let now = run.w.sim.now_ms();
    let claimed = store.claim_brief("vala", lease.token, now).await.unwrap();
    assert_eq!(claimed.map(|b| b.seq), Some(seq));
    let report = muninn_store::NewDelivery {
        room: "self".into(),
        sender: "self".into(),
        is_direct: true,
        to_you: true,
        text: format!("Self run {seq} finished: all surveyed"),
        source_id: format!("self-brief-{seq}"),
        received_at_ms: now,
        context: Vec::new(),
    };
    store.post_delivery("vala", &report).await.unwrap();
    drop(r);
    let mut r = runner(&run.w, mind(""), "host-a");
    r.register().await.unwrap();
    r.woken();
    r.step().await.unwrap();
    let briefs = store.briefs("vala", None, 10).await.unwrap();
    let b = briefs.iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(b.status, BriefStatus::Failed, "{b:?}");
    let told = store.pending_deliveries("vala", 0, 100).await.unwrap();
    let reports: Vec<_> = told
        .iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .collect();
    assert_eq!(reports.len(), 1, "{told:#?}");
    assert_eq!(reports[0].text, report.text);
}

/// Steps until the Self brief runs, the Persona turns before it (earlier runs' reports) first;
/// returns how many steps came before it.
async fn steps_before_the_brief(run: &mut Run, seq: i64) -> usize {
    for before in 0..4 {
        run.r.woken();
        if run.r.step().await.unwrap() == (Step::SelfTurn { brief: seq }) {
            return before;
        }
    }
    panic!("brief {seq} did not run");
}

/// A brief whose first request the decider masks is priced as the clear (which rewrites the
/// prompt from the first cleared result on), not as an append, before it is claimed: with room
/// under the cap for one micro-dollar less than the clear costs, it does not start, and the
/// spend never crosses the cap.
#[tokio::test]
async fn a_brief_that_clears_at_its_start_is_priced_as_the_clear_under_the_cap() {
    const FIRST_LOOP: usize = 12;
    // Unbounded: what the second brief's clear costs, and how many steps come before it. After
    // a first loop of 12 files the second brief clears at its start (after longer ones the
    // growth rule's refresh is due there, and beats the clear).
    let mut free = setup("", "").await;
    run_brief(&mut free, &brief_text(&script_of(FIRST_LOOP))).await;
    let seq = brief(&free.w, "Summarise what you read.").await;
    let before = steps_before_the_brief(&mut free, seq).await;
    let rows = ledger(&free.w).await;
    let clear = *self_rows(&rows).last().unwrap();
    assert!(is_mask(clear), "{rows:#?}");

    // The same run, the cap leaving one micro-dollar less than that clear costs.
    let mut capped = setup("", "").await;
    run_brief(&mut capped, &brief_text(&script_of(FIRST_LOOP))).await;
    let seq = brief(&capped.w, "Summarise what you read.").await;
    for _ in 0..before {
        capped.r.woken();
        capped.r.step().await.unwrap();
    }
    let spent_before = spent(&capped.w).await;
    set_cap(&capped.w, Some(spent_before + clear.cost.0 - 1)).await;
    capped.r.woken();
    assert_eq!(capped.r.step().await.unwrap(), Step::OverBudget);
    assert_eq!(spent(&capped.w).await, spent_before);
    let queued = capped.w.host.store.briefs("vala", None, 10).await.unwrap();
    let queued = queued.iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(queued.status, BriefStatus::Queued, "{queued:?}");

    // Room for it: it runs, and it is the same clear.
    set_cap(&capped.w, None).await;
    capped.r.woken();
    assert_eq!(
        capped.r.step().await.unwrap(),
        Step::SelfTurn { brief: seq }
    );
    let rows = ledger(&capped.w).await;
    let ran = *self_rows(&rows).last().unwrap();
    assert!(is_mask(ran));
    assert_eq!(ran.cost, clear.cost);
}

/// A tool loop whose first request's record was committed though the store's answer was lost,
/// when the lease changes hands before the runner tries the commit again (another host takes
/// the Mind over and lets it go without a step): the record landed, so the run is reported as
/// one the store's failure stopped, its last answer saved — as it is when the commit is tried
/// again under the same lease — not as a run its host abandoned.
#[tokio::test]
async fn a_landed_tool_request_given_up_under_a_new_lease_is_reported_as_the_stores_failure() {
    let dir = tempfile::tempdir().unwrap();
    let root = workspace(dir.path());
    let (w, faults) = crate::runtime::faulty_world(&format!(
        "[backend.self_session]\nworkspace = {:?}\n",
        root.display().to_string()
    ))
    .await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let seq = brief(&w, &brief_text(&script())).await;
    faults.lose_commit_answers(1);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("held uncommitted"), "{e}");
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().expect("host-a leads");
    let now = w.sim.now_ms();
    let b = (store.take_over_lease("vala", "host-b", held.token, 30_000, now))
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    store.release_lease("vala", b.token).await.unwrap();
    for _ in 0..10 {
        r.woken();
        if matches!(r.step().await, Ok(Step::Idle { .. })) {
            break;
        }
    }
    let told = store.pending_deliveries("vala", 0, 100).await.unwrap();
    let reports: Vec<&str> = told
        .iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .map(|d| d.text.as_str())
        .collect();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].starts_with(&format!(
            "Self run {seq} was stopped when the store failed (its last answer is saved)"
        )),
        "{reports:?}"
    );
}
