//! The health of the transports that bring a Mind its mail and carry its replies (the Matrix
//! connector's account for the Mind), as they report it. The runtime knows nothing of them; the
//! connector reports through [`Telemetry::transport`], and `/readyz`, `GET /v1/minds/{mind}`
//! (`muninn status`) and `/metrics` read it back, so an account that cannot log in or sync is as
//! visible as a failing backend. The gaps a transport cut at its limit (messages skipped for
//! good) ride along with its state and outlast its changes, for the operator to see.

use super::Telemetry;
use muninn_api::wire::{TransportGapsCut, TransportRoomNotJoined, TransportState, TransportStatus};

impl Telemetry {
    /// Records that `transport` (e.g. `matrix`) is now in `state` for `mind`, at `now_ms`. A
    /// failure repeated in the same stage keeps its first time and counts up; any other change
    /// starts the clock again. Changes are logged once, not at every report.
    pub fn transport(
        &self,
        mind: &str,
        transport: &'static str,
        state: TransportState,
        now_ms: i64,
    ) {
        let mut guard = self.lock();
        let live = guard.minds.entry(mind.to_owned()).or_default();
        let previous = live.transport.take();
        // The gaps cut and the rooms not joined outlast every change of state: they are marks,
        // not states.
        let gaps_cut = previous.as_ref().and_then(|p| p.gaps_cut.clone());
        let rooms_not_joined = previous
            .as_ref()
            .map(|p| p.rooms_not_joined.clone())
            .unwrap_or_default();
        let next = match (previous, state) {
            (
                Some(TransportStatus {
                    state:
                        TransportState::Failing {
                            stage: was,
                            failures,
                            ..
                        },
                    since_ms,
                    ..
                }),
                TransportState::Failing { stage, error, .. },
            ) if was == stage => TransportStatus {
                transport: transport.to_owned(),
                state: TransportState::Failing {
                    stage,
                    error,
                    failures: failures.saturating_add(1),
                },
                since_ms,
                gaps_cut: None,
                rooms_not_joined: Vec::new(),
            },
            (previous, state) => {
                let changed = previous
                    .as_ref()
                    .is_none_or(|p| !same_kind(&p.state, &state));
                if changed {
                    log_change(mind, transport, &state);
                }
                let state = match state {
                    TransportState::Failing { stage, error, .. } => TransportState::Failing {
                        stage,
                        error,
                        failures: 1,
                    },
                    other => other,
                };
                match previous {
                    Some(p) if !changed => TransportStatus { state, ..p },
                    _ => TransportStatus {
                        transport: transport.to_owned(),
                        state,
                        since_ms: now_ms,
                        gaps_cut: None,
                        rooms_not_joined: Vec::new(),
                    },
                }
            }
        };
        live.transport = Some(TransportStatus {
            gaps_cut,
            rooms_not_joined,
            ..next
        });
    }

    /// Records the gaps `transport` cut for `mind` (its record since it started, replacing the
    /// last). A transport that never reported a state is taken as open from `now_ms`: it cut a
    /// gap, so it was reading.
    pub fn transport_gaps_cut(
        &self,
        mind: &str,
        transport: &'static str,
        gaps_cut: TransportGapsCut,
        now_ms: i64,
    ) {
        self.with_transport(mind, transport, now_ms, |status| {
            status.gaps_cut = Some(gaps_cut);
        });
    }

    /// Records the configured rooms `transport` is not in yet for `mind` (replacing the last
    /// list; empty: all joined). A transport that never reported a state is taken as open.
    pub fn transport_rooms_not_joined(
        &self,
        mind: &str,
        transport: &'static str,
        rooms: Vec<TransportRoomNotJoined>,
        now_ms: i64,
    ) {
        self.with_transport(mind, transport, now_ms, |status| {
            status.rooms_not_joined = rooms;
        });
    }

    /// Runs `change` on `mind`'s transport status. A transport that never reported a state is
    /// taken as open from `now_ms`: whatever it reports, it was running.
    fn with_transport(
        &self,
        mind: &str,
        transport: &'static str,
        now_ms: i64,
        change: impl FnOnce(&mut TransportStatus),
    ) {
        let mut guard = self.lock();
        let live = guard.minds.entry(mind.to_owned()).or_default();
        change(live.transport.get_or_insert_with(|| TransportStatus {
            transport: transport.to_owned(),
            state: TransportState::Open,
            since_ms: now_ms,
            gaps_cut: None,
            rooms_not_joined: Vec::new(),
        }));
    }
}

/// Whether two states are the same state (a failure: in the same stage), whatever their details.
fn same_kind(a: &TransportState, b: &TransportState) -> bool {
    match (a, b) {
        (TransportState::Failing { stage: x, .. }, TransportState::Failing { stage: y, .. }) => {
            x == y
        }
        _ => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

fn log_change(mind: &str, transport: &str, state: &TransportState) {
    match state {
        TransportState::Opening => tracing::info!(mind, transport, "transport opening"),
        TransportState::Open => tracing::info!(mind, transport, "transport open"),
        TransportState::Held { pending } => tracing::info!(
            mind,
            transport,
            pending,
            "transport held: the Mind is behind, its intake waits"
        ),
        TransportState::Failing { stage, error, .. } => {
            tracing::error!(
                mind,
                transport,
                stage = stage.as_str(),
                error = error.as_str(),
                "transport failing"
            )
        }
    }
}
