//! The Claude Code CLI world the CLI tests share: a simulator, a host on SQLite whose backend
//! launches the real CLI against it, and the checks those tests repeat (each outbox message
//! once, the transcript's shape, a ledger row's events of one type).

use crate::runtime::{T0, mind};
use muninn_core::ledger::LedgerRow;
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::backends::{AnyBackend, BackendFactory};
use muninn_host::config::{BackendConfig, BackendKind, Config, MindConfig};
use muninn_host::runtime::{MindRunner, Step};
use muninn_sim::SimClock;
use muninn_sim::sim::SimConfig;
use muninn_store::{LedgerQuery, NewDelivery, OutboxMessage, Role, TranscriptItem};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

pub(crate) struct CliWorld {
    pub(crate) server: muninn_sim::SimHandle,
    pub(crate) host: Host,
    pub(crate) factory: BackendFactory,
    pub(crate) _dir: tempfile::TempDir,
}

pub(crate) async fn cli_world(bin: std::path::PathBuf) -> CliWorld {
    cli_world_with(bin, |_| {}).await
}

pub(crate) async fn cli_world_with(
    bin: std::path::PathBuf,
    edit: impl FnOnce(&mut Config),
) -> CliWorld {
    cli_world_on(bin, edit, |store| store).await
}

/// [`cli_world_with`] on `wrap` of its SQLite store (a fault-injecting store around it, say).
pub(crate) async fn cli_world_on(
    bin: std::path::PathBuf,
    edit: impl FnOnce(&mut Config),
    wrap: impl FnOnce(Arc<dyn muninn_store::Store>) -> Arc<dyn muninn_store::Store>,
) -> CliWorld {
    cli_world_keyed(bin, "sk-test-resume", edit, wrap).await
}

/// [`cli_world_on`] with the backend reading `key` as its API key.
pub(crate) async fn cli_world_keyed(
    bin: std::path::PathBuf,
    key: &str,
    edit: impl FnOnce(&mut Config),
    wrap: impl FnOnce(Arc<dyn muninn_store::Store>) -> Arc<dyn muninn_store::Store>,
) -> CliWorld {
    let dir = tempfile::tempdir().unwrap();
    let server = muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        SimConfig {
            frozen_at_ms: Some(T0),
            ..SimConfig::default()
        },
    )
    .await
    .unwrap();
    let mut config: Config = toml::from_str("").unwrap();
    config.data_dir = dir.path().join("data");
    config.backend = BackendConfig {
        kind: Some(BackendKind::ClaudeCli),
        base_url: Some(server.base_url()),
        api_key_env: "MUNINN_TEST_KEY".into(),
        claude_bin: Some(bin),
        ..BackendConfig::default()
    };
    edit(&mut config);
    let env = |k: &str| (k == "MUNINN_TEST_KEY").then(|| key.to_string());
    let factory = BackendFactory::from_config(&config, env).unwrap();
    let store = muninn_store::open(dir.path().join("muninn.db").to_str().unwrap())
        .await
        .unwrap();
    let host = Host::new(wrap(store), config, Arc::new(SimClock(server.sim.clone())));
    CliWorld {
        server,
        host,
        factory,
        _dir: dir,
    }
}

impl CliWorld {
    pub(crate) fn runner(&self, mind: MindConfig, holder: &str) -> MindRunner<AnyBackend> {
        let prices = PriceTable::embedded();
        let make = |s: &str| self.factory.make(self.host.clock.clone(), &prices, s);
        MindRunner::new(
            self.host.clone(),
            mind,
            holder.into(),
            &prices,
            make("vala/persona"),
            make("vala/self"),
        )
        .unwrap()
    }

    pub(crate) async fn say(&self, id: &str, text: &str) {
        self.host
            .store
            .post_delivery(
                "vala",
                &NewDelivery {
                    room: "#swarm".into(),
                    sender: "ari".into(),
                    is_direct: false,
                    text: text.into(),
                    source_id: id.into(),
                    received_at_ms: self.server.sim.now_ms(),
                    to_you: true,
                    context: Vec::new(),
                },
            )
            .await
            .unwrap();
    }

    /// The `/v1/messages` bodies the simulator received, in order.
    pub(crate) fn messages_requests(&self) -> Vec<serde_json::Value> {
        self.server
            .sim
            .requests()
            .into_iter()
            .filter(|q| q.path == "/v1/messages")
            .map(|q| q.body)
            .collect()
    }

    /// How many Persona segments the store holds.
    pub(crate) async fn persona_segments(&self) -> usize {
        self.host
            .store
            .segments("vala", Role::Persona)
            .await
            .unwrap()
            .len()
    }

    /// No outbox message was recorded twice (each request id once).
    pub(crate) async fn assert_nothing_sent_twice(&self) {
        let outbox = self.host.store.unacked_outbox("vala", 100).await.unwrap();
        let ids: BTreeSet<_> = outbox.iter().map(|m| m.request_id.clone()).collect();
        assert_eq!(ids.len(), outbox.len(), "{outbox:#?}");
    }

    pub(crate) async fn rows(&self) -> Vec<muninn_core::ledger::LedgerRow> {
        self.host
            .store
            .ledger(&LedgerQuery::default())
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.row)
            .collect()
    }

    pub(crate) async fn stored_session_id(&self) -> String {
        let segment = self
            .host
            .store
            .current_segment("vala", Role::Persona)
            .await
            .unwrap()
            .unwrap();
        muninn_claude_cli::Handle::decode(&segment.session_id.unwrap())
            .unwrap()
            .session_id
    }
}

pub(crate) async fn turn(r: &mut MindRunner<AnyBackend>) {
    r.woken();
    let step = r.step().await.unwrap();
    assert!(
        matches!(step, Step::PersonaTurn { valid: true, .. }),
        "{step:?}"
    );
}

pub(crate) fn persona(mood: &str) -> MindConfig {
    let mut m = mind("");
    m.persona_state_inline = Some(serde_json::json!({"name": "Vala", "mood": mood}));
    m
}

/// The pid of the live CLI child the pool knows under `key`.
pub(crate) fn child_pid(w: &CliWorld, key: &str) -> Option<u32> {
    let pool = w.factory.process_pool()?;
    pool.live()
        .into_iter()
        .find(|l| l.key == key)
        .and_then(|l| l.pid)
}

/// Every CLI session file (`projects/<cwd slug>/<id>.jsonl`) the Persona's child has written.
pub(crate) fn persona_session_files(w: &CliWorld) -> Vec<std::path::PathBuf> {
    let projects = w
        .host
        .config
        .data_dir
        .join("claude-cli/vala/persona/home/.claude/projects");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(projects).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "jsonl") {
                files.push(f.path());
            }
        }
    }
    files
}

impl CliWorld {
    /// The Persona's transcript (its last 100 items), ascending.
    pub(crate) async fn persona_transcript(&self) -> Vec<TranscriptItem> {
        self.host
            .store
            .transcript_tail("vala", Role::Persona, 100)
            .await
            .unwrap()
    }

    /// Every message of `before` is still in the unacknowledged outbox exactly once (nothing
    /// since re-sent it); returns the outbox as it is now.
    pub(crate) async fn assert_still_sent_once(
        &self,
        before: &[OutboxMessage],
    ) -> Vec<OutboxMessage> {
        let outbox = self.host.store.unacked_outbox("vala", 100).await.unwrap();
        assert!(before.iter().all(|m| {
            outbox
                .iter()
                .filter(|o| o.request_id == m.request_id)
                .count()
                == 1
        }));
        outbox
    }
}

/// The batches the outbox messages answer: a message's request id is `<batch>-<n>`.
pub(crate) fn batches(outbox: &[OutboxMessage]) -> BTreeSet<String> {
    outbox
        .iter()
        .map(|m| m.request_id.rsplit_once('-').unwrap().0.to_string())
        .collect()
}

/// Each transcript item's kind and segment, in order.
pub(crate) fn kinds_and_segments(transcript: &[TranscriptItem]) -> Vec<(&str, i64)> {
    transcript
        .iter()
        .map(|i| (i.kind.as_str(), i.segment))
        .collect()
}

/// The transcript's items follow each other with no gap in their sequence numbers.
pub(crate) fn assert_gap_free(transcript: &[TranscriptItem]) {
    assert!(transcript.windows(2).all(|p| p[1].seq == p[0].seq + 1));
}

/// The events of type `kind` among `events` (one row's, or every row's flattened).
pub(crate) fn events_of<'a>(
    events: impl IntoIterator<Item = &'a Value>,
    kind: &str,
) -> Vec<&'a Value> {
    events.into_iter().filter(|e| e["type"] == kind).collect()
}

/// Every row's events of type `kind`, in ledger order.
pub(crate) fn row_events_of<'a>(rows: &'a [LedgerRow], kind: &str) -> Vec<&'a Value> {
    events_of(rows.iter().flat_map(|r| &r.events), kind)
}

/// SIGKILLs a CLI child: no chance to finish its turn or write anything more.
pub(crate) fn kill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
}
