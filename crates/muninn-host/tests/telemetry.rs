//! The host's logs, metrics and probes: a turn is one structured log event; `/metrics` after a
//! scripted workload on the in-process simulator equals the ledger; `/healthz`, `/readyz` and
//! `/metrics` need no token and readiness names what fails.

mod probes;

use crate::runtime::{World, ledger, mind, post, runner, world};
use muninn_backend::Backend;
use muninn_core::ledger::LedgerRow;
use muninn_host::runtime::{MindRunner, Step};
use muninn_host::telemetry::metrics::{self, FAMILIES};
use muninn_store::{BriefOrigin, NewBrief};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// The Mind [`workload`] runs: a small memory budget, so the cold wake after the hour-long gap
/// starts a fresh segment (the timeline has more than one).
pub(crate) const WORKLOAD_MIND: &str = "memory_tokens = 300";

/// The idle gaps of [`workload`], ms: inside the 5-minute TTL, around it, and past the hour.
const GAPS_MS: [i64; 10] = [
    20_000, 45_000, 240_000, 400_000, 30_000, 90_000, 4_000_000, 15_000, 200_000, 60_000,
];

/// A scripted workload on `r`: ten deliveries across two rooms and a DM with the idle gaps
/// of [`GAPS_MS`] between them (every idle decision point in a gap is taken: pings, or letting
/// the cache go), an operator brief for the Self after the fourth, and each answered. Returns
/// the steps it took.
pub(crate) async fn workload<B: Backend>(w: &World, r: &mut MindRunner<B>) -> Vec<Step> {
    r.register().await.unwrap();
    let mut steps = Vec::new();
    for (i, gap) in GAPS_MS.iter().enumerate() {
        let (room, sender) = match i % 3 {
            0 => ("#swarm", "ari"),
            1 => ("#burn", "bo"),
            _ => ("@ari", "ari"),
        };
        post(
            w,
            &format!("w{i}"),
            room,
            sender,
            &format!("message {i}: how goes the work?"),
        )
        .await;
        if i == 3 {
            w.host
                .store
                .enqueue_brief(
                    "vala",
                    &NewBrief {
                        text: "Summarise the open issues in three lines.".into(),
                        origin: BriefOrigin::Operator,
                        created_at_ms: w.sim.now_ms(),
                    },
                )
                .await
                .unwrap();
        }
        r.woken();
        let until = w.sim.now_ms() + gap;
        loop {
            let step = r.step().await.unwrap();
            steps.push(step.clone());
            match step {
                Step::PersonaTurn { .. } | Step::SelfTurn { .. } | Step::Ping => {}
                Step::Idle { until_ms: Some(at) } if at <= until => {
                    w.sim.advance_clock(at - w.sim.now_ms());
                }
                Step::Idle { .. } => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        w.sim.advance_clock(until - w.sim.now_ms());
    }
    steps
}

/// Parses an exposition into (name, labels) → value, and the families it declares.
pub(crate) fn parse_exposition(text: &str) -> (BTreeMap<(String, String), f64>, Vec<String>) {
    let mut samples = BTreeMap::new();
    let mut families = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.push(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(
            samples
                .insert((name.to_string(), labels.to_string()), value)
                .is_none(),
            "a repeated series: {line}"
        );
    }
    (samples, families)
}

/// The sum of a metric's samples whose labels contain every one of `having`.
pub(crate) fn sum(samples: &BTreeMap<(String, String), f64>, name: &str, having: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|((n, labels), _)| n == name && having.iter().all(|h| labels.contains(h)))
        .map(|(_, v)| v)
        .sum()
}

fn is_turn(row: &LedgerRow) -> bool {
    row.boundary
        && row
            .decided
            .as_ref()
            .is_some_and(|d| d.kind == muninn_core::ledger::RowKind::Request)
}

/// The metrics of one role's session equal its ledger rows: requests, turns, tokens by kind,
/// cost (exactly), decisions and misses.
fn role_equals_the_ledger(
    samples: &BTreeMap<(String, String), f64>,
    text: &str,
    rows: &[LedgerRow],
    role: &str,
) {
    let of_role: Vec<&LedgerRow> = rows.iter().filter(|r| r.role == role).collect();
    let label = format!("role=\"{role}\"");
    assert_eq!(
        sum(samples, "muninn_requests_total", &[&label]),
        of_role.len() as f64,
        "{role}"
    );
    assert_eq!(
        sum(samples, "muninn_turns_total", &[&label]),
        of_role.iter().filter(|r| is_turn(r)).count() as f64,
        "{role}"
    );
    let tokens = |kind: &str| {
        sum(
            samples,
            "muninn_tokens_total",
            &[&label, &format!("kind=\"{kind}\"")],
        )
    };
    let total = |f: fn(&LedgerRow) -> u64| of_role.iter().map(|r| f(r)).sum::<u64>() as f64;
    assert_eq!(tokens("uncached"), total(|r| r.usage.input));
    assert_eq!(tokens("cache_write_5m"), total(|r| r.usage.cache_write_5m));
    assert_eq!(tokens("cache_write_1h"), total(|r| r.usage.cache_write_1h));
    assert_eq!(tokens("cache_read"), total(|r| r.usage.cache_read));
    assert_eq!(tokens("output"), total(|r| r.usage.output));
    let cost: i64 = of_role.iter().map(|r| r.cost.0).sum();
    // Exact: the exposition writes micro-dollars as dollars with six decimals.
    let line = format!(
        "muninn_cost_usd_total{{mind=\"vala\",{label}}} {}.{:06}",
        cost / 1_000_000,
        cost % 1_000_000
    );
    assert!(text.contains(&line), "{line} not in\n{text}");
    assert_eq!(
        sum(samples, "muninn_decisions_total", &[&label]),
        of_role.len() as f64
    );
    let misses = of_role.iter().filter(|r| r.miss_cause.is_some()).count();
    assert_eq!(
        sum(samples, "muninn_cache_misses_total", &[&label]),
        misses as f64
    );
}

#[tokio::test]
async fn metrics_after_a_workload_equal_the_ledger() {
    let w = world().await;
    let mut r = runner(&w, mind(WORKLOAD_MIND), "host-a");
    let steps = workload(&w, &mut r).await;
    assert!(steps.contains(&Step::Ping), "the workload pings: {steps:?}");
    assert!(steps.iter().any(|s| matches!(s, Step::SelfTurn { .. })));
    let rows = ledger(&w).await;
    let text = metrics::render(&w.host).await;
    let (samples, families) = parse_exposition(&text);

    // Every family is declared once, in the order of FAMILIES.
    let declared: Vec<&str> = FAMILIES.iter().map(|(n, _, _)| *n).collect();
    let mut sorted = families.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), families.len(), "{families:?}");
    let mut want = declared.clone();
    want.sort();
    assert_eq!(sorted, want);

    assert_eq!(
        sum(&samples, "muninn_requests_total", &[]),
        rows.len() as f64
    );
    for role in ["persona", "self"] {
        role_equals_the_ledger(&samples, &text, &rows, role);
    }
    let pings = rows
        .iter()
        .filter(|r| r.decision.starts_with("ping"))
        .count() as f64;
    assert!(pings > 0.0);
    assert_eq!(
        sum(&samples, "muninn_requests_total", &["kind=\"ping\""])
            + sum(&samples, "muninn_requests_total", &["kind=\"head_ping\""]),
        pings
    );
    let turns = rows.iter().filter(|r| is_turn(r)).count() as f64;
    assert_eq!(
        sum(&samples, "muninn_turn_latency_seconds_count", &[]),
        turns
    );
    assert_eq!(
        sum(
            &samples,
            "muninn_turn_latency_seconds_bucket",
            &["le=\"+Inf\""]
        ),
        turns
    );
    assert_eq!(
        sum(&samples, "muninn_mailbox_depth", &["mind=\"vala\""]),
        0.0
    );
    assert_eq!(sum(&samples, "muninn_store_up", &[]), 1.0);
    // One runner took the free lease once and kept it.
    assert_eq!(
        sum(&samples, "muninn_lease_changes_total", &["mind=\"vala\""]),
        1.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &samples,
            "muninn_lease_changes_total",
            &["mind=\"vala\"", "change=\"taken\""]
        ),
        1.0
    );
    assert_eq!(
        sum(&samples, "muninn_api_connections_refused_total", &[]),
        0.0
    );
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
pub(crate) struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    pub(crate) fn events(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

#[tokio::test]
async fn a_turn_is_one_json_log_event_with_its_fields() {
    // This test's runtime runs on this thread: the subscriber sees every event of the step.
    let (logs, _anchor, _guard) = capture_logs();
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello vala").await;
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    let rows = ledger(&w).await;
    let row = &rows[0];
    let events = logs.events();
    let turns: Vec<&Value> = events
        .iter()
        .filter(|e| e["fields"]["message"] == "turn")
        .collect();
    assert_eq!(turns.len(), 1, "{events:#?}");
    let turn = &turns[0]["fields"];
    let expected = serde_json::json!({
        "message": "turn",
        "mind": "vala",
        "role": "persona",
        "kind": "request",
        "segment": 0,
        "turn": 0,
        "decision": row.decision,
        "action": "start",
        "reason": "first",
        "cache_state": "cold",
        "miss_cause": "cold_start",
        "tokens_uncached": row.usage.input,
        "tokens_write_5m": row.usage.cache_write_5m,
        "tokens_write_1h": row.usage.cache_write_1h,
        "tokens_read": row.usage.cache_read,
        "tokens_output": row.usage.output,
        "prefix_tokens": row.prefix_tokens,
        "cost_usd": row.cost.0 as f64 / 1e6,
        "cost_micro_usd": row.cost.0,
        "latency_ms": turn["latency_ms"],
        "retries": 0,
    });
    pretty_assertions::assert_eq!(turn, &expected);
    assert!(turn["latency_ms"].as_u64().is_some());
    assert_eq!(turns[0]["level"], "INFO");
    // The lease change is logged too.
    assert!(
        events
            .iter()
            .any(|e| e["fields"]["message"] == "lease taken")
    );
}

/// Every metric the checked-in Grafana dashboard (`deploy/grafana/muninn.json`) queries is one
/// `/metrics` exposes, with the labels the dashboard groups by.
#[tokio::test]
async fn the_grafana_dashboard_queries_only_exposed_metrics() {
    let queries = dashboard_queries();
    assert!(queries.len() > 20, "{queries:?}");

    let w = world().await;
    let mut r = runner(&w, mind(WORKLOAD_MIND), "host-a");
    r.register().await.unwrap();
    post(&w, "g1", "#swarm", "ari", "hello").await;
    r.step().await.unwrap();
    let text = metrics::render(&w.host).await;
    let (samples, families) = parse_exposition(&text);
    let mut used = std::collections::BTreeSet::new();
    for query in &queries {
        used.extend(assert_exposed_and_grouped_by_known_labels(query, &families));
    }
    // The dashboard covers the families a per-Mind view needs.
    for needed in PER_MIND_FAMILIES {
        assert!(
            used.contains(*needed),
            "the dashboard does not show {needed}"
        );
    }
    // And the labels it groups by are on the samples.
    assert!(
        samples
            .keys()
            .any(|(n, l)| n == "muninn_tokens_total" && l.contains("kind=\"cache_read\""))
    );
}

/// The metric families a per-Mind view of the host needs.
const PER_MIND_FAMILIES: &[&str] = &[
    "muninn_turns_total",
    "muninn_tokens_total",
    "muninn_cost_usd_total",
    "muninn_decisions_total",
    "muninn_cache_misses_total",
    "muninn_backend_errors_total",
    "muninn_backend_retries_total",
    "muninn_turn_latency_seconds",
    "muninn_mailbox_depth",
    "muninn_mailbox_oldest_age_seconds",
    "muninn_lease_held",
    "muninn_claude_cli_processes",
    "muninn_claude_cli_resident_bytes",
];

/// Every query of the checked-in dashboard: its panels' targets and its variables'.
fn dashboard_queries() -> Vec<String> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/muninn.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push(query.to_string());
        }
    }
    queries
}

/// Every `muninn_` metric `query` names is one of the exposed `families` (a histogram's
/// `_bucket`, `_sum` and `_count` count as it), and the labels it groups by (`by (mind, role)`,
/// `by (kind)`, …) are ones the metrics carry. Returns the families it uses.
fn assert_exposed_and_grouped_by_known_labels(query: &str, families: &[String]) -> Vec<String> {
    let histograms: Vec<&str> = FAMILIES
        .iter()
        .filter(|f| f.1 == "histogram")
        .map(|f| f.0)
        .collect();
    let mut used = Vec::new();
    for (at, _) in query.match_indices("muninn_") {
        let name: String = query[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let family = histograms
            .iter()
            .find(|h| {
                name.strip_prefix(**h)
                    .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
            })
            .map_or(name.clone(), |h| h.to_string());
        assert!(
            families.contains(&family),
            "{name} (in {query}) is not exposed"
        );
        used.push(family);
    }
    for by in query.match_indices("by (") {
        let labels = &query[by.0 + 4..];
        for label in labels[..labels.find(')').unwrap()]
            .split(',')
            .map(str::trim)
        {
            assert!(
                [
                    "mind", "role", "kind", "action", "reason", "cause", "event", "le", "version",
                    "state"
                ]
                .contains(&label),
                "{label} in {query}"
            );
        }
    }
    used
}

#[test]
fn a_transport_failing_in_one_stage_counts_up_from_its_first_failure() {
    use muninn_api::wire::TransportState;
    use muninn_host::telemetry::Telemetry;
    let telemetry = Telemetry::default();
    let failing = |error: &str| TransportState::Failing {
        stage: "sync".into(),
        error: error.into(),
        failures: 1,
    };
    telemetry.transport("vala", "matrix", TransportState::Open, 1_000);
    telemetry.transport("vala", "matrix", failing("connection refused"), 2_000);
    telemetry.transport("vala", "matrix", failing("connection reset"), 3_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(
        live.since_ms, 2_000,
        "a failure's clock starts at the first"
    );
    assert_eq!(
        live.state,
        TransportState::Failing {
            stage: "sync".into(),
            error: "connection reset".into(),
            failures: 2,
        }
    );
    // Another stage starts the count again; recovery clears it.
    telemetry.transport(
        "vala",
        "matrix",
        TransportState::Failing {
            stage: "login".into(),
            error: "forbidden".into(),
            failures: 1,
        },
        4_000,
    );
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(live.since_ms, 4_000);
    assert!(matches!(
        live.state,
        TransportState::Failing { failures: 1, .. }
    ));
    telemetry.transport("vala", "matrix", TransportState::Open, 5_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!((live.state, live.since_ms), (TransportState::Open, 5_000));
    // Open again is no change: its time stays.
    telemetry.transport("vala", "matrix", TransportState::Open, 6_000);
    assert_eq!(telemetry.mind("vala").transport.unwrap().since_ms, 5_000);
}

/// A gap cut is a mark on the transport, not a state: it outlasts every change of state after
/// it (held, failing, open again), changes neither state nor its time, and the next cut
/// replaces the record.
#[test]
fn a_transports_gaps_cut_outlast_its_changes_of_state() {
    use muninn_api::wire::{TransportGapsCut, TransportState};
    use muninn_host::telemetry::Telemetry;
    let telemetry = Telemetry::default();
    let cut = |count: u64, at: i64| TransportGapsCut {
        count,
        last_room: format!("!room{count}:example.org"),
        last_at_ms: at,
        last_events_read: 5_000,
    };
    telemetry.transport("vala", "matrix", TransportState::Open, 1_000);
    telemetry.transport_gaps_cut("vala", "matrix", cut(1, 2_000), 2_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!((live.state, live.since_ms), (TransportState::Open, 1_000));
    telemetry.transport(
        "vala",
        "matrix",
        TransportState::Held { pending: 50 },
        3_000,
    );
    telemetry.transport(
        "vala",
        "matrix",
        TransportState::Failing {
            stage: "sync".into(),
            error: "connection refused".into(),
            failures: 1,
        },
        4_000,
    );
    telemetry.transport("vala", "matrix", TransportState::Open, 5_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(live.gaps_cut, Some(cut(1, 2_000)));
    telemetry.transport_gaps_cut("vala", "matrix", cut(2, 6_000), 6_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(
        (live.state, live.since_ms, live.gaps_cut),
        (TransportState::Open, 5_000, Some(cut(2, 6_000)))
    );
}

/// The rooms a transport has not joined yet ride along with its state, as the gaps cut do, and
/// an empty report clears them.
#[test]
fn a_transports_rooms_not_joined_outlast_its_changes_of_state_until_joined() {
    use muninn_api::wire::{TransportRoomNotJoined, TransportState};
    use muninn_host::telemetry::Telemetry;
    let telemetry = Telemetry::default();
    let later = TransportRoomNotJoined {
        room: "#later".into(),
        error: "homeserver refused join #later:example.org: HTTP 404 M_NOT_FOUND: no such room"
            .into(),
        since_ms: 1_000,
    };
    telemetry.transport_rooms_not_joined("vala", "matrix", vec![later.clone()], 1_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(
        (live.state, live.since_ms, live.rooms_not_joined),
        (TransportState::Open, 1_000, vec![later.clone()])
    );
    telemetry.transport(
        "vala",
        "matrix",
        TransportState::Failing {
            stage: "sync".into(),
            error: "connection refused".into(),
            failures: 1,
        },
        2_000,
    );
    telemetry.transport("vala", "matrix", TransportState::Open, 3_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(live.rooms_not_joined, vec![later]);
    telemetry.transport_rooms_not_joined("vala", "matrix", Vec::new(), 4_000);
    let live = telemetry.mind("vala").transport.unwrap();
    assert_eq!(
        (live.state, live.since_ms, live.rooms_not_joined),
        (TransportState::Open, 3_000, Vec::new())
    );
}

/// This test's log events at INFO and above, as JSON, while the guards live (its runtime must
/// run on this thread).
pub(crate) fn capture_logs() -> (Buffer, tracing::Dispatch, tracing::subscriber::DefaultGuard) {
    let logs = Buffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    // Tracing caches each callsite's interest once, process-wide. With at most one dispatcher
    // alive it asks the *registering* thread's default: a sibling test (no subscriber) reaching
    // a callsite first would cache "never" and hide this test's events. A second, inert
    // dispatcher kept alive makes registration ask every live dispatcher, this one included.
    let anchor = tracing::Dispatch::new(tracing_subscriber::registry());
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    (logs, anchor, guard)
}
