//! The operator's views and controls of a Mind: its status (what `GET /v1/minds/{mind}`, `muninn
//! status` and the dashboard show), its settings, and the brake. Split from `mod.rs`, which keeps
//! the intake, outbox, transcript and ledger routes.

use super::*;

fn to_settings(settings: &MindSettings) -> Settings {
    Settings {
        spend_cap_micro_usd: settings.spend_cap.map(|c| c.0),
        spend_window_ms: settings.spend_window_ms,
        brake: settings.brake,
        turn_limit: settings.turn_limit,
    }
}

/// A `PUT`'s [`PutSettingsRequest::expected`] as the store's caps, the write's condition.
fn expected_caps(expected: &ExpectedCaps) -> muninn_store::Caps {
    muninn_store::Caps {
        spend_cap: expected
            .spend_cap_micro_usd
            .map(muninn_core::money::MicroUsd),
        spend_window_ms: expected.spend_window_ms,
        turn_limit: expected.turn_limit,
    }
}

/// The caps a `PUT` sets, checked (positive, under their ceilings).
fn to_caps(request: &PutSettingsRequest) -> ApiResult<muninn_store::Caps> {
    let positive = |name: &str, value: Option<i64>| match value {
        Some(v) if v <= 0 => Err(ApiError::unprocessable(format!(
            "{name} must be positive (or null)"
        ))),
        _ => Ok(()),
    };
    positive("spend_cap_micro_usd", request.spend_cap_micro_usd)?;
    positive("spend_window_ms", request.spend_window_ms)?;
    positive("turn_limit", request.turn_limit)?;
    muninn_api::limits::check_settings(request).map_err(ApiError::limit)?;
    Ok(muninn_store::Caps {
        spend_cap: request
            .spend_cap_micro_usd
            .map(muninn_core::money::MicroUsd),
        spend_window_ms: request.spend_window_ms,
        turn_limit: request.turn_limit,
    })
}

/// A Mind's status as `GET /v1/minds/{mind}` shows it (the dashboard shows the same).
pub(crate) async fn mind_status(host: &Host, id: &str) -> ApiResult<MindStatus<MindConfig>> {
    let stored = host.store.mind(id).await?;
    let config = host.config.mind(id).cloned();
    if stored.is_none() && config.is_none() {
        return Err(ApiError::mind_not_found(id));
    }
    let now = host.clock.now_ms();
    let display_name = match (&stored, &config) {
        (Some(mind), _) => mind.display_name.clone(),
        (None, Some(config)) => config.display_name().to_owned(),
        (None, None) => id.to_owned(),
    };
    let settings = if stored.is_some() {
        host.store.settings(id).await?
    } else {
        MindSettings::default()
    };
    let default_window_s = config.as_ref().map_or(86_400, |c| c.spend_window_s);
    let window_ms = settings.spend_window_ms.unwrap_or_else(|| {
        i64::try_from(default_window_s.saturating_mul(1000)).unwrap_or(i64::MAX)
    });
    let from_ms = now.saturating_sub(window_ms);
    let (lease, segments, spent, ack_position, failed_sends) = if stored.is_some() {
        (
            host.store.lease(id).await?,
            CurrentSegments {
                persona: host.store.current_segment(id, Role::Persona).await?,
                self_role: host.store.current_segment(id, Role::SelfRole).await?,
            },
            // What the cap counts: rows stamped after now too (a clock stepped back).
            host.store.spend(id, from_ms, i64::MAX).await?.0,
            host.store.ack_position(id).await?,
            host.store
                .failed_outbox(id, muninn_api::wire::FAILED_SENDS_SHOWN)
                .await?,
        )
    } else {
        (None, CurrentSegments::default(), 0, 0, Vec::new())
    };
    // One COUNT, not the waiting rows themselves (up to 128 KiB each, on every status call).
    let mailbox = if stored.is_some() {
        host.store.mailbox(id).await?
    } else {
        muninn_store::Mailbox::default()
    };
    Ok(MindStatus {
        id: id.to_owned(),
        display_name,
        registered: stored.is_some(),
        lease_live: lease.as_ref().is_some_and(|l| l.expires_at_ms > now),
        lease,
        segments,
        spend: SpendSummary {
            window_ms,
            from_ms,
            to_ms: now,
            spent_micro_usd: spent,
            cap_micro_usd: settings
                .spend_cap
                .map(|c| c.0)
                .or(config.as_ref().and_then(|c| c.spend_cap_micro_usd)),
        },
        settings: to_settings(&settings),
        ack_position,
        pending_deliveries: mailbox.pending,
        oldest_pending_at_ms: mailbox.oldest_received_at_ms,
        activity: host.signals.activity(id),
        failed_sends,
        undeliverable: host.signals.undeliverable(id),
        transport: host.telemetry.mind(id).transport,
        config,
    })
}

/// Sets the brake of `minds`, writing the brake alone (a caps edit racing it keeps its caps and
/// cannot undo it), and wakes them.
async fn set_brake(
    host: &Host,
    minds: Vec<String>,
    brake: bool,
    via: &str,
) -> ApiResult<BrakeResponse> {
    let now = host.clock.now_ms();
    for mind in &minds {
        let before = host.store.settings(mind).await?;
        if before.brake != brake {
            host.store.put_brake(mind, brake, now).await?;
            let after = MindSettings {
                brake,
                ..before.clone()
            };
            host.telemetry.settings_changed(mind, &before, &after, via);
        }
    }
    tracing::info!(brake, minds = minds.len(), "operator brake");
    for mind in &minds {
        host.signals.wake(mind);
    }
    // Released: waiting transports pick up what the brake held back.
    host.signals.outbox.notify_waiters();
    Ok(BrakeResponse { brake, minds })
}

/// Every registered Mind, by id (what `/v1/brake` sets).
async fn every_mind(host: &Host) -> ApiResult<Vec<String>> {
    Ok(host
        .store
        .minds()
        .await?
        .into_iter()
        .map(|m| m.id)
        .collect())
}

// ----- Handlers -----

pub(super) async fn list_minds(
    State(state): State<AppState>,
) -> ApiResult<Json<MindsResponse<MindConfig>>> {
    let host = &state.host;
    let mut ids: Vec<String> = host.config.minds.iter().map(|m| m.id.clone()).collect();
    ids.extend(host.store.minds().await?.into_iter().map(|m| m.id));
    ids.sort();
    ids.dedup();
    let mut minds = Vec::with_capacity(ids.len());
    for id in &ids {
        minds.push(mind_status(host, id).await?);
    }
    Ok(Json(MindsResponse {
        minds,
        claude_cli_sweeps_failed: host.telemetry.sweeps_failed(),
    }))
}

pub(super) async fn get_mind(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<MindStatus<MindConfig>>> {
    let Path(mind) = path?;
    Ok(Json(mind_status(&state.host, &mind).await?))
}

pub(super) async fn get_settings(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<Settings>> {
    let Path(mind) = path?;
    require_mind(&state.host, &mind).await?;
    Ok(Json(to_settings(&state.host.store.settings(&mind).await?)))
}

/// Sets the caps; the brake is left as it is. A `brake` in the body (an older client sending
/// back what it read) must equal the brake now: a stale or changing one is refused, since
/// honouring it would let a caps edit release the operator's emergency stop. With `expected`,
/// the store compares and writes in one transaction (`Store::put_caps`): of two `PUT`s from the
/// same read, one is written and the other refused, where a read here and a write after let
/// both through, the second undoing the first.
pub(super) async fn put_settings(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<PutSettingsRequest>, JsonRejection>,
) -> ApiResult<Json<Settings>> {
    let Path(mind) = path?;
    let Json(request) = body?;
    let caps = to_caps(&request)?;
    let host = &state.host;
    require_mind(host, &mind).await?;
    if let Some(brake) = request.brake {
        // A read of its own, not part of the write: the write never changes the brake, so a
        // brake changed after this read stays as it was set whatever this check saw.
        let now = host.store.settings(&mind).await?;
        if brake != now.brake {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "the brake is {} and a settings PUT never changes it: leave `brake` out (use \
                     POST or DELETE /v1/minds/{{mind}}/brake or /v1/brake to change it)",
                    if now.brake { "on" } else { "off" }
                ),
            ));
        }
    }
    let expected = request.expected.as_ref().map(expected_caps);
    let written = host
        .store
        .put_caps(&mind, &caps, expected.as_ref(), host.clock.now_ms())
        .await?;
    let (before, after) = match written {
        CapsWrite::Written { before, after } => (before, after),
        CapsWrite::Changed { .. } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                "the caps changed since they were read (another operator or the dashboard saved \
                 them meanwhile); nothing was changed: read them again and retry"
                    .to_owned(),
            ));
        }
    };
    host.telemetry
        .settings_changed(&mind, &before, &after, "/v1/minds/{mind}/settings");
    host.signals.wake(&mind);
    Ok(Json(to_settings(&after)))
}

pub(super) async fn brake_on(State(state): State<AppState>) -> ApiResult<Json<BrakeResponse>> {
    let minds = every_mind(&state.host).await?;
    Ok(Json(
        set_brake(&state.host, minds, true, "/v1/brake").await?,
    ))
}

pub(super) async fn brake_off(State(state): State<AppState>) -> ApiResult<Json<BrakeResponse>> {
    let minds = every_mind(&state.host).await?;
    Ok(Json(
        set_brake(&state.host, minds, false, "/v1/brake").await?,
    ))
}

/// One Mind's brake (the dashboard's button): `POST` on, `DELETE` off.
pub(super) async fn brake_mind(
    State(state): State<AppState>,
    method: axum::http::Method,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<BrakeResponse>> {
    let Path(mind) = path?;
    require_mind(&state.host, &mind).await?;
    let on = method == axum::http::Method::POST;
    let via = "/v1/minds/{mind}/brake";
    Ok(Json(set_brake(&state.host, vec![mind], on, via).await?))
}
