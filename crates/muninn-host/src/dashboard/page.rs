//! The pages: the Minds at a glance, and one Mind — its state, figures, controls, charts,
//! decisions and ledger.

use super::data::{MindView, SegmentView};
use super::html::{age, esc, layout, short_time, time, tokens, usd};
use super::svg::{self, Lane, Limit, Series, Span};
use super::{Filter, LedgerFilter};
use crate::telemetry::{Activity, MindLive, RowLabels};
use muninn_api::wire::MindStatus;
use muninn_core::ledger::LedgerRow;
use muninn_store::{LedgerEntry, Mailbox};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One Mind on the overview.
#[derive(Debug)]
pub(super) struct MindLine {
    pub(super) status: MindStatus<crate::config::MindConfig>,
    pub(super) live: MindLive,
    pub(super) mailbox: Mailbox,
}

/// The overview: every Mind's state, mail, spend and lease, and the brake for all.
pub(super) fn overview(minds: &[MindLine], now_ms: i64) -> String {
    let mut body = String::from(
        r#"<section><h2>Minds</h2><table id="minds"><tr><th>Mind</th><th>state</th><th class="n">pending</th><th class="n">spent in window</th><th class="n">cap</th><th>lease</th></tr>"#,
    );
    for line in minds {
        let s = &line.status;
        let cap = s.spend.cap_micro_usd.map_or("—".to_string(), usd);
        let lease = match &s.lease {
            Some(l) if s.lease_live => {
                format!("{} until {}", esc(&l.holder), time(l.expires_at_ms))
            }
            _ => "none".to_string(),
        };
        let _ = write!(
            body,
            r#"<tr><td><a href="/dashboard/minds/{id}">{name}</a> <span class="note">{id}</span></td><td>{state}</td><td class="n">{pending}</td><td class="n">{spent}</td><td class="n">{cap}</td><td>{lease}</td></tr>"#,
            id = esc(&s.id),
            name = esc(&s.display_name),
            state = badges(s, &line.live, now_ms),
            pending = line.mailbox.pending,
            spent = usd(s.spend.spent_micro_usd),
        );
    }
    body.push_str("</table>");
    body.push_str(
        r#"<form class="inline" data-api="/v1/brake" data-method="POST"><button type="submit" id="brake-all">Brake every Mind</button><span class="error"></span></form><form class="inline" data-api="/v1/brake" data-method="DELETE"><button type="submit" id="release-all">Release every brake</button><span class="error"></span></form></section>"#,
    );
    layout("Minds", &body, None)
}

/// The state badges of a Mind: its runner's state, and BRAKED, CAPPED, RETRYING when they hold.
fn badges(s: &MindStatus<crate::config::MindConfig>, live: &MindLive, now_ms: i64) -> String {
    let mut out = String::new();
    let capped = s
        .spend
        .cap_micro_usd
        .is_some_and(|cap| s.spend.spent_micro_usd >= cap);
    let primary = if !live.runner_up && s.config.is_some() {
        ("stopped", "STOPPED".to_string())
    } else if s.settings.brake {
        ("braked", "BRAKED".to_string())
    } else if capped || live.activity == Activity::Capped {
        ("capped", "CAPPED".to_string())
    } else {
        match live.activity {
            Activity::Working { since_ms } => {
                ("running", format!("RUNNING for {}", age(now_ms - since_ms)))
            }
            Activity::Idle { until_ms: Some(t) } => ("idle", format!("IDLE until {}", time(t))),
            Activity::Idle { until_ms: None } => ("idle", "IDLE".to_string()),
            Activity::NotLeader => ("not_leader", "NOT LEADER".to_string()),
            Activity::Starting => ("starting", "STARTING".to_string()),
            Activity::Braked => ("braked", "BRAKED".to_string()),
            Activity::Capped => ("capped", "CAPPED".to_string()),
        }
    };
    let _ = write!(
        out,
        r#"<span class="badge {c}" data-state="{c}">{l}</span>"#,
        c = primary.0,
        l = esc(&primary.1)
    );
    if let Some(failing) = &live.failing {
        let _ = write!(
            out,
            r#"<span class="badge retrying" data-state="retrying" title="{e}">RETRYING ({n}× since {t})</span>"#,
            e = esc(&failing.last_error),
            n = failing.failures,
            t = time(failing.since_ms),
        );
    }
    out
}

/// One Mind's page.
pub(super) fn mind(view: &MindView, filter: &LedgerFilter, now_ms: i64) -> String {
    let s = &view.status;
    let mut body = String::new();
    let _ = write!(
        body,
        r#"<section><h2>{name}{id}</h2><div id="state">{badges}</div>{details}</section>"#,
        name = esc(&s.display_name),
        id = if s.display_name == s.id {
            String::new()
        } else {
            format!(r#" <span class="note">{}</span>"#, esc(&s.id))
        },
        badges = badges(s, &view.live, now_ms),
        details = details(view, now_ms),
    );
    body.push_str(&figures(view));
    body.push_str(&controls(s));
    body.push_str(&charts(view, now_ms));
    body.push_str(&decisions(&view.rows));
    body.push_str(&ledger(view, filter));
    layout(&s.display_name, &body, filter.refresh_s)
}

fn details(view: &MindView, now_ms: i64) -> String {
    let mut out = String::from("<ul>");
    if let Some(failing) = &view.live.failing {
        let _ = write!(
            out,
            r#"<li id="last-error">Retrying: {n} steps failed in a row since {t} ({cause}); the last error: <code>{e}</code></li>"#,
            n = failing.failures,
            t = time(failing.since_ms),
            cause = failing.cause,
            e = esc(&failing.last_error),
        );
    }
    let oldest = view
        .mailbox
        .oldest_received_at_ms
        .map_or(String::new(), |t| {
            format!(", the oldest {} old", age(now_ms - t))
        });
    let _ = write!(
        out,
        r#"<li>Pending deliveries: <b id="pending">{}</b>{oldest}</li>"#,
        view.mailbox.pending
    );
    let lease = match &view.status.lease {
        Some(l) if view.status.lease_live => format!(
            "held by {} until {}{}",
            esc(&l.holder),
            time(l.expires_at_ms),
            if view.live.lease_held {
                " (this host)"
            } else {
                ""
            }
        ),
        _ => "not held".to_string(),
    };
    let _ = write!(out, "<li>Lease: {lease}</li>");
    let spend = &view.status.spend;
    let _ = write!(
        out,
        "<li>Spent in the last {}: {}{}</li></ul>",
        age(spend.window_ms),
        usd(spend.spent_micro_usd),
        spend
            .cap_micro_usd
            .map_or(" (no cap)".to_string(), |c| format!(" of a {} cap", usd(c)))
    );
    out
}

fn figures(view: &MindView) -> String {
    let rows: Vec<&LedgerRow> = view.rows.iter().map(|e| &e.row).collect();
    let turns = rows.iter().filter(|r| RowLabels::of(r).turn).count();
    let read: u64 = rows.iter().map(|r| r.usage.cache_read).sum();
    let prompt: u64 = rows.iter().map(|r| r.usage.prompt()).sum();
    let hit = if prompt == 0 {
        "—".to_string()
    } else {
        format!("{:.1}%", read as f64 * 100.0 / prompt as f64)
    };
    let prefix = rows.last().map_or(0, |r| r.prefix_tokens);
    let c = &view.comparison;
    // `data-value` holds the exact figure (micro-dollars for money) for scripts and tests.
    let figure = |id: &str, exact: String, shown: String, label: &str| {
        format!(
            r#"<div class="figure"><b id="{id}" data-value="{}">{}</b><span>{}</span></div>"#,
            esc(&exact),
            esc(&shown),
            esc(label)
        )
    };
    let money =
        |id: &str, micro: i64, label: &str| figure(id, micro.to_string(), usd(micro), label);
    let mut out = String::from(r#"<section><h2>Figures</h2><div class="figures">"#);
    out.push_str(&figure(
        "turns",
        turns.to_string(),
        turns.to_string(),
        "turns",
    ));
    let requests = rows.len().to_string();
    out.push_str(&figure(
        "requests",
        requests.clone(),
        requests,
        "requests (ledger rows)",
    ));
    out.push_str(&money("total-cost", c.recorded_total, "cost, all rows"));
    out.push_str(&money(
        "rebuild-cost",
        c.rebuild_total,
        "rebuild every turn would have cost",
    ));
    out.push_str(&money(
        "never-cost",
        c.never_total,
        "never refreshing would have cost",
    ));
    out.push_str(&figure(
        "hit-ratio",
        hit.clone(),
        hit,
        "cache hit ratio (read ÷ prompt)",
    ));
    out.push_str(&figure(
        "prefix",
        prefix.to_string(),
        format!("{} / {}", tokens(prefix), tokens(view.ceiling_tokens)),
        "prefix now / ceiling, tokens",
    ));
    out.push_str("</div>");
    if view.truncated {
        let _ = write!(
            out,
            r#"<p class="note">The ledger has more than {} rows: the figures and charts cover the first {}.</p>"#,
            super::data::MAX_ROWS,
            super::data::MAX_ROWS
        );
    }
    if !c.unpriced.is_empty() {
        let _ = write!(
            out,
            r#"<p class="note">Not in the price table (left out of the simple designs): {}</p>"#,
            esc(&c.unpriced.join(", "))
        );
    }
    out.push_str("</section>");
    out
}

/// The brake button and the caps form, each sending only its own: the button goes to the Mind's
/// brake route with no body, the form carries the caps and never the brake, so neither, saved
/// from a page rendered before the other changed, can undo that change. The form also carries
/// the caps it was rendered with (`data-read`) as the write's `expected`: saved after someone
/// else changed a cap, it is refused rather than putting back the value it showed.
fn controls(s: &MindStatus<crate::config::MindConfig>) -> String {
    let id = esc(&s.id);
    let st = &s.settings;
    let (label, method) = if st.brake {
        ("Release the brake", "DELETE")
    } else {
        ("Brake", "POST")
    };
    // The exact values read (the shown ones are rounded), sent back as the write's condition.
    let read = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
    format!(
        r#"<section><h2>Controls</h2><form class="inline" id="brake-form" data-api="/v1/minds/{id}/brake" data-method="{method}"><button type="submit" id="brake-toggle">{label}</button><span class="error"></span></form><form class="inline" id="caps-form" data-api="/v1/minds/{id}/settings" data-method="PUT"><label>spend cap $ <input name="cap" size="8" data-json="spend_cap_micro_usd" data-kind="usd" value="{cap}" data-read="{cap_read}" placeholder="none"></label><label>window h <input name="window" size="5" data-json="spend_window_ms" data-kind="hours" value="{window}" data-read="{window_read}" placeholder="config"></label><label>turns per wake <input name="turns" size="4" data-json="turn_limit" data-kind="int" value="{limit}" data-read="{limit_read}" placeholder="config"></label><button type="submit">Save caps</button><span class="error"></span></form><p class="note">Settings override the configuration; an empty field falls back to it.</p></section>"#,
        cap = st
            .spend_cap_micro_usd
            .map_or(String::new(), |c| (c as f64 / 1e6).to_string()),
        window = st
            .spend_window_ms
            .map_or(String::new(), |w| (w as f64 / 3.6e6).to_string()),
        limit = st.turn_limit.map_or(String::new(), |l| l.to_string()),
        cap_read = read(st.spend_cap_micro_usd),
        window_read = read(st.spend_window_ms),
        limit_read = read(st.turn_limit),
    )
}

fn charts(view: &MindView, now_ms: i64) -> String {
    let c = &view.comparison;
    let dollars = |v: f64| format!("${v:.4}");
    let turn_x = |i: usize| (i + 1) as f64;
    let series = |name, color, pick: fn(&super::data::CostPoint) -> i64| Series {
        name,
        color,
        points: c
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| (turn_x(i), pick(p) as f64 / 1e6))
            .collect(),
    };
    let cumulative = svg::lines(
        "chart-cumulative",
        "Cumulative cost: as run, against rebuild every turn and never refresh",
        "turn",
        &[
            series("as run", "#1f6feb", |p| p.recorded),
            series("rebuild every turn", "#d4a72c", |p| p.rebuild),
            series("never refresh", "#b3261e", |p| p.never),
        ],
        None,
        &|v| format!("{v:.0}"),
        &dollars,
    );
    let mut previous = 0;
    let per_turn: Vec<(f64, f64, String)> = c
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let cost = p.recorded - previous;
            previous = p.recorded;
            let row = &view.rows[p.row].row;
            (
                turn_x(i),
                cost as f64 / 1e6,
                format!(
                    "turn {} ({}): {} — {}",
                    i + 1,
                    row.role,
                    usd(cost),
                    row.decision
                ),
            )
        })
        .collect();
    let bars = svg::bars(
        "chart-per-turn",
        "Cost per turn (with the pings and flushes before it)",
        "turn",
        &per_turn,
        "#1f6feb",
        &dollars,
    );
    format!(
        r#"<section><h2>Cost and cache</h2><div class="charts">{cumulative}{bars}{prefix}{timeline}</div></section>"#,
        prefix = prefix_chart(view),
        timeline = segment_timeline(&view.segments, now_ms),
    )
}

fn prefix_chart(view: &MindView) -> String {
    let mut by_role: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for (i, e) in view.rows.iter().enumerate() {
        by_role
            .entry(e.row.role.as_str())
            .or_default()
            .push(((i + 1) as f64, e.row.prefix_tokens as f64));
    }
    let colors = ["#1f6feb", "#8250df", "#57606a"];
    let series: Vec<Series<'_>> = by_role
        .into_iter()
        .zip(colors)
        .map(|((name, points), color)| Series {
            name,
            color,
            points,
        })
        .collect();
    let label = format!("ceiling {}", tokens(view.ceiling_tokens));
    let limit = (view.ceiling_tokens > 0).then_some(Limit {
        y: view.ceiling_tokens as f64,
        label: &label,
    });
    svg::lines(
        "chart-prefix",
        "Cached prefix per request against the ceiling, tokens",
        "request",
        &series,
        limit,
        &|v| format!("{v:.0}"),
        &|v| tokens(v.max(0.0) as u64),
    )
}

fn segment_timeline(segments: &[SegmentView], now_ms: i64) -> String {
    let lo = segments
        .iter()
        .map(|s| s.segment.started_at_ms)
        .min()
        .unwrap_or(now_ms);
    let hi = now_ms.max(lo + 1);
    let long = hi - lo > 86_400_000;
    let mut lanes: Vec<Lane<'_>> = Vec::new();
    for role in ["persona", "self"] {
        let spans = segments
            .iter()
            .filter(|s| s.segment.role.as_str() == role)
            .map(|s| {
                let end = s.segment.ended_at_ms.unwrap_or(hi);
                let why = s.ended_because.as_deref().unwrap_or("open");
                Span {
                    start: s.segment.started_at_ms as f64,
                    end: end as f64,
                    label: format!("#{}", s.segment.number),
                    tip: format!(
                        "segment {}: started {} ({}), {}",
                        s.segment.number,
                        time(s.segment.started_at_ms),
                        s.segment.reason,
                        match s.segment.ended_at_ms {
                            Some(t) => format!("ended {}: {why}", time(t)),
                            None => "open".to_string(),
                        }
                    ),
                    open: s.segment.ended_at_ms.is_none(),
                }
            })
            .collect();
        lanes.push(Lane { name: role, spans });
    }
    let chart = svg::timeline(
        "chart-segments",
        "Segments, and why each ended (hover a segment)",
        &lanes,
        (lo as f64, hi as f64),
        &|v| short_time(v as i64, long),
    );
    let mut table = String::from(
        r#"<table id="segments"><tr><th>role</th><th class="n">segment</th><th>started</th><th>why it started</th><th>ended</th><th>why it ended</th><th class="n">rehydration</th></tr>"#,
    );
    for s in segments {
        let g = &s.segment;
        let _ = write!(
            table,
            r#"<tr><td>{role}</td><td class="n">{n}</td><td>{started}</td><td>{reason}</td><td>{ended}</td><td>{why}</td><td class="n">{rehydration}</td></tr>"#,
            role = g.role.as_str(),
            n = g.number,
            started = time(g.started_at_ms),
            reason = esc(&g.reason),
            ended = g.ended_at_ms.map_or("open".to_string(), time),
            why = esc(s.ended_because.as_deref().unwrap_or("")),
            rehydration = tokens(g.rehydration_tokens.max(0) as u64),
        );
    }
    table.push_str("</table>");
    chart + &table
}

fn decisions(rows: &[LedgerEntry]) -> String {
    let mut counts: BTreeMap<(String, &'static str, String), (u64, i64)> = BTreeMap::new();
    for e in rows {
        let l = RowLabels::of(&e.row);
        let entry = counts
            .entry((e.row.role.clone(), l.action, l.reason))
            .or_default();
        entry.0 += 1;
        entry.1 += e.row.cost.0;
    }
    let mut out = String::from(
        r#"<section><h2>Decisions</h2><table id="decisions"><tr><th>role</th><th>action</th><th>reason</th><th class="n">requests</th><th class="n">cost</th></tr>"#,
    );
    for ((role, action, reason), (n, cost)) in &counts {
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td>{action}</td><td>{}</td><td class="n">{n}</td><td class="n">{}</td></tr>"#,
            esc(role),
            esc(reason),
            usd(*cost)
        );
    }
    out.push_str("</table><p class=\"note\">Every request's own decision and reason is in the ledger below.</p></section>");
    out
}

fn ledger(view: &MindView, filter: &LedgerFilter) -> String {
    let newest = view.rows.last().map_or(0, |e| e.row.at_ms);
    let matching: Vec<&LedgerEntry> = view
        .rows
        .iter()
        .rev()
        .filter(|e| filter.matches(&e.row, newest))
        .collect();
    let shown = matching.iter().skip(filter.offset).take(filter.limit);
    let mut out = String::from(r#"<section><h2>Ledger</h2>"#);
    out.push_str(&filter_form(&view.status.id, filter));
    let _ = write!(
        out,
        r#"<p class="note" id="ledger-count">{} of {} rows match; newest first, showing {} from {}.</p>"#,
        matching.len(),
        view.rows.len(),
        matching
            .len()
            .saturating_sub(filter.offset)
            .min(filter.limit),
        filter.offset + 1,
    );
    out.push_str(r#"<div class="scroll"><table id="ledger"><tr><th class="n">id</th><th>time</th><th>role</th><th>kind</th><th class="n">seg.turn</th><th>decision</th><th>action · reason</th><th>cache</th><th>miss</th><th class="n">uncached</th><th class="n">write 5m</th><th class="n">write 1h</th><th class="n">read</th><th class="n">output</th><th class="n">prefix</th><th class="n">cost</th><th>events</th></tr>"#);
    for e in shown {
        let r = &e.row;
        let l = RowLabels::of(r);
        let events: Vec<&str> = r.events.iter().map(event_label).collect();
        let _ = write!(
            out,
            r#"<tr><td class="n">{id}</td><td>{t}</td><td>{role}</td><td>{kind}</td><td class="n">{seg}.{turn}</td><td>{decision}</td><td>{action} · {reason}</td><td>{state}</td><td>{miss}</td><td class="n">{u}</td><td class="n">{w5}</td><td class="n">{w1}</td><td class="n">{rd}</td><td class="n">{o}</td><td class="n">{p}</td><td class="n">{cost}</td><td>{events}</td></tr>"#,
            id = e.id,
            t = time(r.at_ms),
            role = esc(&r.role),
            kind = l.kind,
            seg = r.segment,
            turn = r.turn,
            decision = esc(&r.decision),
            action = l.action,
            reason = esc(&l.reason),
            state = esc(&r.cache_state),
            miss = r.miss_cause.map_or("", crate::telemetry::miss_name),
            u = tokens(r.usage.input),
            w5 = tokens(r.usage.cache_write_5m),
            w1 = tokens(r.usage.cache_write_1h),
            rd = tokens(r.usage.cache_read),
            o = tokens(r.usage.output),
            p = tokens(r.prefix_tokens),
            cost = usd(r.cost.0),
            events = esc(&events.join(", ")),
        );
    }
    out.push_str("</table></div></section>");
    out
}

/// What a ledger row's event is, in a word. Session events carry their `type`; the host's own
/// records carry none and are told by their fields — calling every one of them "retry" showed a
/// billed attempt that failed, an answer lost with its host, or events dropped over a long
/// outage as retries.
fn event_label(event: &serde_json::Value) -> &str {
    if let Some(kind) = event.get("type").and_then(|t| t.as_str()) {
        return kind;
    }
    if event.get("lost_with_host").is_some() {
        "lost with its host"
    } else if event.get("attempt_failed").is_some() {
        "attempt failed"
    } else if event.get("session_events_dropped").is_some() {
        "events dropped"
    } else {
        "retry"
    }
}

fn filter_form(id: &str, f: &LedgerFilter) -> String {
    let select = |name: &str, options: &[&str], chosen: &Filter| {
        let mut s = format!(r#"<select name="{name}"><option value="">any {name}</option>"#);
        for o in options {
            let selected = if chosen.is(o) { " selected" } else { "" };
            let _ = write!(s, r#"<option value="{o}"{selected}>{o}</option>"#);
        }
        s + "</select>"
    };
    format!(
        r#"<form class="inline" id="ledger-filter" method="get" action="/dashboard/minds/{id}">{role}{kind}<input name="decision" size="16" maxlength="{max}" placeholder="decision contains" value="{decision}"><input name="since" size="6" maxlength="{max}" placeholder="since, e.g. 1h" value="{since}"><input name="limit" size="4" maxlength="5" value="{limit}"><button type="submit">Filter</button></form>"#,
        id = esc(id),
        role = select("role", &["persona", "self"], &f.role),
        kind = select("kind", &["request", "ping", "head_ping", "flush"], &f.kind),
        max = super::MAX_PARAM_CHARS,
        decision = esc(f.decision.as_deref().unwrap_or("")),
        since = esc(f.since_text.as_deref().unwrap_or("")),
        limit = f.limit,
    )
}

#[cfg(test)]
mod tests {
    use super::event_label;
    use serde_json::json;

    #[test]
    fn each_event_of_a_row_is_named_for_what_it_is() {
        let retry =
            json!({"attempt": 1, "delay_ms": 1000, "status": 529, "kind": "overloaded_error"});
        assert_eq!(event_label(&retry), "retry");
        assert_eq!(
            event_label(&json!({"type": "resumed_segment"})),
            "resumed_segment"
        );
        let failed = json!({"attempt_failed": "transport: reset", "request_id": "req_1"});
        assert_eq!(event_label(&failed), "attempt failed");
        let lost = json!({"attempt_failed": "lost", "request_id": null, "lost_with_host": 7});
        assert_eq!(event_label(&lost), "lost with its host");
        assert_eq!(
            event_label(&json!({"session_events_dropped": 136})),
            "events dropped"
        );
    }
}
