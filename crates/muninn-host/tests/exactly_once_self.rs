//! A Self brief, exactly once, where a store's answer is lost: the brief's append lands but its
//! answer does not come back, or the run's commit does. Either way the runner retries the step,
//! and: the Self model is shown the brief once (the simulator's request log), the brief is run
//! and reported once, the Self ledger holds one row per Self request, each Self request extends
//! the one before it byte for byte (the segment's append-only prefix), and the Self transcript
//! holds exactly the briefs its last request was shown — what a renderer rebuilt from it (a new
//! lease, a resumed CLI session) would send. The kill between a brief's append and its ask is
//! the crash harness's `host-brief-recorded` (`crates/muninn/tests/crash_points.rs`).

use crate::runtime::{World, ledger, mind, runner, stored_brief};
use muninn_host::runtime::{MindRunner, RuntimeError, Step};
use muninn_sim::inprocess::SimBackend;
use muninn_store::{BriefOrigin, BriefStatus, NewBrief, Role, Store, StoreError, TranscriptKind};
use serde_json::Value;
use std::sync::Arc;

/// A word only the probe brief holds.
const PROBE: &str = "self-exactly-once-probe";

/// Queues an operator brief on `vala`; its seq.
async fn brief(w: &World, text: &str) -> i64 {
    let brief = NewBrief {
        text: text.into(),
        origin: BriefOrigin::Operator,
        created_at_ms: w.sim.now_ms(),
    };
    w.host
        .store
        .enqueue_brief("vala", &brief)
        .await
        .unwrap()
        .seq
}

/// Steps until the runner idles (the Persona reads each report in between); every step must
/// succeed.
async fn settle(r: &mut MindRunner<SimBackend>) -> Vec<Step> {
    let mut steps = Vec::new();
    for _ in 0..10 {
        let step = r.step().await.unwrap();
        if matches!(step, Step::Idle { .. }) {
            return steps;
        }
        steps.push(step);
    }
    panic!("never idle: {steps:?}")
}

/// A world on a fault-armed store whose runner `host-a` has run one brief to its end, and the
/// probe brief queued after it (its seq): the state every test here arms a fault in.
async fn a_brief_after_one_run() -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
    i64,
) {
    a_brief_after_one_run_of(mind("")).await
}

/// [`a_brief_after_one_run`] for a Mind configured as `config`.
async fn a_brief_after_one_run_of(
    config: muninn_host::config::MindConfig,
) -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
    i64,
) {
    let (w, faults) = crate::runtime::faulty_world("").await;
    let mut r = runner(&w, config, "host-a");
    r.register().await.unwrap();
    brief(&w, "Summarise the open issues.").await;
    settle(&mut r).await;
    let seq = brief(&w, &format!("{PROBE}: summarise the week.")).await;
    (w, faults, r, seq)
}

/// A message's text: a string, or its blocks' texts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The user messages' texts of a Messages request body.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .collect()
}

/// `v` without its cache breakpoints (the only bytes that may move between two requests of a
/// segment).
fn without_breakpoints(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), without_breakpoints(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_breakpoints).collect()),
        v => v.clone(),
    }
}

/// The Self's answered Messages requests, oldest first: those whose first user message is a
/// brief (a Persona's is a delivery).
fn self_requests(w: &World) -> Vec<Value> {
    w.sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200 && r.error.is_none())
        .filter(|r| {
            user_texts(&r.body)
                .first()
                .is_some_and(|t| t.starts_with("Brief "))
        })
        .map(|r| r.body)
        .collect()
}

/// What a run left, checked: the probe brief (`seq`) shown to the model once — in one request's
/// new message, never twice in one request —, done and reported once; one Self ledger row per
/// Self request; each Self request of a segment extending the one before (`segments` started);
/// the probe recorded at most once per segment, and the Self transcript's last segment holding
/// exactly the briefs the last Self request was shown.
async fn brief_exactly_once(w: &World, seq: i64, briefs: usize, segments: usize) {
    let requests = self_requests(w);
    shown_once_in_extending_requests(&requests, briefs, segments);
    let rows = ledger(w).await;
    let self_rows = rows
        .iter()
        .filter(|row| row.role == Role::SelfRole.as_str())
        .count();
    assert_eq!(
        self_rows,
        requests.len(),
        "Self ledger rows against requests"
    );
    done_and_reported_once(w, seq).await;
    transcript_as_sent(w, requests.last().unwrap()).await;
}

/// The Self requests: `briefs` of them, `segments` started (a segment's first request holds one
/// brief; every other extends the one before, byte for byte), the probe the new message of one
/// and never shown twice in one.
fn shown_once_in_extending_requests(requests: &[Value], briefs: usize, segments: usize) {
    assert_eq!(requests.len(), briefs, "one Self request per brief");
    // A segment's first request holds one brief; every other extends the one before.
    let starts = |r: &Value| user_texts(r).len() == 1;
    assert_eq!(
        requests.iter().filter(|r| starts(r)).count(),
        segments,
        "Self segments started"
    );
    let shown_new = requests
        .iter()
        .filter(|r| user_texts(r).last().is_some_and(|t| t.contains(PROBE)))
        .count();
    assert_eq!(shown_new, 1, "requests whose new brief is the probe");
    // In what the model was told (its own answers echo the brief).
    for (n, r) in requests.iter().enumerate() {
        let told = user_texts(r).concat();
        assert!(
            told.matches(PROBE).count() <= 1,
            "Self request {n} shows the probe twice: {told}"
        );
    }
    for pair in requests.windows(2).filter(|pair| !starts(&pair[1])) {
        let (before, after) = (without_breakpoints(&pair[0]), without_breakpoints(&pair[1]));
        assert_eq!(before["system"], after["system"], "the system changed");
        let (before, after) = (
            before["messages"].as_array().unwrap(),
            after["messages"].as_array().unwrap(),
        );
        assert!(
            after.len() > before.len() && after[..before.len()] == before[..],
            "a Self request does not extend the one before:\n{before:#?}\n{after:#?}"
        );
    }
}

/// The probe brief (`seq`) done, and reported to the Persona once, as finished.
async fn done_and_reported_once(w: &World, seq: i64) {
    let stored = stored_brief(w, seq).await;
    assert_eq!(stored.status, BriefStatus::Done, "{stored:?}");
    let reports = reports_of(w, seq).await;
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].starts_with(&format!("Self run {seq} finished: ")),
        "{reports:?}"
    );
}

/// The probe brief (`seq`) failed, and reported to the Persona once, as interrupted: `by` what
/// (after "was interrupted: "), and saying `says`.
async fn failed_and_reported_once(w: &World, seq: i64, by: &str, says: &str) {
    let stored = stored_brief(w, seq).await;
    assert_eq!(stored.status, BriefStatus::Failed, "{stored:?}");
    let reports = reports_of(w, seq).await;
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0].starts_with(&format!("Self run {seq} was interrupted: {by}"))
            && reports[0].contains(says),
        "{reports:?}"
    );
}

/// How many Self requests showed the probe anywhere in what the model was told.
fn showing_the_probe(w: &World) -> usize {
    self_requests(w)
        .iter()
        .filter(|r| user_texts(r).concat().contains(PROBE))
        .count()
}

/// `r` shut down cleanly (its lease released) and the same host started again with `config`,
/// settled: the restarted runner.
async fn restarted_cleanly(
    w: &World,
    mut r: MindRunner<SimBackend>,
    config: muninn_host::config::MindConfig,
) -> MindRunner<SimBackend> {
    r.release().await.unwrap();
    drop(r);
    let mut restarted = runner(w, config, "host-a");
    settle(&mut restarted).await;
    restarted
}

/// The probe recorded at most once per segment, and the Self transcript's last segment holding
/// exactly the briefs the `last` Self request was shown.
async fn transcript_as_sent(w: &World, last: &Value) {
    let transcript = self_transcript(&w.host.store).await;
    // At most once per segment it was rendered in (a restart renders it in a new one).
    let probes: Vec<i64> = transcript
        .iter()
        .filter(|(_, kind, text)| *kind == TranscriptKind::Brief && text.contains(PROBE))
        .map(|(segment, _, _)| *segment)
        .collect();
    let mut once = probes.clone();
    once.dedup();
    assert_eq!(
        once, probes,
        "the probe recorded twice in a segment: {transcript:#?}"
    );
    let segment = transcript.last().map(|(s, _, _)| *s);
    let recorded: Vec<&String> = transcript
        .iter()
        .filter(|(s, kind, _)| Some(*s) == segment && *kind == TranscriptKind::Brief)
        .map(|(_, _, text)| text)
        .collect();
    let sent = user_texts(last);
    let sent: Vec<&String> = sent.iter().collect();
    assert_eq!(
        recorded, sent,
        "the transcript's briefs are not what the model was shown"
    );
}

/// What the Persona was told of brief `seq`: the texts of the deliveries its report posted.
async fn reports_of(w: &World, seq: i64) -> Vec<String> {
    w.host
        .store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .map(|d| d.text)
        .collect()
}

/// The Self transcript: each item's segment, kind and text.
async fn self_transcript(store: &Arc<dyn Store>) -> Vec<(i64, TranscriptKind, String)> {
    let items = store
        .transcript_tail("vala", Role::SelfRole, 100)
        .await
        .unwrap();
    items
        .into_iter()
        .map(|i| {
            let text = i.body["text"].as_str().unwrap_or_default().to_string();
            (i.segment, i.kind, text)
        })
        .collect()
}

/// A brief's append lands but its answer is lost (the store's deadline passed after `COMMIT`):
/// the step fails, and the next one finishes the append under its key — the store adds
/// nothing — and runs the brief on the session it was rendered on.
#[tokio::test]
async fn a_brief_whose_append_answer_is_lost_is_recorded_shown_and_run_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers(1);
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    settle(&mut r).await;
    brief(&w, "And the month.").await;
    settle(&mut r).await;
    brief_exactly_once(&w, seq, 3, 1).await;
}

/// A run's commit lands but its answer is lost: the record is held and committed again under
/// its turn key (the store finds it recorded), then the brief is finished and reported once.
#[tokio::test]
async fn a_brief_whose_run_commit_answer_is_lost_is_run_and_reported_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_commit_answers(1);
    let e = r.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    settle(&mut r).await;
    brief(&w, "And the month.").await;
    settle(&mut r).await;
    brief_exactly_once(&w, seq, 3, 1).await;
}

/// A restart after the brief's append whose answer was lost: the new process (a new nonce, a
/// new lease) finds the brief's item ending the Self transcript, never answered, and runs the
/// brief again rather than failing it — recorded in a new segment (a segment that ends
/// unanswered is never continued), so the old one keeps a copy the model never saw, and the
/// model is shown the brief once. The kill between a confirmed append and the ask is the same
/// state (`crash_points`, `host-brief-recorded`).
#[tokio::test]
async fn a_restart_after_a_lost_brief_append_answer_runs_the_brief_once_in_a_new_segment() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers(1);
    r.step().await.unwrap_err();
    drop(r);
    let mut restarted = runner(&w, mind(""), "host-a");
    settle(&mut restarted).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A run whose brief was sent — answered, even, and a Claude Code run may have edited files by
/// then — and whose host died before its end was committed leaves nothing after the brief's
/// item but the mark that it was asked: the next holder reports it interrupted, saying that
/// nothing of the run was recorded, and does not ask the model again (which would repeat
/// whatever the run did). Only a brief that was never asked is run again (above).
#[tokio::test]
async fn a_brief_asked_before_its_host_died_is_reported_interrupted_not_run_again() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    // The run's end is refused, held for the next step; the host dies before that step.
    faults.fail_commits(1);
    let e = r.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    drop(r);
    let mut restarted = runner(&w, mind(""), "host-a");
    settle(&mut restarted).await;
    let shown = self_requests(&w)
        .iter()
        .filter(|r| user_texts(r).last().is_some_and(|t| t.contains(PROBE)))
        .count();
    assert_eq!(shown, 1, "requests whose new brief is the probe");
    failed_and_reported_once(&w, seq, "", "before anything of the run was recorded").await;
}

/// A brief held because its append was refused (nothing landed) when its host loses the lease:
/// the next holder finds it `running` with no item of it in the Self transcript — never sent —
/// and fails it saying exactly that, once. Before, its result told the Persona that "what it
/// did until then is in the transcript and the ledger" of a run that never began. It is not
/// run: a failure report of it may have been posted already (`stranded.rs`).
#[tokio::test]
async fn a_held_brief_that_never_landed_is_reported_never_sent_by_the_next_holder() {
    let (w, faults, mut a, seq) = a_brief_after_one_run().await;
    faults.refuse_appends(1);
    a.step().await.unwrap_err();
    w.sim.advance_clock(w.host.config.lease_ttl_ms + 1_000);
    let mut b = runner(&w, mind(""), "host-b");
    settle(&mut b).await;
    assert_eq!(a.step().await.unwrap(), Step::NotLeader);
    settle(&mut b).await;

    assert_eq!(showing_the_probe(&w), 0, "requests showing the probe");
    failed_and_reported_once(
        &w,
        seq,
        "its host stopped",
        "before the brief was recorded or sent to the model",
    )
    .await;
}

/// Another host takes the Mind over from `r`'s lease and lets it go at once, without a step:
/// `r`'s token is stale, and its next lease is a new one, with nothing run in between.
async fn lease_changes_hands(w: &World) {
    let store = &w.host.store;
    let held = store.lease("vala").await.unwrap().expect("host-a leads");
    let now = w.sim.now_ms();
    let b = (store.take_over_lease("vala", "host-b", held.token, 30_000, now))
        .await
        .unwrap()
        .expect("host-b takes the Mind over");
    store.release_lease("vala", b.token).await.unwrap();
}

/// Steps until the runner idles, failed steps included (a step under a stale lease fails).
async fn settle_through_errors(r: &mut MindRunner<SimBackend>) {
    for _ in 0..10 {
        r.woken();
        if matches!(r.step().await, Ok(Step::Idle { .. })) {
            return;
        }
    }
    panic!("never idle");
}

/// A brief whose ask mark landed but whose answer was lost, when the lease changes hands
/// before the runner tries again (nothing run in between): the runner never sent the brief —
/// a brief is sent only once its mark is confirmed — and knows it, so under its next lease it
/// runs it, once, in a new segment, as a brief recorded and never asked. Before, the recovery
/// read the mark and failed the brief as *interrupted … after the brief was sent …; it may
/// have acted*: a run that never began, reported as one that may have edited files.
#[tokio::test]
async fn a_brief_whose_ask_mark_answer_was_lost_is_run_once_under_the_next_lease() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    lease_changes_hands(&w).await;
    settle_through_errors(&mut r).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle_through_errors(&mut r).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// The same lost mark answer, and then a clean shutdown before the runner tries again: the
/// brief was never sent, which only the runner knows; it says so in the Self transcript before
/// it lets the lease go, and the restarted host runs the brief once, in a new segment. Before,
/// the restarted host read the mark and failed the brief as *interrupted … may have acted*.
#[tokio::test]
async fn a_brief_whose_ask_mark_answer_was_lost_is_run_once_after_a_clean_restart() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    let mut restarted = restarted_cleanly(&w, r, mind("")).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A brief whose ask mark was refused before it landed, and the Mind taken over while the
/// runner held it: the new holder finds the brief's item last, never asked, and runs it; it
/// dies after sending it (its run's commit refused, then the process gone), its own mark last.
/// The first runner, back under a new lease, must not take that mark for its own unconfirmed
/// one: the brief was sent — by the other holder — and may have acted, so it is failed as
/// interrupted and the model is shown it once. Before, the runner remembered "my mark, never
/// confirmed", found a mark last and ran the brief a second time.
#[tokio::test]
async fn a_mark_another_holder_wrote_is_not_taken_for_the_runners_own_unconfirmed_one() {
    let (w, faults, mut a, seq) = a_brief_after_one_run().await;
    faults.refuse_appends_after(1, 1);
    a.step().await.unwrap_err();
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    let ttl = w.host.config.lease_ttl_ms;
    w.sim.advance_clock(ttl + 1_000);
    let mut b = runner(&w, mind(""), "host-b");
    faults.fail_commits(1);
    let e = b.step().await.unwrap_err();
    assert!(matches!(e, RuntimeError::Held(_)), "{e}");
    assert_eq!(self_requests(&w).len(), 2, "host-b sent the probe");
    drop(b);
    w.sim.advance_clock(ttl + 1_000);
    settle_through_errors(&mut a).await;

    assert_eq!(showing_the_probe(&w), 1, "requests showing the probe");
    failed_and_reported_once(
        &w,
        seq,
        "its host stopped",
        "may have reached the model and acted",
    )
    .await;
}

/// A brief whose ask mark's answer was lost, and the next step's spend read (the cap checked
/// before the held brief is sent) failing too — a store in trouble fails both: the runner
/// still holds the brief, never sent, and runs it once at the step after, on the session it
/// was rendered on. Before, the failed read dropped the held brief, and the recovery that
/// followed the failed step read the mark and failed the brief as *interrupted … may have
/// reached the model and acted*: a run that never began.
#[tokio::test]
async fn a_held_brief_whose_cap_read_fails_is_still_held_and_run_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run_of(capped()).await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    faults.fail_spend_reads(1);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("closed the connection"), "{e}");
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    settle(&mut r).await;
    brief(&w, "And the month.").await;
    settle(&mut r).await;
    brief_exactly_once(&w, seq, 3, 1).await;
}

/// A brief whose ask mark's answer was lost, recovered by its runner under its next lease as
/// one never sent, and the new segment it is to run in refused by the store (the segment
/// start): the runner still holds the brief and runs it once at the step after. Before, the
/// failed step let the brief go, and the recovery after it read the mark and failed the brief
/// as *interrupted: the store failed (…) after the brief was marked as sent …; it may have
/// reached the model and acted*: a run that never began.
#[tokio::test]
async fn a_held_brief_whose_new_segment_is_refused_is_still_held_and_run_once() {
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    lease_changes_hands(&w).await;
    faults.fail_segment_starts(1);
    // The stale lease's step is fenced; the next takes a new lease, and recovers the brief.
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Fenced { .. })),
        "{e}"
    );
    r.woken();
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("refused the segment"), "{e}");
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    settle_through_errors(&mut r).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle_through_errors(&mut r).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A capped runner (the cap is read before a held brief is sent) whose probe brief's ask mark
/// landed with its answer lost, its lease changed hands since and its next step fenced: the
/// step after takes a new lease and recovers the brief as one never sent, the mark that ends
/// the Self transcript its own — which only the runner knows.
async fn a_brief_whose_mark_answer_was_lost_under_a_stale_lease() -> (
    World,
    Arc<muninn_testkit::FaultyStore>,
    MindRunner<SimBackend>,
    i64,
) {
    let (w, faults, mut r, seq) = a_brief_after_one_run_of(capped()).await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    lease_changes_hands(&w).await;
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Fenced { .. })),
        "{e}"
    );
    r.woken();
    (w, faults, r, seq)
}

/// [`a_brief_whose_mark_answer_was_lost_under_a_stale_lease`], and the step that recovers the
/// brief failing on its spend read: the brief is still held, never sent.
async fn a_recovered_brief_held_through_a_failed_spend_read() -> (World, MindRunner<SimBackend>, i64)
{
    let (w, faults, mut r, seq) = a_brief_whose_mark_answer_was_lost_under_a_stale_lease().await;
    faults.fail_spend_reads(1);
    let e = r.step().await.unwrap_err();
    assert!(e.to_string().contains("closed the connection"), "{e}");
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    (w, r, seq)
}

/// `vala` with a spend cap far above what the tests spend: the cap is read before each brief.
fn capped() -> muninn_host::config::MindConfig {
    mind("spend_cap_micro_usd = 1000000000\n")
}

/// A brief recovered under a new lease as one never sent (its ask mark's answer lost), still
/// held when its runner shuts down cleanly: the runner takes the mark back, and the restarted
/// host runs the brief once. Before, the brief held from the recovery had forgotten that the
/// mark was its runner's own: nothing was written, and the restarted host failed the brief as
/// *interrupted … may have reached the model and acted* — a run that never began.
#[tokio::test]
async fn a_recovered_brief_still_held_at_a_clean_shutdown_is_run_once_after_the_restart() {
    let (w, r, seq) = a_recovered_brief_held_through_a_failed_spend_read().await;
    let mut restarted = restarted_cleanly(&w, r, capped()).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// The same recovered and held brief when the lease changes hands a second time before it is
/// sent: the runner still knows the mark last is its own, and runs the brief once under its
/// next lease. Before, the second lease change found no such knowledge in the held brief and
/// the recovery failed it as *interrupted … may have reached the model and acted*.
#[tokio::test]
async fn a_recovered_brief_still_held_at_a_second_lease_change_is_run_once() {
    let (w, mut r, seq) = a_recovered_brief_held_through_a_failed_spend_read().await;
    lease_changes_hands(&w).await;
    settle_through_errors(&mut r).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle_through_errors(&mut r).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// The recovered brief recorded afresh in its new segment, that append refused before it
/// landed, then a clean shutdown: the mark that ends the Self transcript is still the runner's
/// own (the item it recorded first is the last one confirmed), so it is taken back and the
/// restarted host runs the brief once.
#[tokio::test]
async fn a_recovered_brief_whose_fresh_append_is_refused_is_run_once_after_a_clean_restart() {
    let (w, faults, mut r, seq) = a_brief_whose_mark_answer_was_lost_under_a_stale_lease().await;
    faults.refuse_appends(1);
    r.step().await.unwrap_err();
    assert_eq!(self_requests(&w).len(), 1, "the probe was not sent");
    let mut restarted = restarted_cleanly(&w, r, capped()).await;
    done_and_reported_once(&w, seq).await;
    brief(&w, "And the month.").await;
    settle(&mut restarted).await;
    brief_exactly_once(&w, seq, 3, 2).await;
}

/// A brief whose ask mark's answer was lost, and then a clean shutdown whose notice taking the
/// mark back lands with its answer lost too: the restarted host finds the notice last and runs
/// the brief, so the warning must say so. Before, it said *the next holder fails it as
/// interrupted*, sending an operator to look for a failure that never came.
#[tokio::test]
async fn a_lost_answer_to_the_notice_taking_a_mark_back_is_logged_as_what_happens() {
    let (logs, _anchor, _guard) = crate::telemetry::capture_logs();
    let (w, faults, mut r, seq) = a_brief_after_one_run().await;
    faults.lose_append_answers_after(1, 1);
    r.step().await.unwrap_err();
    faults.lose_append_answers(1);
    r.release().await.unwrap();
    drop(r);
    let warned: Vec<String> = logs
        .events()
        .into_iter()
        .filter(|e| e["level"] == "WARN" && e["fields"]["brief"] == seq)
        .filter_map(|e| e["fields"]["message"].as_str().map(str::to_string))
        .filter(|m| m.starts_with("a brief never sent could not"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", logs.events());
    assert!(
        warned[0]
            .contains("if the notice landed (its answer lost), the next holder runs the brief"),
        "{warned:?}"
    );
    let mut restarted = runner(&w, mind(""), "host-a");
    settle(&mut restarted).await;
    done_and_reported_once(&w, seq).await;
}

/// Steps a Claude Code runner until it idles, each step a new wake (a Persona turn reads each
/// report in between); every step must succeed.
async fn settle_cli(r: &mut MindRunner<muninn_host::backends::AnyBackend>) {
    for _ in 0..10 {
        r.woken();
        if matches!(r.step().await.unwrap(), Step::Idle { .. }) {
            return;
        }
    }
    panic!("never idle");
}

/// The user lines of every CLI session file the Self's child wrote that hold `word`.
fn self_session_lines_with(w: &crate::cli_world::CliWorld, word: &str) -> Vec<String> {
    let projects = w
        .host
        .config
        .data_dir
        .join("claude-cli/vala/self/home/.claude/projects");
    let mut lines = Vec::new();
    for dir in std::fs::read_dir(projects).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "jsonl") {
                let text = std::fs::read_to_string(f.path()).unwrap();
                lines.extend(
                    text.lines()
                        .filter(|l| l.contains(word))
                        .filter(|l| {
                            serde_json::from_str::<Value>(l).is_ok_and(|v| v["type"] == "user")
                        })
                        .map(str::to_string),
                );
            }
        }
    }
    lines
}

/// [`a_brief_whose_append_answer_is_lost_is_recorded_shown_and_run_once`] on the Claude Code
/// CLI, whose Self session is the CLI's own (its session file, resumed by later briefs): the
/// brief held after its lost append answer is sent on the same child, once — its session file
/// holds one user line with the brief, the next brief's request extends the same conversation
/// (one Self segment, the probe once in it), and the brief is done and reported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_cli_a_brief_whose_append_answer_is_lost_is_sent_once_on_the_same_session() {
    let Some(bin) = muninn_testkit::peers::claude_cli() else {
        return;
    };
    let (w, faults) = crate::exactly_once::faulty_cli_world(bin).await;
    let queue = |text: String| queue_on_cli(&w, text);
    let mut r = w.runner(mind(""), "host-a");
    r.register().await.unwrap();
    queue("Summarise the open issues.".into()).await;
    settle_cli(&mut r).await;
    let seq = queue(format!("{PROBE}: summarise the week.")).await;
    faults.lose_append_answers(1);
    r.woken();
    let e = r.step().await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::Store(StoreError::Unavailable(_))),
        "{e}"
    );
    settle_cli(&mut r).await;
    queue("And the month.".into()).await;
    settle_cli(&mut r).await;

    let lines = self_session_lines_with(&w, PROBE);
    assert_eq!(
        lines.len(),
        1,
        "the CLI session holds the brief {}",
        lines.len()
    );
    // The transcript, which a restarted host resumes the CLI session from, holds it once too.
    let transcript = self_transcript(&w.host.store).await;
    let recorded = transcript
        .iter()
        .filter(|(_, kind, text)| *kind == TranscriptKind::Brief && text.contains(PROBE))
        .count();
    assert_eq!(recorded, 1, "{transcript:#?}");
    // A restart resumes the Self's CLI session through its stored handle (the transcript and
    // the session still agree), and the next brief extends it: the probe in it once.
    drop(r);
    let mut restarted = w.runner(mind(""), "host-a");
    queue("And the year.".into()).await;
    settle_cli(&mut restarted).await;
    let self_requests: Vec<String> = w
        .messages_requests()
        .iter()
        .map(Value::to_string)
        .filter(|b| b.contains("(from the operator)"))
        .collect();
    let last = self_requests.last().unwrap();
    assert!(
        last.contains("And the month.") && last.contains("And the year."),
        "{last}"
    );
    assert_eq!(last.matches(PROBE).count(), 1, "{last}");
    one_segment_and_the_brief_done_once(&w, seq).await;
    w.server.stop().await.unwrap();
}

/// Queues an operator brief on `vala` at the world's time; its seq.
async fn queue_on_cli(w: &crate::cli_world::CliWorld, text: String) -> i64 {
    let brief = NewBrief {
        text,
        origin: BriefOrigin::Operator,
        created_at_ms: w.server.sim.now_ms(),
    };
    w.host
        .store
        .enqueue_brief("vala", &brief)
        .await
        .unwrap()
        .seq
}

/// The Self still in its one segment (its CLI session resumed, not rebuilt), and brief `seq`
/// done and reported to the Persona once.
async fn one_segment_and_the_brief_done_once(w: &crate::cli_world::CliWorld, seq: i64) {
    let segments = w.host.store.segments("vala", Role::SelfRole).await.unwrap();
    assert_eq!(segments.len(), 1, "{segments:#?}");
    let briefs = w.host.store.briefs("vala", None, 10).await.unwrap();
    let stored = briefs.into_iter().find(|b| b.seq == seq).unwrap();
    assert_eq!(stored.status, BriefStatus::Done, "{stored:?}");
    let reports = w
        .host
        .store
        .pending_deliveries("vala", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.source_id == format!("self-brief-{seq}"))
        .count();
    assert_eq!(reports, 1);
}
