//! The crash harness at the host's own crash points (`muninn_host::crash_points`): a random
//! `kill -9` (`crash.rs`) rarely lands in the narrow windows between a turn's writes, so here a
//! real `muninn serve` is armed with `MUNINN_FAULT=<point>:<n>` and aborts exactly there. Per
//! point: one Mind on the Messages API against the simulator's HTTP endpoint (this test reads
//! what the model was shown from the simulator's request log), a few deliveries posted one at a
//! time through the API (each its own batch, so the `n`th pass is a known turn), and — for the
//! Self's points — operator briefs. The host must die of the abort it was armed with (SIGABRT
//! and its stderr line naming the point; a run that never reaches the point fails), is restarted
//! unarmed, and then:
//!
//! - the checker (`muninn_testkit::crash`) finds every delivery answered exactly once — mailbox,
//!   outbox, the transcript's replay, one Persona ledger row per answered turn;
//! - no request the model was shown holds a delivery twice, and every delivery was shown;
//! - every answered request is in the ledger, except the one a kill between an answer and its
//!   commit loses: that batch is asked again and billed twice (`docs/host.md`, *An answer whose
//!   commit fails*), so `host-persona-answered` shows exactly one request more than the ledger,
//!   as does `host-self-flush-answered` (the flush's answer; its brief is reported interrupted);
//! - each brief is reported to the Persona once; a run that was committed with its result;
//! - each brief reported finished was shown to the model once, as a request's new message
//!   (`host-brief-recorded`: the restarted host runs the brief it recorded and never asked), and
//!   one reported interrupted never.
//! - an attempt the provider billed but cut is a ledger row, once: at `host-attempt-cut` the
//!   simulator cuts the first request's stream after content and the host dies right after
//!   taking the attempt from its backend, before the retry (`runtime/failed.rs` commits the
//!   row then).
//!
//! SQLite runs every point; PostgreSQL the Persona's three and the cut attempt's (skipped with
//! a note when it is not there, unless `MUNINN_REQUIRE_PEERS=1`).

use crate::crash::Hosts;
use crate::serving::serve_command;
use muninn_api::client::ApiClient;
use muninn_api::token::ApiToken;
use muninn_api::wire::PostDeliveryRequest;
use muninn_host::crash_points::CrashPoint;
use muninn_sim::sim::{Fault, FaultKind};
use muninn_store::{BriefStatus, LedgerQuery, Store};
use muninn_testkit::crash::check_mind;
use muninn_testkit::peers::FreshDatabase;
use serde_json::Value;
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

const MIND: &str = "vala";

/// Deliveries per point: enough for the armed turn, one before it and one after the restart.
const DELIVERIES: usize = 4;

/// The signal `std::process::abort` raises.
const SIGABRT: i32 = 6;

/// Where a run arms its host, and what it expects of the Self.
#[derive(Debug, Clone, Copy)]
struct Arm {
    point: CrashPoint,
    /// The pass that aborts (each delivery is its own batch: the `nth` turn).
    nth: u32,
    /// Operator briefs posted after the first delivery, one at a time (the Self's points).
    briefs: usize,
    /// Lines added to the Mind's configuration.
    mind: &'static str,
    /// How each brief is reported to the Persona, in order: each report's start.
    reports: &'static [&'static str],
    /// Whether the simulator cuts the first request's stream after some content (a billed
    /// attempt the Mind retries: `host-attempt-cut`).
    cut: bool,
    /// The point the first restart is armed with (a second abort; the next restart is
    /// unarmed), if any.
    then: Option<CrashPoint>,
}

impl Arm {
    fn spec(&self) -> String {
        format!("{}:{}", self.point.name(), self.nth)
    }

    const fn persona(point: CrashPoint, nth: u32) -> Arm {
        Arm {
            point,
            nth,
            briefs: 0,
            mind: "",
            reports: &[],
            cut: false,
            then: None,
        }
    }

    /// The aborts a run must see: the point's, and the restart's.
    fn aborts(&self) -> usize {
        1 + usize::from(self.then.is_some())
    }
}

/// Every point, where a run reaches it.
const SQLITE_RUNS: [Arm; 7] = [
    Arm::persona(CrashPoint::DeliveryRecorded, 2),
    Arm::persona(CrashPoint::PersonaAnswered, 2),
    Arm::persona(CrashPoint::PersonaCommitted, 2),
    Arm::persona(CrashPoint::SegmentStored, 1),
    Arm {
        point: CrashPoint::SelfRunCommitted,
        nth: 1,
        briefs: 1,
        mind: "",
        reports: &["Self run 1 finished: "],
        cut: false,
        then: None,
    },
    // A low ceiling: the second brief's arrival would cross it, so the decider refreshes the
    // Self at that task boundary, flushing the live session's memory first.
    Arm {
        point: CrashPoint::SelfFlushAnswered,
        nth: 1,
        briefs: 2,
        mind: "min_segment = 1\nceiling_tokens = 1500\n[mind.self_session]\nflush_headroom_tokens = 200\n",
        reports: &["Self run 1 finished: ", "Self run 2 was interrupted: "],
        cut: false,
        then: None,
    },
    Arm {
        point: CrashPoint::BriefRecorded,
        nth: 1,
        briefs: 1,
        mind: "",
        reports: &["Self run 1 finished: "],
        cut: false,
        then: None,
    },
];

/// The first request's stream cut after content: billed, its row taken, and the host killed
/// before the retry.
const CUT_RUN: Arm = Arm {
    cut: true,
    ..Arm::persona(CrashPoint::AttemptCut, 1)
};

/// The answer lost before its commit (`host-persona-answered`), then the restart that ledgers
/// its estimate killed right after that row's commit (`host-lost-ledgered`), before it asks
/// the batch again: the host after it must find the row and not write it twice.
const LOST_RUN: Arm = Arm {
    then: Some(CrashPoint::LostLedgered),
    ..Arm::persona(CrashPoint::PersonaAnswered, 2)
};

/// Brief `k`'s text: a few hundred tokens, so two fill a low ceiling.
fn brief_text(k: usize) -> String {
    format!(
        "Brief {k}: {}",
        "note each ledger entry, its cost and the cache it read. ".repeat(55)
    )
}

/// What the model is shown of delivery `i`: a token no other delivery's text contains.
fn marker(i: usize) -> String {
    format!("q{i}x")
}

/// The run's host, restarted unarmed after its abort, and what it counted.
struct Run<'a> {
    hosts: Hosts,
    arm: Arm,
    token: ApiToken,
    store: &'a dyn Store,
    aborts: usize,
}

impl Run<'_> {
    /// If the host exited: it must be the armed abort (else the test fails with its stderr);
    /// it is restarted unarmed.
    fn reap(&mut self) {
        let Some(served) = self.hosts.slots[0].as_mut() else {
            return;
        };
        let Some(status) = served.child.try_wait().unwrap() else {
            return;
        };
        let index = self.hosts.started - 1;
        let stderr_path = self.hosts.dir.join(format!("serve-{index}.stderr"));
        let stderr = std::fs::read_to_string(stderr_path).unwrap_or_default();
        let point = match self.aborts {
            0 => Some(self.arm.point),
            _ => self.arm.then,
        };
        let line = point.map(|p| format!("crash point {} reached", p.name()));
        assert!(
            status.signal() == Some(SIGABRT)
                && line.is_some_and(|line| stderr.contains(&line))
                && self.aborts < self.arm.aborts(),
            "host run {index} ended with {status:?}, not once at {} (aborts before: {}):\n{stderr}",
            self.arm.spec(),
            self.aborts
        );
        self.aborts += 1;
        self.hosts.slots[0] = None;
        // The restart's point once, then empty: nothing armed.
        let next = match self.aborts {
            1 => self.arm.then.map(|p| format!("{}:1", p.name())),
            _ => None,
        };
        for (k, v) in &mut self.hosts.env {
            if k == "MUNINN_FAULT" {
                *v = next.clone().unwrap_or_default();
            }
        }
        self.hosts.start(0);
    }

    fn client(&self) -> Option<ApiClient> {
        let addr = self.hosts.addrs().into_iter().next()?;
        ApiClient::new(&addr, self.token.clone()).ok()
    }

    /// Posts delivery `i`, retried with its source id until the host (or its restart) takes it.
    async fn post(&mut self, i: usize) -> String {
        let request = PostDeliveryRequest {
            room: "#swarm".into(),
            sender: format!("@user{}:example.org", i % 2),
            is_direct: false,
            to_you: false,
            text: format!("question {i} ({}): what do you remember?", marker(i)),
            source_id: format!("point-{i}"),
            context: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.reap();
            if let Some(client) = self.client()
                && client.post_delivery(MIND, &request).await.is_ok()
            {
                return request.source_id;
            }
            assert!(Instant::now() < deadline, "delivery {i} not accepted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Posts operator brief `k`, retried until taken.
    async fn post_brief(&mut self, k: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.reap();
            if let Some(client) = self.client()
                && client.post_brief(MIND, &brief_text(k)).await.is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "brief not accepted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the mailbox is acknowledged through its last seq and no brief is queued or
    /// running, restarting the host if it aborted meanwhile.
    async fn settled(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            self.reap();
            let last = self
                .store
                .pending_deliveries(MIND, 0, 1_000)
                .await
                .map_or(0, |d| d.last().map_or(0, |d| d.seq));
            let ack = self.store.ack_position(MIND).await.unwrap_or(0);
            let mut open = 0;
            for status in [BriefStatus::Queued, BriefStatus::Running] {
                open += self
                    .store
                    .briefs(MIND, Some(status), 10)
                    .await
                    .unwrap()
                    .len();
            }
            if ack >= last && open == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not settled: acknowledged {ack} of {last}, {open} brief(s) open\n{}",
                self.hosts.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Writes the configuration: one Mind on the Messages API at `base_url`, with `mind`'s lines.
fn configure(dir: &Path, base_url: &str, mind: &str) {
    let toml = format!(
        "lease_ttl_ms = 2000\n[backend]\nkind = 'anthropic'\nbase_url = '{base_url}'\n\
         api_key_env = 'MUNINN_CRASH_KEY'\n\n[[mind]]\nid = '{MIND}'\nrooms = ['#swarm']\n\
         doctrine_text = 'You are {MIND}. Answer briefly.'\n{mind}"
    );
    std::fs::write(dir.join("muninn.toml"), toml).unwrap();
}

/// One point's run on `database` (see the module docs); prints its line.
async fn run_point(arm: Arm, database: &str, store_name: &str) {
    let sim = muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        muninn_sim::sim::SimConfig::default(),
    )
    .await
    .unwrap();
    if arm.cut {
        sim.sim.push_faults([Fault {
            kind: FaultKind::Truncate { after_deltas: 1 },
            times: 1,
        }]);
    }
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), &sim.base_url(), arm.mind);
    let mut hosts = Hosts {
        dir: dir.path().to_path_buf(),
        database: database.to_string(),
        env: vec![
            ("MUNINN_CRASH_KEY".into(), "sk-test-crash".into()),
            ("MUNINN_FAULT".into(), arm.spec()),
        ],
        slots: vec![None],
        started: 0,
    };
    hosts.start(0);
    let token = ApiToken::read(&dir.path().join("api-token")).unwrap();
    let store = muninn_store::open(database).await.unwrap();
    let mut run = Run {
        hosts,
        arm,
        token,
        store: store.as_ref(),
        aborts: 0,
    };
    let posted = run.drive().await;
    run.hosts.stop(0, "-TERM");
    let seen = Seen::read(store.as_ref(), &sim.sim.requests(), &posted).await;
    store.close().await;
    println!(
        "crash point {} ({store_name}): aborted {}, deliveries {}, lost {}, duplicated {}, \
         answered requests {}, ledger rows {} (cut {}, lost {}), Self reports {:?}",
        arm.spec(),
        run.aborts,
        seen.check.posted,
        seen.check.lost,
        seen.check.duplicated,
        seen.shown.len(),
        seen.rows,
        seen.cut_rows,
        seen.lost_rows,
        seen.reports,
    );
    seen.judge(arm, &run.hosts.stderr());
    sim.stop().await.unwrap();
}

impl Run<'_> {
    /// Posts the deliveries (and after the first, the briefs) one at a time, each settled
    /// before the next; returns their source ids. The host must have aborted once.
    async fn drive(&mut self) -> BTreeSet<String> {
        let mut posted = BTreeSet::new();
        for i in 0..DELIVERIES {
            posted.insert(self.post(i).await);
            self.settled().await;
            if i == 0 {
                for k in 0..self.arm.briefs {
                    self.post_brief(k).await;
                    self.settled().await;
                }
            }
        }
        assert_eq!(
            self.aborts,
            self.arm.aborts(),
            "the host never reached {} (and its restart's point)\n{}",
            self.arm.spec(),
            self.hosts.stderr()
        );
        posted
    }
}

/// What a point's run left, read once its host stopped: the store's exactly-once check, what
/// each answered request showed the model, the ledger's rows and the Self's reports.
struct Seen {
    check: muninn_testkit::crash::MindCheck,
    shown: Vec<Vec<usize>>,
    rows: usize,
    /// The ledger's rows of attempts billed but cut (`attempt_failed`).
    cut_rows: usize,
    /// The ledger's rows of requests whose answer was lost with their host, at their estimate
    /// (`attempt_lost`).
    lost_rows: usize,
    reports: Vec<String>,
    done: usize,
    /// Per brief, the answered requests whose new (last) user message holds it.
    briefs_shown: Vec<usize>,
}

impl Seen {
    async fn read(
        store: &dyn Store,
        requests: &[muninn_sim::sim::RecordedRequest],
        posted: &BTreeSet<String>,
    ) -> Seen {
        let ledger = LedgerQuery {
            mind: Some(MIND.into()),
            ..LedgerQuery::default()
        };
        let rows = store.ledger(&ledger).await.unwrap();
        Seen {
            check: check_mind(store, MIND, posted).await.unwrap(),
            shown: shown_per_request(requests),
            briefs_shown: briefs_shown(requests),
            rows: rows.len(),
            cut_rows: (rows.iter())
                .filter(|e| e.row.decision == "attempt_failed")
                .count(),
            lost_rows: (rows.iter())
                .filter(|e| e.row.decision == "attempt_lost")
                .count(),
            reports: self_reports(store).await,
            done: store
                .briefs(MIND, Some(BriefStatus::Done), 10)
                .await
                .unwrap()
                .len(),
        }
    }

    /// Nothing lost or doubled, every delivery shown to the model once, a ledger row per
    /// answered request (but the documented lost answer), each brief reported once as it ended.
    fn judge(&self, arm: Arm, stderr: &str) {
        let check = &self.check;
        assert!(
            check.lost == 0 && check.duplicated == 0 && check.problems.is_empty(),
            "{}: {check:#?}\n{stderr}",
            arm.spec(),
        );
        for (n, counts) in self.shown.iter().enumerate() {
            assert!(
                counts.iter().all(|c| *c <= 1),
                "{}: answered request {n} shows a delivery twice: {counts:?}",
                arm.spec()
            );
        }
        let never: Vec<usize> = (0..DELIVERIES)
            .filter(|i| self.shown.iter().all(|counts| counts[*i] == 0))
            .collect();
        assert!(never.is_empty(), "{}: never shown: {never:?}", arm.spec());
        // A Persona delivery that ends the transcript unanswered when its host dies is
        // ledgered once at its estimate by the next holder: the answer a kill before its
        // commit lost, and the request a kill before its send never made (possibly billed:
        // the host cannot tell them apart). The Self flush's lost answer is billed and not
        // ledgered.
        let lost_rows = usize::from(matches!(
            arm.point,
            CrashPoint::PersonaAnswered | CrashPoint::DeliveryRecorded
        ));
        assert_eq!(
            self.lost_rows,
            lost_rows,
            "{}: rows of lost answers",
            arm.spec()
        );
        let unsent = usize::from(arm.point == CrashPoint::DeliveryRecorded);
        let unledgered = usize::from(arm.point == CrashPoint::SelfFlushAnswered);
        assert_eq!(
            self.shown.len() + unsent,
            self.rows + unledgered,
            "{}: answered requests against ledger rows",
            arm.spec()
        );
        // A cut attempt is billed: its row is in the ledger, once, whenever the host died.
        assert_eq!(
            self.cut_rows,
            usize::from(arm.cut),
            "{}: rows of cut attempts",
            arm.spec()
        );
        // One report per brief; a run that was committed is reported with its result.
        let reports = &self.reports;
        assert_eq!(
            reports.len(),
            arm.reports.len(),
            "{}: {reports:?}",
            arm.spec()
        );
        for (report, start) in reports.iter().zip(arm.reports) {
            assert!(
                report.starts_with(start),
                "{}: expected {start:?}: {reports:?}",
                arm.spec()
            );
        }
        let finished = arm
            .reports
            .iter()
            .filter(|r| r.contains("finished"))
            .count();
        assert_eq!(self.done, finished, "{}: briefs done", arm.spec());
        // A brief run is shown once; one interrupted before it was asked, never.
        let expected: Vec<usize> = arm
            .reports
            .iter()
            .map(|r| usize::from(!r.contains("interrupted")))
            .collect();
        assert_eq!(
            self.briefs_shown[..expected.len()],
            expected[..],
            "{}: briefs shown",
            arm.spec()
        );
    }
}

/// For each answered Messages request, how many times each delivery's marker appears in its
/// user messages (what the model was shown; its own replies may quote them).
fn shown_per_request(requests: &[muninn_sim::sim::RecordedRequest]) -> Vec<Vec<usize>> {
    requests
        .iter()
        .filter(|r| r.path == "/v1/messages" && r.status == 200 && r.error.is_none())
        .map(|r| {
            let user: String = r.body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    content => content.to_string(),
                })
                .collect();
            (0..DELIVERIES)
                .map(|i| user.matches(&marker(i)).count())
                .collect()
        })
        .collect()
}

/// Per brief (up to two), how many answered Messages requests end in a user message that is it:
/// the requests it was sent in as new (later requests of its segment repeat it).
fn briefs_shown(requests: &[muninn_sim::sim::RecordedRequest]) -> Vec<usize> {
    let last_user: Vec<String> = requests
        .iter()
        .filter(|r| r.path == "/v1/messages" && r.status == 200 && r.error.is_none())
        .filter_map(|r| {
            let messages = r.body["messages"].as_array()?;
            let last = messages.iter().rev().find(|m| m["role"] == "user")?;
            Some(match &last["content"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
                content => content.to_string(),
            })
        })
        .collect();
    // A Self brief's message starts `Brief <seq> (from the operator):`; a Persona's report of
    // the run may quote it (the simulator's answer echoes its prompt).
    (0..2)
        .map(|k| {
            let head = format!("Brief {k}: note");
            let sent = |t: &&String| t.starts_with("Brief ") && t.contains(&head);
            last_user.iter().filter(sent).count()
        })
        .collect()
}

/// The Self's reports to the Persona (deliveries from room `self`), by text.
async fn self_reports(store: &dyn Store) -> Vec<String> {
    store
        .pending_deliveries(MIND, 0, 1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.source_id.starts_with("self-brief-"))
        .map(|d| d.text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_on_sqlite_loses_and_repeats_nothing() {
    for arm in SQLITE_RUNS {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("muninn.db").display().to_string();
        run_point(arm, &database, "sqlite").await;
    }
}

/// Before the cut attempt's row was committed as it was taken, it waited in memory for the
/// failed step's end, and the kill lost it: the provider billed it, the ledger did not show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_attempt_killed_before_its_retry_is_in_the_ledger_once() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("muninn.db").display().to_string();
    run_point(CUT_RUN, &database, "sqlite").await;
}

/// Before the lost answer's estimate was recorded with its delivery, a kill between the answer
/// and its commit left the request counted nowhere: the provider billed it, the ledger, the
/// spend cap and `muninn status` did not show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_lost_before_its_commit_is_ledgered_once_through_two_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("muninn.db").display().to_string();
    run_point(LOST_RUN, &database, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_persona_crash_points_on_postgres_lose_and_repeat_nothing() {
    for arm in SQLITE_RUNS[..3].iter().chain([&CUT_RUN, &LOST_RUN]) {
        let then = arm.then.map_or(String::new(), |p| format!("_{}", p.name()));
        let name = format!("muninn_crashpt_{}{then}", arm.point.name()).replace('-', "_");
        let Some(db) = FreshDatabase::for_test(&name, "crash points on PostgreSQL") else {
            return;
        };
        run_point(*arm, &db.url(), "postgres").await;
    }
}

/// A name that arms nothing is refused at start, naming the known points.
#[test]
fn an_unknown_crash_point_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), "http://127.0.0.1:9", "");
    let database = dir.path().join("muninn.db").display().to_string();
    let out = serve_command(
        &dir.path().join("muninn.toml"),
        dir.path(),
        &database,
        "warn",
    )
    .env("MUNINN_CRASH_KEY", "sk-test")
    .env("MUNINN_FAULT", "host-nowhere")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for point in CrashPoint::ALL {
        assert!(stderr.contains(point.name()), "{stderr}");
    }
    assert!(stderr.contains("matrix-sent-before-ack"), "{stderr}");
}
