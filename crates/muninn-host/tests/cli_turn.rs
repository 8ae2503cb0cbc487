//! A Persona turn on the Claude Code CLI backend, ledgered as the CLI reported it.

use crate::runtime::*;
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::config::Config;
use muninn_host::runtime::{MindRunner, Step};
use muninn_sim::SimClock;
use muninn_sim::sim::SimConfig;
use muninn_store::{LedgerQuery, NewDelivery, Role};
use muninn_testkit::peers::claude_cli;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_turn_on_the_claude_cli_backend_ledgers_what_the_cli_reported() {
    use muninn_host::backends::{AnyBackend, BackendFactory};
    use muninn_host::config::{BackendConfig, BackendKind};
    let Some(bin) = claude_cli() else { return };
    const KEY: &str = "sk-test-claude-cli-host";
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
    let env = |k: &str| (k == "MUNINN_TEST_KEY").then(|| KEY.to_string());
    let factory = BackendFactory::from_config(&config, env).unwrap();
    assert!(!format!("{factory:?}").contains(KEY));
    let store = muninn_store::open(dir.path().join("muninn.db").to_str().unwrap())
        .await
        .unwrap();
    let host = Host::new(store, config, Arc::new(SimClock(server.sim.clone())));
    let prices = PriceTable::embedded();
    let persona = factory.make(host.clock.clone(), &prices, "vala/persona");
    assert!(matches!(persona, AnyBackend::ClaudeCli(_)));
    let selfs = factory.make(host.clock.clone(), &prices, "vala/self");
    let mut r = MindRunner::new(
        host.clone(),
        mind(""),
        "host-a".into(),
        &prices,
        persona,
        selfs,
    )
    .unwrap();
    r.register().await.unwrap();
    host.store
        .post_delivery(
            "vala",
            &NewDelivery {
                room: "#swarm".into(),
                sender: "ari".into(),
                is_direct: false,
                text: "hello vala".into(),
                source_id: "e1".into(),
                received_at_ms: T0,
                to_you: true,
                context: Vec::new(),
            },
        )
        .await
        .unwrap();
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::PersonaTurn { .. }), "{step:?}");
    let rows: Vec<_> = host
        .store
        .ledger(&LedgerQuery::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.row)
        .collect();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    // What the CLI reported is its `result` usage, kept verbatim; the parsed numbers are it.
    let raw = row.raw_usage.clone().unwrap();
    assert_eq!(row.usage, muninn_claude_cli::parse_usage(&raw, false));
    // And the CLI reported what the API (the simulator) answered, summed over the turn's
    // requests (a schema turn may take more than one).
    let answered: Vec<_> = server
        .sim
        .requests()
        .into_iter()
        .filter(|q| q.path == "/v1/messages")
        .filter_map(|q| q.usage)
        .collect();
    assert!(!answered.is_empty());
    let sum = answered
        .iter()
        .fold(muninn_core::trace::Usage::default(), |a, u| {
            muninn_core::trace::Usage {
                input: a.input + u.input,
                cache_write_5m: a.cache_write_5m + u.cache_write_5m,
                cache_write_1h: a.cache_write_1h + u.cache_write_1h,
                cache_read: a.cache_read + u.cache_read,
                output: a.output + u.output,
            }
        });
    assert_eq!(row.usage, sum, "{raw}");
    assert!(row.cost.0 > 0);
    // The host's binding key was created, private, and the turn left a handle with the segment,
    // bound to the segment's transcript (issue 5).
    let key_file = host.config.data_dir.join("session-binding.key");
    assert_eq!(std::fs::read(&key_file).unwrap().len(), 32);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let segment = host
        .store
        .current_segment("vala", Role::Persona)
        .await
        .unwrap()
        .unwrap();
    let stored = segment
        .session_id
        .expect("a handle stored with the segment");
    let handle = muninn_claude_cli::Handle::decode(&stored).unwrap();
    assert_eq!(
        handle.session_id,
        muninn_claude_cli::derive_session_id("vala/persona", 0)
    );
    r.release().await.unwrap();
    server.stop().await.unwrap();
}
