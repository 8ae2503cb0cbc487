//! What a Mind's page shows, gathered from the store and the telemetry: its status, segments,
//! ledger, and what the simple designs would have cost on the same turns (the replay engine
//! on the Mind's own ledger).

use crate::Host;
use crate::config::MindConfig;
use crate::http::{ApiResult, mind_status};
use crate::telemetry::{MindLive, RowLabels};
use muninn_api::wire::MindStatus;
use muninn_core::cache::CacheRules;
use muninn_core::decide::Policy;
use muninn_core::ledger::LedgerRow;
use muninn_core::records::Segment;
use muninn_core::replay::{Assumptions, Plan, ReplayConfig, replay_trace};
use muninn_store::{LedgerEntry, LedgerQuery, Mailbox, Role};

/// The most ledger rows a page reads (pages of [`PAGE`]); a longer ledger shows its first rows
/// and says so.
pub(super) const MAX_ROWS: usize = 20_000;
const PAGE: i64 = 1_000;
/// The most segments of each role a page reads, the newest (a Mind that has lived long has
/// thousands, each with its memory layer).
const SEGMENTS_SHOWN: i64 = 1_000;

/// Everything a Mind's page shows.
#[derive(Debug)]
pub(super) struct MindView {
    /// The status the API shows.
    pub(super) status: MindStatus<MindConfig>,
    /// The runner's live state in this host.
    pub(super) live: MindLive,
    /// The mail waiting.
    pub(super) mailbox: Mailbox,
    /// Both roles' segments, each with why it ended.
    pub(super) segments: Vec<SegmentView>,
    /// The ledger, oldest first (at most [`MAX_ROWS`]).
    pub(super) rows: Vec<LedgerEntry>,
    /// Whether the ledger has more rows than were read.
    pub(super) truncated: bool,
    /// The recorded cost against the simple designs, turn by turn.
    pub(super) comparison: Comparison,
    /// The context ceiling, tokens.
    pub(super) ceiling_tokens: u64,
}

/// A segment on the timeline.
#[derive(Debug, Clone)]
pub(super) struct SegmentView {
    pub(super) segment: Segment,
    /// Why it ended: the next segment's reason and the decision behind it; `None` while open.
    pub(super) ended_because: Option<String>,
}

/// One point of the cost comparison: after a turn, what each design had cost in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CostPoint {
    /// The turn's row, an index into [`MindView::rows`].
    pub(super) row: usize,
    /// What was paid, micro-dollars, up to and including this turn.
    pub(super) recorded: i64,
    /// What rebuilding the context every turn would have cost.
    pub(super) rebuild: i64,
    /// What never refreshing (append until the window) would have cost.
    pub(super) never: i64,
}

/// The recorded cost against rebuild-per-turn and never-refresh, priced by the replay engine on
/// the same turns.
#[derive(Debug, Clone, Default)]
pub(super) struct Comparison {
    /// One point per turn (a request of the conversation, not a ping or a flush).
    pub(super) points: Vec<CostPoint>,
    /// What was paid in all (pings and flushes after the last turn included).
    pub(super) recorded_total: i64,
    /// What rebuilding every turn would have cost in all.
    pub(super) rebuild_total: i64,
    /// What never refreshing would have cost in all.
    pub(super) never_total: i64,
    /// Models the price table does not know (their rows are left out of the simple designs).
    pub(super) unpriced: Vec<String>,
}

impl MindView {
    /// Gathers a Mind's page.
    pub(super) async fn load(host: &Host, id: &str) -> ApiResult<MindView> {
        let status = mind_status(host, id).await?;
        let mailbox = host.store.mailbox(id).await?;
        let (rows, truncated) = read_ledger(host, id).await?;
        let mut segments = Vec::new();
        for role in [Role::Persona, Role::SelfRole] {
            let stored = host
                .store
                .newest_segments(id, role, None, SEGMENTS_SHOWN)
                .await?;
            segments.extend(segment_views(stored, &rows));
        }
        let mind = host.config.mind(id).cloned();
        let plain: Vec<LedgerRow> = rows.iter().map(|e| e.row.clone()).collect();
        let comparison = compare(host, mind.as_ref(), &plain);
        let ceiling_tokens = plain
            .iter()
            .rev()
            .find_map(|r| r.decided.as_ref().map(|d| d.bounds.ceiling_tokens))
            .or(mind.as_ref().and_then(|m| m.ceiling_tokens))
            .unwrap_or(0);
        Ok(MindView {
            status,
            live: host.telemetry.mind(id),
            mailbox,
            segments,
            rows,
            truncated,
            comparison,
            ceiling_tokens,
        })
    }
}

async fn read_ledger(host: &Host, id: &str) -> ApiResult<(Vec<LedgerEntry>, bool)> {
    let mut rows: Vec<LedgerEntry> = Vec::new();
    loop {
        let page = host
            .store
            .ledger(&LedgerQuery {
                mind: Some(id.to_owned()),
                after_id: rows.last().map(|e| e.id),
                limit: Some(PAGE),
                ..LedgerQuery::default()
            })
            .await?;
        let full = page.len() as i64 == PAGE;
        rows.extend(page);
        if rows.len() >= MAX_ROWS {
            rows.truncate(MAX_ROWS);
            return Ok((rows, true));
        }
        if !full {
            return Ok((rows, false));
        }
    }
}

/// Each segment with why it ended: the reason its successor started, and the decision the
/// successor's first ledger row records.
fn segment_views(mut stored: Vec<Segment>, rows: &[LedgerEntry]) -> Vec<SegmentView> {
    stored.sort_by_key(|s| s.number);
    let first_row = |segment: &Segment| {
        rows.iter().map(|e| &e.row).find(|r| {
            r.role == segment.role.as_str() && r.segment as i64 == segment.number && r.turn == 0
        })
    };
    let mut views = Vec::with_capacity(stored.len());
    for (i, segment) in stored.iter().enumerate() {
        let ended_because = segment.ended_at_ms.map(|_| match stored.get(i + 1) {
            Some(next) => match first_row(next) {
                Some(row) => {
                    let labels = RowLabels::of(row);
                    format!("{} ({}: {})", next.reason, labels.action, labels.reason)
                }
                None => next.reason.clone(),
            },
            None => "ended".to_string(),
        });
        views.push(SegmentView {
            segment: segment.clone(),
            ended_because,
        });
    }
    views
}

/// The recorded cost per turn against rebuild-per-turn and never-refresh on the same turns:
/// the Mind's ledger imported as traces (as `muninn replay` would import its export), each
/// trace replayed under `Plan::Online(Policy::Rebuild)` and `Plan::Online(Policy::Never)` with
/// the Mind's own TTLs and bounds.
fn compare(host: &Host, mind: Option<&MindConfig>, rows: &[LedgerRow]) -> Comparison {
    let assumptions = match mind {
        Some(m) => Assumptions {
            rehydrate_tokens: m.memory_tokens,
            min_segment_requests: m.min_segment,
            ceiling_tokens: m.ceiling_tokens,
            ttl: Some(m.tail_ttl),
            head_ttl: Some(m.head_ttl),
            ..Assumptions::default()
        },
        None => Assumptions::default(),
    };
    let rules = CacheRules::default();
    let mut rebuild = vec![0i64; rows.len()];
    let mut never = vec![0i64; rows.len()];
    let mut unpriced = Vec::new();
    for traced in muninn_import::ledger_traces(rows) {
        let Ok(price) = host.prices.model(&traced.trace.model) else {
            unpriced.push(traced.trace.model.clone());
            continue;
        };
        let config = ReplayConfig {
            price,
            assumptions: &assumptions,
            rules: &rules,
        };
        for (policy, costs) in [(Policy::Rebuild, &mut rebuild), (Policy::Never, &mut never)] {
            replay_trace(&traced.trace, Plan::Online(policy), &config, &mut |step| {
                if let Some(&row) = traced.rows.get(step.index) {
                    costs[row] += step.cost.0;
                }
            });
        }
    }
    unpriced.sort();
    unpriced.dedup();
    let mut points = Vec::new();
    let (mut paid, mut rebuilt, mut appended) = (0, 0, 0);
    for (i, row) in rows.iter().enumerate() {
        paid += row.cost.0;
        rebuilt += rebuild[i];
        appended += never[i];
        if RowLabels::of(row).kind == "request" {
            points.push(CostPoint {
                row: i,
                recorded: paid,
                rebuild: rebuilt,
                never: appended,
            });
        }
    }
    Comparison {
        points,
        recorded_total: paid,
        rebuild_total: rebuilt,
        never_total: appended,
        unpriced,
    }
}
