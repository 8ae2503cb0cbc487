//! The closed loop's harness: a workload's events ([`Act`]), the random ones drawn, and the
//! runner driven through them as `run_mind` drives it on the simulator's frozen clock.

use super::{WORKSPACE_FILES, words_of};
use crate::runtime::{World, mind, post, world_on};
use muninn_anthropic::backend::ContextTools;
use muninn_backend::BackendError;
use muninn_core::price::PriceTable;
use muninn_host::config::MindConfig;
use muninn_host::runtime::{Failing, MindRunner, RetryPolicy, RuntimeError, Step};
use muninn_sim::inprocess::{InProcess, SimBackend};
use muninn_sim::sim::{Fault, FaultKind};
use muninn_store::{BriefOrigin, NewBrief};
use muninn_testkit::FaultyStore;
use proptest::prelude::*;
use std::sync::Arc;

/// One event of a workload.
#[derive(Debug, Clone)]
pub(super) enum Act {
    /// A message in a room (0, 1) or a DM (2, 3), of some words.
    Deliver { room: u8, words: u16 },
    /// An operator brief for the Self.
    Brief { words: u16 },
    /// Time passes.
    Wait { ms: i64 },
    /// The host stops (releasing its lease, or killed holding it) and a new process takes over.
    Restart { clean: bool },
    /// A brief whose Self run reads `files` files of the workspace, one request each (the
    /// simulator's scripted loop; only with a workspace, [`Harness::with_workspace`]).
    ToolBrief { files: u8 },
    /// A message whose first attempt the provider refuses (a 429 asking to wait
    /// `retry_after_ms`): the runner backs off as `run_mind` does and tries again.
    Refused {
        room: u8,
        words: u16,
        retry_after_ms: i64,
    },
    /// The store refuses the next `commits` commits (turns, ledger rows): the answers they
    /// carry are held and committed first when the runner tries again (`runtime/pending.rs`).
    StoreFaults { commits: u32 },
    /// The runner reaches its next idle decision point `ms` late (it was busy, the machine
    /// slow, its timer late): the harness sleeps that much past the time the runner names.
    Late { ms: i64 },
    /// The provider loses every cached entry now, before their TTLs say (the simulator's
    /// cache emptied): the next request's answer writes what the host's cache model reads.
    Evict,
    /// The provider cuts the next request's stream after `message_start` and `after_deltas`
    /// content deltas — ending it (`truncate`), or with an `error` event (`mid_stream_error`)
    /// — and bills it to the cut: the host retries it, and the cut attempt is a ledger row.
    Cut { after_deltas: u32, mid_stream: bool },
}

/// The hosts' lease: an hour.
pub(super) const LEASE_TTL_MS: i64 = 3_600_000;

/// Idle gaps around both TTLs (5m tail, 1h head) and the decision points 30 s before each.
pub(super) const GAPS_MS: [i64; 11] = [
    2_000, 40_000, 255_000, 275_000, 310_000, 720_000, 3_300_000, 3_575_000, 3_590_000, 3_700_000,
    10_800_000,
];

/// How late the runner reaches an idle decision point: within the 30 s before the entry's
/// expiry, just past it, and well past it.
pub(super) const LATE_MS: [i64; 7] = [1_000, 10_000, 25_000, 29_999, 30_000, 45_000, 120_000];

pub(super) fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        5 => (0u8..4, 3u16..120).prop_map(|(room, words)| Act::Deliver { room, words }),
        1 => (3u16..900).prop_map(|words| Act::Brief { words }),
        4 => (0usize..GAPS_MS.len()).prop_map(|i| Act::Wait { ms: GAPS_MS[i] }),
        1 => any::<bool>().prop_map(|clean| Act::Restart { clean }),
        1 => (0u8..4, 3u16..120, 0usize..GAPS_MS.len()).prop_map(|(room, words, i)| {
            Act::Refused { room, words, retry_after_ms: GAPS_MS[i] }
        }),
        1 => (1u32..4).prop_map(|commits| Act::StoreFaults { commits }),
        2 => (0usize..LATE_MS.len()).prop_map(|i| Act::Late { ms: LATE_MS[i] }),
        1 => Just(Act::Evict),
        1 => (0u32..3, any::<bool>())
            .prop_map(|(after_deltas, mid_stream)| Act::Cut { after_deltas, mid_stream }),
    ]
}

/// The Mind under test: small segments and a low ceiling so refreshes of every kind happen
/// within a few dozen turns; `extra` picks the policy and refresh mode.
pub(super) fn test_mind(extra: &str) -> MindConfig {
    mind(&format!(
        "min_segment = 2\nmemory_tokens = 300\nceiling_tokens = 16000\n{extra}"
    ))
}

pub(super) struct Harness {
    pub(super) w: World,
    /// The Self's workspace, when its briefs are tool loops.
    pub(super) _workspace: Option<tempfile::TempDir>,
    pub(super) mind: MindConfig,
    pub(super) runner: Option<MindRunner<SimBackend>>,
    /// The provider context tools both roles' backends use (the backend's defaults unless a
    /// test asks for more, e.g. server compaction).
    pub(super) tools: ContextTools,
    pub(super) hosts: u32,
    pub(super) posted: u32,
    /// The run of failed steps the runner is backing off from, as `run_mind` keeps it.
    pub(super) failing: Option<Failing>,
    /// The store under the host, to refuse commits on demand.
    pub(super) faults: Arc<FaultyStore>,
    /// How late the runner will reach its next idle decision point ([`Act::Late`]).
    pub(super) late_ms: i64,
}

impl Harness {
    pub(super) async fn new(extra: &str) -> Harness {
        Harness::with(test_mind(extra), "", None).await
    }

    /// A harness whose Self runs its briefs as tool loops over a workspace of text files.
    pub(super) async fn with_workspace(extra: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        for f in 0..WORKSPACE_FILES {
            let text: String = (0..150)
                .map(|l| format!("file {f} line {l}: entry {} of the ledger\n", l * 3 + f))
                .collect();
            std::fs::write(dir.path().join(format!("f{f:02}.txt")), text).unwrap();
        }
        let config = format!(
            "[backend.self_session]\nworkspace = {:?}\nmax_requests = 60",
            dir.path().display().to_string()
        );
        // Small segments, the model's window as the ceiling and the default memory budget: a
        // smaller one makes a rebuild so cheap that the growth rule leaves a clear no horizon.
        let mind = mind(&format!("min_segment = 2\n{extra}"));
        Harness::with(mind, &config, Some(dir)).await
    }

    pub(super) async fn with(
        mind: MindConfig,
        config: &str,
        workspace: Option<tempfile::TempDir>,
    ) -> Harness {
        Harness::with_tools(mind, config, workspace, ContextTools::default()).await
    }

    /// [`Harness::with`], both roles' backends on the provider's context `tools`.
    pub(super) async fn with_tools(
        mind: MindConfig,
        config: &str,
        workspace: Option<tempfile::TempDir>,
        tools: ContextTools,
    ) -> Harness {
        // A long lease, so the runner's sleeps (capped at a third of it, as in `run_mind`) are
        // few; a killed host's Minds wait for it to lapse.
        Harness::with_lease(mind, config, workspace, tools, LEASE_TTL_MS).await
    }

    /// [`Harness::with_tools`] under leases of `lease_ms` (a killed host's successor takes its
    /// Minds over once it lapses: the default's 30 s comes well within the tail's TTL).
    pub(super) async fn with_lease(
        mind: MindConfig,
        config: &str,
        workspace: Option<tempfile::TempDir>,
        tools: ContextTools,
        lease_ms: i64,
    ) -> Harness {
        let mut faults = None;
        let w = world_on(&format!("lease_ttl_ms = {lease_ms}\n{config}"), |store| {
            let faulty = FaultyStore::new(store);
            faults = Some(faulty.clone());
            faulty
        })
        .await;
        let faults = faults.expect("the store was wrapped");
        let mut h = Harness {
            w,
            _workspace: workspace,
            mind,
            runner: None,
            tools,
            hosts: 0,
            posted: 0,
            failing: None,
            faults,
            late_ms: 0,
        };
        h.start_host().await;
        h
    }

    /// A new host process (`host-<hosts>`) running the Mind, registered.
    pub(super) async fn start_host(&mut self) {
        let w = &self.w;
        let backend = || {
            SimBackend::new(
                InProcess::new(w.sim.clone()),
                w.host.clock.clone(),
                PriceTable::embedded(),
            )
            .with_context_tools(self.tools.clone())
        };
        let r = MindRunner::new(
            w.host.clone(),
            self.mind.clone(),
            format!("host-{}", self.hosts),
            &PriceTable::embedded(),
            backend(),
            backend(),
        )
        .unwrap();
        r.register().await.unwrap();
        self.runner = Some(r);
    }

    pub(super) fn now(&self) -> i64 {
        self.w.sim.now_ms()
    }

    /// Runs the Mind until `until`, as `run_mind` would: steps while there is work, else sleeps
    /// to the decision time it names (or to `until`), never longer than a third of the lease
    /// (the runner renews it while it lives); after a failed step, it waits out the backoff
    /// (past `until` if need be: nothing ends a retry's wait but its due time). A pending
    /// [`Act::Late`] delays the first decision time it sleeps to (past `until` if need be).
    pub(super) async fn run_until(&mut self, until: i64) {
        let lease_third = self.w.host.config.lease_ttl_ms / 3;
        for _ in 0..100_000 {
            let now = self.now();
            let r = self.runner.as_mut().unwrap();
            let step = match r.step().await {
                Ok(step) => step,
                Err(e) => {
                    let hint = match &e {
                        RuntimeError::Backend(BackendError::Api { retry_after_ms, .. }) => {
                            *retry_after_ms
                        }
                        _ => None,
                    };
                    let policy = RetryPolicy::default();
                    let next = Failing::after(self.failing.as_ref(), &policy, hint, now);
                    self.w.sim.advance_clock(next.next_attempt_ms - now);
                    self.failing = Some(next);
                    continue;
                }
            };
            self.failing = None;
            let next = match step {
                Step::PersonaTurn { .. } | Step::SelfTurn { .. } | Step::Ping => continue,
                Step::Idle { until_ms: Some(t) } if t <= now => continue,
                Step::Idle { until_ms: Some(t) } => t.min(until),
                // Another host's lease (a killed one's) lapses before this one can run.
                _ => until,
            }
            .min(now + lease_third);
            let next = match step {
                // The decision time itself, not `until` nor a lease renewal: the runner
                // reaches it late if it is to.
                Step::Idle { until_ms: Some(t) } if t == next => {
                    t + std::mem::take(&mut self.late_ms)
                }
                _ => next,
            };
            if next <= now {
                return;
            }
            self.w.sim.advance_clock(next - now);
        }
        panic!("the runner never went idle");
    }

    /// A message of `words` words in room `room` (0, 1 public, 2, 3 DMs), run until answered.
    pub(super) async fn deliver(&mut self, room: u8, words: u16) {
        let (room, sender) = match room {
            0 => ("#swarm", "ari"),
            1 => ("#burn", "bo"),
            2 => ("@ari", "ari"),
            _ => ("@bo", "bo"),
        };
        self.posted += 1;
        let text = words_of(words, self.posted);
        post(&self.w, &format!("e{}", self.posted), room, sender, &text).await;
        self.runner.as_mut().unwrap().woken();
        self.run_until(self.now()).await;
    }

    /// An operator brief for the Self, and the runner woken to it.
    async fn brief(&mut self, text: String) {
        let brief = NewBrief {
            text,
            origin: BriefOrigin::Operator,
            created_at_ms: self.now(),
        };
        self.w
            .host
            .store
            .enqueue_brief("vala", &brief)
            .await
            .unwrap();
        self.runner.as_mut().unwrap().woken();
        self.run_until(self.now()).await;
    }

    /// The next stream the provider sends is cut after `after_deltas` deltas: truncated, or
    /// ended by an `error` event.
    fn cut_next_stream(&self, after_deltas: u32, mid_stream: bool) {
        let kind = if mid_stream {
            FaultKind::MidStreamError {
                after_deltas,
                error_type: "overloaded_error".into(),
            }
        } else {
            FaultKind::Truncate { after_deltas }
        };
        self.w.sim.push_faults([Fault { kind, times: 1 }]);
    }

    pub(super) async fn apply(&mut self, act: &Act) {
        match act {
            Act::Deliver { room, words } => self.deliver(*room, *words).await,
            Act::Brief { words } => self.brief(words_of(*words, self.posted)).await,
            Act::ToolBrief { files } => {
                let calls: Vec<serde_json::Value> = (0..*files)
                    .map(|f| {
                        let f = usize::from(f) % WORKSPACE_FILES;
                        serde_json::json!({"name": "read_file", "input": {"path": format!("f{f:02}.txt")}})
                    })
                    .collect();
                let text = format!(
                    "Read the ledger files. [sim: tool calls {}]",
                    serde_json::Value::Array(calls)
                );
                self.brief(text).await;
            }
            Act::Refused {
                room,
                words,
                retry_after_ms,
            } => {
                self.w.sim.push_faults([Fault {
                    kind: FaultKind::RateLimit {
                        retry_after_s: Some(*retry_after_ms as f64 / 1000.0),
                    },
                    times: 1,
                }]);
                self.deliver(*room, *words).await;
            }
            Act::StoreFaults { commits } => self.faults.fail_commits(*commits),
            Act::Wait { ms } => {
                let until = self.now() + ms;
                self.run_until(until).await;
            }
            Act::Late { ms } => self.late_ms = *ms,
            Act::Evict => self.w.sim.reset(),
            Act::Cut {
                after_deltas,
                mid_stream,
            } => self.cut_next_stream(*after_deltas, *mid_stream),
            Act::Restart { clean } => {
                let mut old = self.runner.take().unwrap();
                if *clean {
                    old.release().await.unwrap();
                }
                drop(old);
                self.hosts += 1;
                self.start_host().await;
                self.run_until(self.now()).await;
            }
        }
    }
}
