//! The Self's flush protocol end to end in the host, on the real Claude Code CLI against the
//! simulator: a brief's tool loop (the sim's `[sim: tool rounds N]`) crosses the Mind's flush
//! trigger, the flush message reaches the model inside the loop, and the next brief starts a new
//! segment from the memory the host recorded. Also: the per-brief budget reaches the Self's
//! child and only it.

use crate::cli_world::{CliWorld, child_pid, cli_world_with};
use crate::runtime::mind;
use muninn_host::backends::AnyBackend;
use muninn_host::config::MindConfig;
use muninn_host::runtime::{MindRunner, SELF_RUN_FLUSH_MESSAGE, Step};
use muninn_store::{BriefOrigin, BriefStatus, NewBrief, Role};
use muninn_testkit::peers::claude_cli;
use muninn_testkit::wire::last_user;

const LOOP_BRIEF: &str = "use Read to look around the archive [sim: tool rounds 8]";
const BUDGET_MICRO_USD: i64 = 1_500_000;

/// A claude-cli world whose config lists `mind` (the factory resolves each listed Mind's Self
/// session: its CLI tools and budget).
async fn world(bin: std::path::PathBuf, mind: &MindConfig) -> CliWorld {
    cli_world_with(bin, |c| {
        c.minds = vec![mind.clone()];
        c.backend.self_session.cli_tools = Some(vec!["Read".to_string()]);
        c.backend.self_session.brief_budget_micro_usd = Some(BUDGET_MICRO_USD);
        c.backend.self_session.flush_headroom_tokens = Some(1_000);
    })
    .await
}

async fn brief(w: &CliWorld, text: &str) -> i64 {
    w.host
        .store
        .enqueue_brief(
            "vala",
            &NewBrief {
                text: text.into(),
                origin: BriefOrigin::Operator,
                created_at_ms: w.server.sim.now_ms(),
            },
        )
        .await
        .unwrap()
        .seq
}

/// Steps until the Self ran `seq` (Persona turns for its reports may come first).
async fn run_brief(r: &mut MindRunner<AnyBackend>, seq: i64) {
    for _ in 0..6 {
        r.woken();
        if r.step().await.unwrap() == (Step::SelfTurn { brief: seq }) {
            return;
        }
    }
    panic!("brief {seq} did not run");
}

/// A live process's argv, from `/proc/<pid>/cmdline`.
fn argv(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The prompt sizes of the loop brief's requests with no flush in the way: what a trigger
/// between the first two is placed by. The run is the same in every world (the sim's clock is
/// frozen, its replies deterministic), but for the temporary directory's name in the CLI's
/// environment block, a few tokens.
async fn loop_prompts(bin: std::path::PathBuf) -> Vec<u64> {
    let m = mind("");
    let w = world(bin, &m).await;
    let mut r = w.runner(m, "host-a");
    r.register().await.unwrap();
    let seq = brief(&w, LOOP_BRIEF).await;
    run_brief(&mut r, seq).await;
    let rows = w.rows().await;
    assert_eq!(rows.last().unwrap().decision, "start", "{rows:#?}");
    let prompts = w
        .server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .map(|q| q.usage.unwrap().prompt())
        .collect();
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
    prompts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_tool_loop_crossing_the_trigger_is_flushed_and_the_next_brief_starts_from_it() {
    let Some(bin) = claude_cli() else { return };
    let prompts = loop_prompts(bin.clone()).await;
    // The opening request, eight tool rounds, each round adding a call and its result.
    assert_eq!(prompts.len(), 9, "{prompts:?}");
    assert!(prompts[1] > prompts[0] + 100, "{prompts:?}");
    let trigger = (prompts[0] + prompts[1]) / 2;
    eprintln!("FIGURE self loop prompts {prompts:?}, trigger {trigger}");

    let m = mind(&format!("ceiling_tokens = {}", trigger + 1_000));
    let w = world(bin, &m).await;
    let mut r = w.runner(m, "host-a");
    r.register().await.unwrap();
    let first = brief(&w, LOOP_BRIEF).await;
    run_brief(&mut r, first).await;

    assert_flushed_inside_the_loop(&w, trigger);
    let memory = assert_the_flush_recorded(&w, first).await;
    let self_pid = assert_the_budget_reaches_only_the_self(&w, &mut r).await;
    assert_the_next_brief_starts_from(&w, &mut r, &memory, self_pid).await;
    r.release().await.unwrap();
    w.server.stop().await.unwrap();
}

/// The flush reached the sim inside the loop — beside a tool result, after the request that
/// crossed `trigger` — and its answer ended the run before its eight rounds.
fn assert_flushed_inside_the_loop(w: &CliWorld, trigger: u64) {
    let requests = w.server.sim.requests();
    let loop_requests: Vec<_> = requests
        .iter()
        .filter(|q| q.path == "/v1/messages")
        .collect();
    let flushed_at = loop_requests
        .iter()
        .position(|q| {
            let last = last_user(&q.body);
            last.contains("Your context is nearly full") && last.contains("tool_result")
        })
        .unwrap_or_else(|| panic!("no request carried the flush inside the loop"));
    // (The CLI takes the line with the next tool result it sends, or the one after when the
    // tool ran before the line arrived.)
    assert!(flushed_at >= 2, "{flushed_at}");
    assert!(loop_requests[flushed_at - 1].usage.unwrap().prompt() >= trigger);
    assert_eq!(
        flushed_at,
        loop_requests.len() - 1,
        "the flush answer ended the run"
    );
    assert!(loop_requests.len() < 9, "{}", loop_requests.len());
}

/// The host recorded the flush of brief `first`: the ledger row's decision, and the
/// transcript's memory, which it returns.
async fn assert_the_flush_recorded(w: &CliWorld, first: i64) -> String {
    let rows = w.rows().await;
    let self_rows: Vec<_> = rows.iter().filter(|r| r.role == "self").collect();
    assert_eq!(self_rows.len(), 1, "{rows:#?}");
    assert_eq!(self_rows[0].decision, "flush:flushed");
    assert_eq!(self_rows[0].segment, 0);
    let transcript = w
        .host
        .store
        .transcript_tail("vala", Role::SelfRole, 10)
        .await
        .unwrap();
    let kinds: Vec<_> = transcript.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(kinds, ["brief", "notice", "result", "memory_flush"]);
    let brief_text = transcript[0].body["text"].as_str().unwrap();
    assert_eq!(
        brief_text,
        format!("Brief {first} (from the operator):\n{LOOP_BRIEF}")
    );
    let result = transcript[2].body["text"].as_str().unwrap();
    // The sim answers the flush message as text, not the pinned JSON: its reply quotes it.
    assert!(result.contains(&SELF_RUN_FLUSH_MESSAGE[..60]), "{result}");
    let flush = &transcript[3].body;
    assert_eq!(flush["stage"], "flushed");
    // So the host falls back to the segment's tail (the brief) followed by the run's result.
    assert_eq!(
        flush["from"],
        "tail (flush:flushed: the answer missed a pinned item)"
    );
    let memory = flush["memory"].as_str().unwrap().to_string();
    assert_eq!(memory, format!("{brief_text}\n{result}"));
    let briefs = w.host.store.briefs("vala", None, 10).await.unwrap();
    let done = briefs.iter().find(|b| b.seq == first).unwrap();
    assert_eq!(done.status, BriefStatus::Done);
    memory
}

/// The per-brief budget reaches the Self's child, and only it: the Persona's child, run for
/// the Self's report, has none. Returns the Self child's pid.
async fn assert_the_budget_reaches_only_the_self(
    w: &CliWorld,
    r: &mut MindRunner<AnyBackend>,
) -> u32 {
    let self_pid = child_pid(w, "vala/self").expect("a live Self child");
    let args = argv(self_pid);
    let at = args
        .iter()
        .position(|a| a == "--max-budget-usd")
        .unwrap_or_else(|| panic!("{args:?}"));
    assert_eq!(args[at + 1], "1.500000");
    assert!(args.contains(&"--tools=Read".to_string()), "{args:?}");
    // The Self's report reaches the Persona, whose child runs without a budget.
    for _ in 0..4 {
        r.woken();
        if matches!(r.step().await.unwrap(), Step::PersonaTurn { .. }) {
            break;
        }
    }
    let persona_pid = child_pid(w, "vala/persona").expect("a live Persona child");
    let args = argv(persona_pid);
    assert!(!args.contains(&"--max-budget-usd".to_string()), "{args:?}");
    assert!(args.contains(&"--tools=".to_string()), "{args:?}");
    self_pid
}

/// The next brief starts a new Self segment from `memory`, asking no flush of its own, in a
/// new child (not `self_pid`) with the budget again.
async fn assert_the_next_brief_starts_from(
    w: &CliWorld,
    r: &mut MindRunner<AnyBackend>,
    memory: &str,
    self_pid: u32,
) {
    let before = w.messages_requests().len();
    let second = brief(w, "Carry on with the archive.").await;
    run_brief(r, second).await;
    let segments = w.host.store.segments("vala", Role::SelfRole).await.unwrap();
    assert_eq!(segments.len(), 2, "{segments:#?}");
    assert_eq!(segments[1].reason, "flushed");
    assert_eq!(segments[1].memory.as_deref(), Some(memory));
    let rows = w.rows().await;
    let self_rows: Vec<_> = rows.iter().filter(|r| r.role == "self").collect();
    assert_eq!(self_rows.len(), 2, "{self_rows:#?}");
    assert_eq!(self_rows[1].decision, "start:flushed");
    assert_eq!(self_rows[1].segment, 1);
    // Its request's system prompt carries the memory, and its messages not the old loop.
    let carried: Vec<_> = w.messages_requests()[before..]
        .iter()
        .filter(|b| last_user(b).contains("Carry on with the archive."))
        .cloned()
        .collect();
    assert_eq!(carried.len(), 1, "{carried:#?}");
    let system = carried[0]["system"].to_string();
    assert!(
        system.contains("use Read to look around the archive"),
        "{system}"
    );
    assert!(
        system.contains("Your context is nearly full"),
        "the flushed result is in the memory: {system}"
    );
    let messages = carried[0]["messages"].to_string();
    assert!(!messages.contains("tool_result"), "{messages}");
    // A new segment is a new session: a new child, with the budget again.
    let pid = child_pid(w, "vala/self").expect("a live Self child");
    assert_ne!(pid, self_pid);
    assert!(argv(pid).contains(&"1.500000".to_string()));
}
