//! `muninn status`, `brake` and `caps`: what each Mind is doing and the operator's controls.

use crate::connect::{ApiArgs, block_on};
use crate::output::{json, outln};
use crate::time::{clock_time, span};
use muninn_api::wire::{
    Activity, MindStatus, PutSettingsRequest, Segment, Settings, TransportState, TransportStatus,
};

/// How a client command prints: `text` for people (also `table`), `json` for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Lines and aligned columns for people.
    #[value(alias = "table")]
    Text,
    /// The API's JSON, pretty-printed (one document; `tail` prints one per line).
    Json,
}

/// Arguments of `muninn status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    api: ApiArgs,
}

pub fn usd(micro: i64) -> String {
    format!("${:.4}", micro as f64 / 1e6)
}

/// A Mind's state in one word: what stops it answering first (BRAKED, CAPPED, RETRYING), else
/// what it is doing (RUNNING, IDLE), else who runs it (ELSEWHERE, NO HOST).
pub fn state(mind: &MindStatus) -> &'static str {
    let capped = mind
        .spend
        .cap_micro_usd
        .is_some_and(|cap| mind.spend.spent_micro_usd >= cap);
    match (&mind.activity, mind.lease_live) {
        _ if mind.settings.brake => "BRAKED",
        (Some(Activity::Capped), _) => "CAPPED",
        _ if capped => "CAPPED",
        (Some(Activity::Retrying { .. }), _) => "RETRYING",
        (_, false) => "NO HOST",
        (Some(Activity::Running { .. }), _) => "RUNNING",
        (Some(Activity::Idle { .. } | Activity::Braked), _) => "IDLE",
        (Some(Activity::NotLeader) | None, true) => "ELSEWHERE",
    }
}

/// Why a delivery to `mind` will not be answered now, if it will not (what `say` warns of).
pub fn will_not_answer(mind: &MindStatus) -> Option<String> {
    let id = &mind.id;
    let spend = &mind.spend;
    match state(mind) {
        "BRAKED" => Some(format!(
            "the brake is on: {id} will not answer until `muninn brake off`"
        )),
        "CAPPED" => Some(format!(
            "{id}'s spend cap is reached ({} of {} per {}, or the next turn could cross it): it answers when the window has room, or raise the cap with `muninn caps {id} --spend-cap-usd N`",
            usd(spend.spent_micro_usd),
            spend.cap_micro_usd.map_or_else(|| "no cap".into(), usd),
            span(spend.window_ms),
        )),
        "RETRYING" => match &mind.activity {
            Some(Activity::Retrying {
                error,
                attempts,
                next_attempt_ms,
                ..
            }) => Some(format!(
                "{id}'s host is retrying after {attempts} failed step(s), next at {}: {error}",
                clock_time(*next_attempt_ms)
            )),
            _ => None,
        },
        "NO HOST" if !mind.registered => Some(format!(
            "{id} is not registered: no host has run it (is `muninn serve` running with it configured?)"
        )),
        "NO HOST" => Some(format!(
            "no host holds {id}'s lease: it answers once `muninn serve` runs it"
        )),
        _ => None,
    }
}

fn lease_column(mind: &MindStatus) -> String {
    match &mind.lease {
        Some(lease) if mind.lease_live => lease.holder.clone(),
        Some(lease) => format!("({} expired)", lease.holder),
        None if mind.registered => "-".into(),
        None => "(not registered)".into(),
    }
}

fn segment_column(segment: &Option<Segment>) -> String {
    match segment {
        Some(s) if s.ended_at_ms.is_none() => format!("#{} open", s.number),
        Some(s) => format!("#{} ended", s.number),
        None => "-".into(),
    }
}

/// `muninn status`: every Mind with its state, lease holder, pending deliveries, segments and
/// spend in its window; a line per Mind that is retrying, with the error, a line per Mind whose
/// transport cut a gap (skipped events), a line per configured room a transport has not joined
/// yet, then each send a transport gave up on (when and why), each Mind's deliveries set
/// aside as undeliverable, and a line for the host when sweeps of what its Claude Code CLI
/// children left behind could not look.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let response = client.minds().await?;
        if args.format == Format::Json {
            return json(&response);
        }
        let sweeps_failed = response.claude_cli_sweeps_failed;
        let minds = response.minds;
        print_table(&minds)?;
        print_retrying(&minds)?;
        print_transport_trouble(&minds)?;
        print_gaps_cut(&minds)?;
        print_rooms_not_joined(&minds)?;
        print_failed_sends(&minds)?;
        print_undeliverable(&minds)?;
        print_sweeps_failed(sweeps_failed)?;
        print_brake(&minds)?;
        Ok(())
    })
}

/// A line for the host when sweeps of the processes its Claude Code CLI children left behind
/// could not look for them (no `/proc`, no pidfds): such processes may still be running, and
/// only the host's log said so.
fn print_sweeps_failed(failed: u64) -> std::io::Result<()> {
    if failed == 0 {
        return Ok(());
    }
    let plural = if failed == 1 { "" } else { "s" };
    outln!(
        "host: {failed} sweep{plural} of what the Claude Code CLI children left behind could not \
         look since the host started (no /proc or no pidfds; its log says why): processes they \
         started may still be running"
    )
}

/// One aligned row per Mind: state, lease, pending deliveries (with the oldest's age),
/// segments, and spend against its cap in its window.
fn print_table(minds: &[MindStatus]) -> std::io::Result<()> {
    outln!(
        "{:<14} {:<9} {:<20} {:>12} {:<10} {:<10} {:>26}",
        "MIND",
        "STATE",
        "LEASE",
        "PENDING",
        "PERSONA",
        "SELF",
        "SPEND / CAP (WINDOW)"
    )?;
    for mind in minds {
        let pending = match mind.oldest_pending_at_ms {
            Some(at) if mind.pending_deliveries > 0 => format!(
                "{} ({})",
                mind.pending_deliveries,
                span(mind.spend.to_ms - at)
            ),
            _ => mind.pending_deliveries.to_string(),
        };
        let cap = mind
            .spend
            .cap_micro_usd
            .map_or_else(|| "no cap".into(), usd);
        outln!(
            "{:<14} {:<9} {:<20} {:>12} {:<10} {:<10} {:>26}",
            mind.id,
            state(mind),
            lease_column(mind),
            pending,
            segment_column(&mind.segments.persona),
            segment_column(&mind.segments.self_role),
            format!(
                "{} / {cap} ({})",
                usd(mind.spend.spent_micro_usd),
                span(mind.spend.window_ms)
            ),
        )?;
    }
    Ok(())
}

/// A line per Mind whose host is retrying, with the error and the next attempt.
fn print_retrying(minds: &[MindStatus]) -> std::io::Result<()> {
    for mind in minds {
        if let Some(Activity::Retrying {
            error,
            since_ms,
            attempts,
            next_attempt_ms,
        }) = &mind.activity
        {
            outln!(
                "{}: retrying since {} ({attempts} failed steps, next attempt at {}): {error}",
                mind.id,
                clock_time(*since_ms),
                clock_time(*next_attempt_ms)
            )?;
        }
    }
    Ok(())
}

/// A line per Mind whose transport is failing or holding its intake.
fn print_transport_trouble(minds: &[MindStatus]) -> std::io::Result<()> {
    for mind in minds {
        match &mind.transport {
            Some(TransportStatus {
                transport,
                state:
                    TransportState::Failing {
                        stage,
                        error,
                        failures,
                    },
                since_ms,
                ..
            }) => outln!(
                "{}: {transport} failing ({stage}) since {} ({failures} in a row): {error}",
                mind.id,
                clock_time(*since_ms)
            )?,
            Some(TransportStatus {
                transport,
                state: TransportState::Held { pending },
                since_ms,
                ..
            }) => outln!(
                "{}: {transport} holding its intake since {} ({pending}+ deliveries unanswered)",
                mind.id,
                clock_time(*since_ms)
            )?,
            _ => {}
        }
    }
    Ok(())
}

/// A line per Mind whose transport cut a gap at its limit since the host started: what lay past
/// the limit was never delivered, whatever the transport's state is now.
fn print_gaps_cut(minds: &[MindStatus]) -> std::io::Result<()> {
    for mind in minds {
        let Some(TransportStatus {
            transport,
            gaps_cut: Some(gaps),
            ..
        }) = &mind.transport
        else {
            continue;
        };
        let plural = if gaps.count == 1 { "" } else { "s" };
        outln!(
            "{}: {transport} cut {} gap{plural} since the host started, the last in {} at {} \
             after {} events; the events past them were skipped, never delivered \
             (raise [matrix] max_gap_events)",
            mind.id,
            gaps.count,
            gaps.last_room,
            clock_time(gaps.last_at_ms),
            gaps.last_events_read
        )?;
    }
    Ok(())
}

/// A line per configured room a transport is not in yet: the Mind does not hear it.
fn print_rooms_not_joined(minds: &[MindStatus]) -> std::io::Result<()> {
    for mind in minds {
        let Some(TransportStatus {
            transport,
            rooms_not_joined,
            ..
        }) = &mind.transport
        else {
            continue;
        };
        for room in rooms_not_joined {
            outln!(
                "{}: {transport} has not joined {} yet (failing since {}; trying again): {}",
                mind.id,
                room.room,
                clock_time(room.since_ms),
                room.error
            )?;
        }
    }
    Ok(())
}

/// A line per send a transport gave up on: when and why.
fn print_failed_sends(minds: &[MindStatus]) -> std::io::Result<()> {
    for mind in minds {
        for failed in &mind.failed_sends {
            outln!(
                "{}: send {} to {} failed{}: {}",
                mind.id,
                failed.request_id,
                failed.room,
                failed
                    .failed_at_ms
                    .map_or_else(String::new, |at| format!(" at {}", clock_time(at))),
                failed.failure.as_deref().unwrap_or("(no reason given)")
            )?;
        }
    }
    Ok(())
}

/// A line per Mind that set deliveries aside as too large for any request (the transcript
/// holds each one's sizes; its room was told).
fn print_undeliverable(minds: &[MindStatus]) -> std::io::Result<()> {
    for mind in minds.iter().filter(|m| m.undeliverable > 0) {
        outln!(
            "{}: {} deliveries set aside as undeliverable since the host started (too large for any request; each in its transcript)",
            mind.id,
            mind.undeliverable
        )?;
    }
    Ok(())
}

/// Whether the brake is on for none, some or all of the Minds.
fn print_brake(minds: &[MindStatus]) -> std::io::Result<()> {
    let braked = minds.iter().filter(|m| m.settings.brake).count();
    outln!(
        "brake: {}",
        match braked {
            0 => "off".to_owned(),
            n if n == minds.len() => "on for every Mind".to_owned(),
            n => format!("on for {n} of {} Minds", minds.len()),
        }
    )
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OnOff {
    /// Stop every Mind's turns.
    On,
    /// Let them run again.
    Off,
}

/// Arguments of `muninn brake`.
#[derive(Debug, clap::Args)]
pub struct BrakeArgs {
    /// `on` stops every Mind's turns; `off` releases them.
    #[arg(value_enum)]
    state: OnOff,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    api: ApiArgs,
}

/// `muninn brake on|off`: the operator brake for every Mind at once.
pub fn brake(args: BrakeArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let answer = client.brake(matches!(args.state, OnOff::On)).await?;
        if args.format == Format::Json {
            return json(&answer);
        }
        outln!(
            "brake {} for {} Minds: {}",
            if answer.brake { "on" } else { "off" },
            answer.minds.len(),
            answer.minds.join(", ")
        )?;
        Ok(())
    })
}

/// Arguments of `muninn caps`.
#[derive(Debug, clap::Args)]
pub struct CapsArgs {
    /// The Mind.
    mind: String,
    /// The spend cap per window, in dollars.
    #[arg(long, conflicts_with = "no_spend_cap")]
    spend_cap_usd: Option<f64>,
    /// Remove the operator's spend cap (the configuration's applies).
    #[arg(long)]
    no_spend_cap: bool,
    /// The spend window: `90s`, `15m`, `6h`, `1d`, `1w`.
    #[arg(long, value_parser = crate::time::parse_duration)]
    window: Option<i64>,
    /// The most turns per start.
    #[arg(long, conflicts_with = "no_turn_limit")]
    turn_limit: Option<i64>,
    /// Remove the turn limit.
    #[arg(long)]
    no_turn_limit: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    api: ApiArgs,
}

impl CapsArgs {
    /// `settings` (the caps read) with the changes asked for.
    fn apply(&self, mut settings: PutSettingsRequest) -> anyhow::Result<PutSettingsRequest> {
        if let Some(usd) = self.spend_cap_usd {
            anyhow::ensure!(
                usd.is_finite() && usd > 0.0,
                "--spend-cap-usd must be positive"
            );
            settings.spend_cap_micro_usd = Some((usd * 1e6).round() as i64);
        }
        if self.no_spend_cap {
            settings.spend_cap_micro_usd = None;
        }
        if let Some(window) = self.window {
            anyhow::ensure!(window > 0, "--window must be positive");
            settings.spend_window_ms = Some(window);
        }
        if let Some(limit) = self.turn_limit {
            settings.turn_limit = Some(limit);
        }
        if self.no_turn_limit {
            settings.turn_limit = None;
        }
        Ok(settings)
    }
}

/// `muninn caps`: changes the given settings and leaves the rest (and the brake) as they are;
/// with no option, prints them.
pub fn caps(args: CapsArgs) -> anyhow::Result<()> {
    let client = args.api.client()?;
    block_on(async move {
        let mut settings: Settings = client.settings(&args.mind).await?;
        // The caps alone are sent back, never the brake read with them: a `brake on` landing
        // between the read and the write stays on. They are sent on the condition that they
        // are still the ones read, so another operator's change landing in between is refused
        // (and reported) rather than silently undone by the values read before it.
        let read = settings.caps_if_unchanged();
        let caps = args.apply(read.clone())?;
        if caps != read {
            settings = client.put_settings(&args.mind, &caps).await?;
        }
        if args.format == Format::Json {
            return json(&settings);
        }
        outln!(
            "{}: spend cap {}, window {}, turn limit {}, brake {}",
            args.mind,
            settings
                .spend_cap_micro_usd
                .map_or_else(|| "from config".into(), usd),
            settings
                .spend_window_ms
                .map_or_else(|| "from config".into(), span),
            settings
                .turn_limit
                .map_or_else(|| "none".into(), |n| n.to_string()),
            if settings.brake { "on" } else { "off" },
        )?;
        Ok(())
    })
}
