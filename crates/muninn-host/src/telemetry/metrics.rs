//! `GET /metrics`: the Prometheus text exposition format (version 0.0.4), written here.
//!
//! Names follow the Prometheus conventions: the `muninn_` prefix, base units in the name
//! (`_seconds`, `_bytes`, `_tokens`, `_usd` — dollars as a float, exact to the micro-dollar the
//! ledger keeps), `_total` on counters. Every family is listed with `# HELP` and `# TYPE` even
//! before it has a sample, so a dashboard's queries resolve on a fresh host. Counters come
//! from [`super::Telemetry`] and start at zero with the process; the gauges of the mailbox and
//! the brake are read from the store at each scrape (one small query per Mind each).
//!
//! The endpoint needs no token (Prometheus scrapers expect none on loopback, which is where the
//! host listens by default): it shows Mind ids, counts, tokens, money and decision names, never
//! a message, a reply, an error text or a credential.

use super::{LATENCY_BUCKETS_S, MindLive, SessionCounters, Snapshot, TOKEN_KINDS};
use crate::Host;
use std::collections::BTreeSet;
use std::fmt::Write;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric family `/metrics` exposes: name, type, help. The Grafana dashboard's queries are
/// checked against this list (and the exposition) by a test.
pub const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "muninn_requests_total",
        "counter",
        "Requests the backend answered (ledger rows), by Mind, role and kind (request, ping, head_ping, flush, failed_attempt).",
    ),
    (
        "muninn_turns_total",
        "counter",
        "Requests that began a turn (a Persona turn or a Self run), by Mind and role.",
    ),
    (
        "muninn_tokens_total",
        "counter",
        "Tokens by Mind, role and kind (uncached, cache_write_5m, cache_write_1h, cache_read, output).",
    ),
    (
        "muninn_cost_usd_total",
        "counter",
        "What the requests cost, US dollars (exact to the micro-dollar), by Mind and role.",
    ),
    (
        "muninn_decisions_total",
        "counter",
        "Decisions behind the requests, by Mind, role, action and reason (start: a segment begun without asking; none: no decision, e.g. a retry).",
    ),
    (
        "muninn_cache_misses_total",
        "counter",
        "Requests that read less than they could have, by Mind, role and cause.",
    ),
    (
        "muninn_backend_retries_total",
        "counter",
        "Retries the backend made, by Mind and role.",
    ),
    (
        "muninn_backend_errors_total",
        "counter",
        "Backend errors that failed a step, by Mind, role and kind.",
    ),
    (
        "muninn_session_events_total",
        "counter",
        "Session events (relaunched, parked, unparked, reseeded, forked, compacted, resumed_segment, compact_failed), by Mind, role and event.",
    ),
    (
        "muninn_step_failures_total",
        "counter",
        "Runner steps that failed (and were retried with a backoff), by Mind and cause (store, backend, config).",
    ),
    (
        "muninn_turn_latency_seconds",
        "histogram",
        "From the runner picking a turn up to the backend's answer, by Mind and role.",
    ),
    (
        "muninn_prefix_tokens",
        "gauge",
        "The last request's cached prefix (read + written), tokens, by Mind and role.",
    ),
    (
        "muninn_context_ceiling_tokens",
        "gauge",
        "The context ceiling the decider refreshes under, tokens, by Mind and role.",
    ),
    (
        "muninn_mailbox_depth",
        "gauge",
        "Deliveries waiting past the ack position, by Mind.",
    ),
    (
        "muninn_mailbox_oldest_age_seconds",
        "gauge",
        "Age of the oldest waiting delivery, seconds (0 when none waits), by Mind.",
    ),
    (
        "muninn_lease_held",
        "gauge",
        "1 while this host holds the Mind's lease, by Mind.",
    ),
    (
        "muninn_lease_changes_total",
        "counter",
        "Lease changes this host saw, by Mind and change (taken, taken_over from a holder that had not released it, lost, released).",
    ),
    (
        "muninn_api_connections_refused_total",
        "counter",
        "Connections the API closed at once because it already served its [api] max_connections.",
    ),
    (
        "muninn_transport_state",
        "gauge",
        "1 for the state a Mind's transport (its Matrix account) is in, by Mind, transport and state (opening, open, held, failing).",
    ),
    (
        "muninn_transport_gaps_cut_total",
        "counter",
        "Gaps a Mind's transport cut at its limit since this host started (the Matrix connector's max_gap_events: the events past it were skipped, never delivered), by Mind and transport.",
    ),
    (
        "muninn_brake",
        "gauge",
        "1 while the operator brake is on, by Mind.",
    ),
    (
        "muninn_runner_up",
        "gauge",
        "1 while the Mind's runner task runs in this host, by Mind.",
    ),
    (
        "muninn_mind_state",
        "gauge",
        "1 for the runner's current state (starting, running, idle, braked, capped, not_leader), by Mind and state.",
    ),
    (
        "muninn_failing",
        "gauge",
        "Steps failed in a row (0 when the last step succeeded), by Mind.",
    ),
    (
        "muninn_claude_cli_processes",
        "gauge",
        "Live Claude Code CLI children, by Mind and role.",
    ),
    (
        "muninn_claude_cli_resident_bytes",
        "gauge",
        "Resident memory of the live Claude Code CLI children, bytes, by Mind and role.",
    ),
    (
        "muninn_claude_cli_sweeps_failed_total",
        "counter",
        "Sweeps of the processes Claude Code CLI children left behind that could not look for them (no /proc, no pidfds) since this host started: any such process may still be running.",
    ),
    (
        "muninn_store_up",
        "gauge",
        "1 if this scrape's store queries succeeded.",
    ),
    (
        "muninn_build_info",
        "gauge",
        "Always 1; the version is a label.",
    ),
];

/// Writes the exposition: the telemetry's counters, and gauges read from the store now.
pub async fn render(host: &Host) -> String {
    let snapshot = host.telemetry.snapshot();
    let mut ids: BTreeSet<String> = host.config.minds.iter().map(|m| m.id.clone()).collect();
    ids.extend(snapshot.minds.keys().cloned());
    let mut store_up = true;
    match host.store.minds().await {
        Ok(minds) => ids.extend(minds.into_iter().map(|m| m.id)),
        Err(error) => {
            tracing::warn!(%error, "metrics: the store did not answer");
            store_up = false;
        }
    }
    let now_ms = host.clock.now_ms();
    let mut stored = Vec::new();
    if store_up {
        for id in &ids {
            let read = async {
                let mailbox = host.store.mailbox(id).await?;
                let settings = host.store.settings(id).await?;
                Ok::<_, muninn_store::StoreError>((mailbox, settings))
            };
            match read.await {
                Ok((mailbox, settings)) => stored.push((id.clone(), mailbox, settings.brake)),
                Err(error) => {
                    tracing::warn!(%error, mind = %id, "metrics: the store did not answer");
                    store_up = false;
                    break;
                }
            }
        }
    }
    let mut out = Exposition::default();
    write_counters(&mut out, &snapshot);
    out.family("muninn_mailbox_depth");
    for (id, mailbox, _) in &stored {
        out.sample("muninn_mailbox_depth", &[("mind", id)], mailbox.pending);
    }
    out.family("muninn_mailbox_oldest_age_seconds");
    for (id, mailbox, _) in &stored {
        let age_ms = mailbox
            .oldest_received_at_ms
            .map_or(0, |t| (now_ms - t).max(0));
        out.sample(
            "muninn_mailbox_oldest_age_seconds",
            &[("mind", id)],
            age_ms as f64 / 1000.0,
        );
    }
    out.family("muninn_brake");
    for (id, _, brake) in &stored {
        out.sample("muninn_brake", &[("mind", id)], u8::from(*brake));
    }
    write_live(&mut out, &snapshot, &ids);
    out.family("muninn_store_up");
    out.sample("muninn_store_up", &[], u8::from(store_up));
    out.family("muninn_build_info");
    out.sample(
        "muninn_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.text
}

/// Each session's counters with its Mind and role.
type Sessions<'a> = [(&'a str, &'a str, &'a SessionCounters)];

fn write_counters(out: &mut Exposition, snapshot: &Snapshot) {
    let sessions: Vec<(&str, &str, &SessionCounters)> = snapshot
        .sessions
        .iter()
        .map(|((mind, role), c)| (mind.as_str(), *role, c))
        .collect();
    write_usage(out, &sessions);
    write_decisions(out, &sessions);
    write_latency(out, &sessions);
    out.family("muninn_prefix_tokens");
    for (mind, role, c) in &sessions {
        let labels = [("mind", *mind), ("role", role)];
        out.sample("muninn_prefix_tokens", &labels, c.prefix_tokens);
    }
    out.family("muninn_context_ceiling_tokens");
    for (mind, role, c) in &sessions {
        let labels = [("mind", *mind), ("role", role)];
        out.sample("muninn_context_ceiling_tokens", &labels, c.ceiling_tokens);
    }
    out.family("muninn_step_failures_total");
    for (mind, live) in &snapshot.minds {
        for (cause, n) in &live.step_failures {
            let labels = [("mind", mind.as_str()), ("cause", cause)];
            out.sample("muninn_step_failures_total", &labels, n);
        }
    }
}

/// Requests, turns, tokens and cost.
fn write_usage(out: &mut Exposition, sessions: &Sessions<'_>) {
    out.family("muninn_requests_total");
    for (mind, role, c) in sessions {
        for (kind, n) in &c.requests {
            let labels = [("mind", *mind), ("role", role), ("kind", kind)];
            out.sample("muninn_requests_total", &labels, n);
        }
    }
    out.family("muninn_turns_total");
    for (mind, role, c) in sessions {
        out.sample(
            "muninn_turns_total",
            &[("mind", mind), ("role", role)],
            c.turns,
        );
    }
    out.family("muninn_tokens_total");
    for (mind, role, c) in sessions {
        for (kind, n) in TOKEN_KINDS.iter().zip(c.tokens) {
            let labels = [("mind", *mind), ("role", role), ("kind", kind)];
            out.sample("muninn_tokens_total", &labels, n);
        }
    }
    out.family("muninn_cost_usd_total");
    for (mind, role, c) in sessions {
        let labels = [("mind", *mind), ("role", role)];
        out.sample("muninn_cost_usd_total", &labels, usd(c.cost_micro_usd));
    }
}

/// Decisions, misses, retries, errors and session events.
fn write_decisions(out: &mut Exposition, sessions: &Sessions<'_>) {
    out.family("muninn_decisions_total");
    for (mind, role, c) in sessions {
        for ((action, reason), n) in &c.decisions {
            let labels = [
                ("mind", *mind),
                ("role", role),
                ("action", action),
                ("reason", reason.as_str()),
            ];
            out.sample("muninn_decisions_total", &labels, n);
        }
    }
    out.family("muninn_cache_misses_total");
    for (mind, role, c) in sessions {
        for (cause, n) in &c.misses {
            let labels = [("mind", *mind), ("role", role), ("cause", cause)];
            out.sample("muninn_cache_misses_total", &labels, n);
        }
    }
    out.family("muninn_backend_retries_total");
    for (mind, role, c) in sessions {
        let labels = [("mind", *mind), ("role", role)];
        out.sample("muninn_backend_retries_total", &labels, c.retries);
    }
    out.family("muninn_backend_errors_total");
    for (mind, role, c) in sessions {
        for (kind, n) in &c.backend_errors {
            let labels = [("mind", *mind), ("role", role), ("kind", kind)];
            out.sample("muninn_backend_errors_total", &labels, n);
        }
    }
    out.family("muninn_session_events_total");
    for (mind, role, c) in sessions {
        for (event, n) in &c.session_events {
            let labels = [("mind", *mind), ("role", role), ("event", event)];
            out.sample("muninn_session_events_total", &labels, n);
        }
    }
}

/// The turn latency histogram.
fn write_latency(out: &mut Exposition, sessions: &Sessions<'_>) {
    out.family("muninn_turn_latency_seconds");
    for (mind, role, c) in sessions {
        let mut cumulative = 0;
        for (bound, n) in LATENCY_BUCKETS_S.iter().zip(c.latency.buckets) {
            cumulative += n;
            let le = bound.to_string();
            let labels = [("mind", *mind), ("role", role), ("le", le.as_str())];
            out.sample("muninn_turn_latency_seconds_bucket", &labels, cumulative);
        }
        let labels = [("mind", *mind), ("role", role), ("le", "+Inf")];
        out.sample(
            "muninn_turn_latency_seconds_bucket",
            &labels,
            c.latency.count,
        );
        let labels = [("mind", *mind), ("role", role)];
        out.sample("muninn_turn_latency_seconds_sum", &labels, c.latency.sum);
        out.sample(
            "muninn_turn_latency_seconds_count",
            &labels,
            c.latency.count,
        );
    }
}

/// The gauges of what each Mind is doing now (not counted from the ledger).
fn write_live(out: &mut Exposition, snapshot: &Snapshot, ids: &BTreeSet<String>) {
    write_leases(out, snapshot, ids);
    write_transport_states(out, snapshot, ids);
    write_mind_states(out, snapshot, ids);
    write_processes(out, snapshot);
}

/// What the telemetry knows of `id` now; a Mind it has not heard of is all defaults.
fn live(snapshot: &Snapshot, id: &str) -> MindLive {
    snapshot.minds.get(id).cloned().unwrap_or_default()
}

/// Each Mind's lease, its changes, and the API connections refused.
fn write_leases(out: &mut Exposition, snapshot: &Snapshot, ids: &BTreeSet<String>) {
    let live = |id: &str| live(snapshot, id);
    out.family("muninn_lease_held");
    for id in ids {
        let held = u8::from(live(id).lease_held);
        out.sample("muninn_lease_held", &[("mind", id)], held);
    }
    out.family("muninn_lease_changes_total");
    for id in ids {
        for (change, n) in &live(id).lease_changes {
            out.sample(
                "muninn_lease_changes_total",
                &[("mind", id.as_str()), ("change", change)],
                n,
            );
        }
    }
    out.family("muninn_api_connections_refused_total");
    out.sample(
        "muninn_api_connections_refused_total",
        &[],
        snapshot.api_refused,
    );
}

/// One 0/1 gauge per transport state, 1 for the one each Mind's transport is in; the gaps it
/// cut since this host started.
fn write_transport_states(out: &mut Exposition, snapshot: &Snapshot, ids: &BTreeSet<String>) {
    out.family("muninn_transport_state");
    for id in ids {
        if let Some(transport) = live(snapshot, id).transport {
            let current = match transport.state {
                muninn_api::wire::TransportState::Opening => "opening",
                muninn_api::wire::TransportState::Open => "open",
                muninn_api::wire::TransportState::Held { .. } => "held",
                muninn_api::wire::TransportState::Failing { .. } => "failing",
            };
            for state in ["opening", "open", "held", "failing"] {
                out.sample(
                    "muninn_transport_state",
                    &[
                        ("mind", id),
                        ("transport", &transport.transport),
                        ("state", state),
                    ],
                    u8::from(state == current),
                );
            }
        }
    }
    out.family("muninn_transport_gaps_cut_total");
    for id in ids {
        if let Some(transport) = live(snapshot, id).transport {
            let cut = transport.gaps_cut.map_or(0, |g| g.count);
            out.sample(
                "muninn_transport_gaps_cut_total",
                &[("mind", id), ("transport", &transport.transport)],
                cut,
            );
        }
    }
}

/// Whether each Mind's runner is up, its state (one 0/1 gauge per state) and its failures in a
/// row.
fn write_mind_states(out: &mut Exposition, snapshot: &Snapshot, ids: &BTreeSet<String>) {
    let live = |id: &str| live(snapshot, id);
    out.family("muninn_runner_up");
    for id in ids {
        out.sample(
            "muninn_runner_up",
            &[("mind", id)],
            u8::from(live(id).runner_up),
        );
    }
    out.family("muninn_mind_state");
    for id in ids {
        let current = live(id).activity.name();
        for state in [
            "starting",
            "running",
            "idle",
            "braked",
            "capped",
            "not_leader",
        ] {
            let labels = [("mind", id.as_str()), ("state", state)];
            out.sample("muninn_mind_state", &labels, u8::from(state == current));
        }
    }
    out.family("muninn_failing");
    for id in ids {
        let failures = live(id).failing.map_or(0, |f| f.failures);
        out.sample("muninn_failing", &[("mind", id)], failures);
    }
}

/// Each claude-cli child process and its resident memory, and the sweeps of what the children
/// left behind that could not look.
fn write_processes(out: &mut Exposition, snapshot: &Snapshot) {
    out.family("muninn_claude_cli_processes");
    for (mind, role, _) in &snapshot.processes {
        let labels = [("mind", mind.as_str()), ("role", role.as_str())];
        out.sample("muninn_claude_cli_processes", &labels, 1);
    }
    out.family("muninn_claude_cli_resident_bytes");
    for (mind, role, bytes) in &snapshot.processes {
        let labels = [("mind", mind.as_str()), ("role", role.as_str())];
        out.sample("muninn_claude_cli_resident_bytes", &labels, bytes);
    }
    out.family("muninn_claude_cli_sweeps_failed_total");
    out.sample(
        "muninn_claude_cli_sweeps_failed_total",
        &[],
        snapshot.sweeps_failed,
    );
}

/// Micro-dollars as dollars, exactly (`1234567` → `1.234567`).
fn usd(micro: i64) -> String {
    let sign = if micro < 0 { "-" } else { "" };
    let abs = micro.unsigned_abs();
    format!("{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// The exposition being written.
#[derive(Debug, Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// `# HELP` and `# TYPE` of a family from [`FAMILIES`].
    fn family(&mut self, name: &str) {
        if let Some((_, kind, help)) = FAMILIES.iter().find(|(n, _, _)| *n == name) {
            let _ = writeln!(self.text, "# HELP {name} {help}");
            let _ = writeln!(self.text, "# TYPE {name} {kind}");
        }
    }

    /// One sample line.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"");
                escape_label(&mut self.text, value);
                self.text.push('"');
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// A label value as the text format quotes it: backslash, double quote and newline escaped.
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_are_exact_and_labels_escaped() {
        assert_eq!(usd(0), "0.000000");
        assert_eq!(usd(1_234_567), "1.234567");
        assert_eq!(usd(-5), "-0.000005");
        let mut out = Exposition::default();
        out.sample("m", &[("mind", "a\"b\\c\nd")], 1);
        assert_eq!(out.text, "m{mind=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn every_family_has_a_conventional_name() {
        for (name, kind, _) in FAMILIES {
            assert!(name.starts_with("muninn_"), "{name}");
            assert_eq!(name.ends_with("_total"), *kind == "counter", "{name}");
        }
    }
}
