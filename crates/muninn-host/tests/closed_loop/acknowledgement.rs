//! The Persona's structured-output acknowledgement in the closed loop: a Persona turn is
//! planned with the acknowledgement its request carries (the backend's pending input), so the
//! clears its ledger rows record are the ones a replay takes.

use super::{Act, Harness, assert_holds, closed_loop_on, words_of};
use crate::runtime::mind;
use muninn_core::closed_loop::params_of;
use muninn_core::decide::{Action, Event};
use muninn_core::ledger::{LedgerRow, RowKind};
use muninn_core::price::PriceTable;
use muninn_core::session::Accounting;
use muninn_core::tokenize::count;
use muninn_host::config::MindConfig;

/// What the Anthropic backend (and so the simulator's backend) opens every Persona request with
/// once a reply called the structured-output tool: the CLI's acknowledgement of that call.
const ACK: &str = "Structured output provided successfully";

/// A Mind whose Persona segment is too young to refresh (`min_segment`) for the whole workload:
/// at each arrival the decider appends or clears.
fn unrefreshed_mind() -> MindConfig {
    mind("min_segment = 50")
}

/// The Persona rows of requests, in order.
fn persona_requests(rows: &[LedgerRow]) -> Vec<&LedgerRow> {
    rows.iter()
        .filter(|r| r.role == "persona")
        .filter(|r| {
            r.decided
                .as_ref()
                .is_some_and(|d| d.kind == RowKind::Request)
        })
        .collect()
}

/// The clearable tokens the decider saw at `at`'s arrival, by the accounting its session's rows
/// before it build (as the host's did, and a replay does), with `arriving` tool uses kept among
/// the newest.
fn clearable_at(rows: &[LedgerRow], at: &LedgerRow, arriving: u32) -> u64 {
    let prices = PriceTable::embedded();
    let price = prices.model(&at.model).unwrap();
    let mut acc: Option<Accounting> = None;
    for row in rows
        .iter()
        .filter(|r| r.role == at.role)
        .take_while(|r| !std::ptr::eq(*r, at))
    {
        let d = row.decided.as_ref().unwrap();
        let acc = acc.get_or_insert_with(|| Accounting::new(params_of(d, price)));
        acc.set_params(params_of(d, price));
        acc.record_decided(d, row.at_ms, &row.usage, row.cost);
    }
    let Some(Event::Arrival { boundary, .. }) = at.decided.as_ref().unwrap().event else {
        panic!("{at:#?}");
    };
    acc.unwrap()
        .arrival_view(boundary, arriving)
        .clearable_tokens
}

/// A Persona plans each turn with the acknowledgement its request carries
/// (`Backend::pending_input`), so at a cold wake after four turns it clears the oldest: the
/// request opens with the fourth acknowledgement, which the provider counts among the three
/// uses it keeps, and the first is left to clear. Planned without it, the three older results
/// were all kept and the decider appended — while a replay of the row, which records the tool
/// result, cleared. The clear the decider weighed is the one the simulator applied (the same
/// tokens), and the ledger replays exactly: every decision, every usage, the cost to the
/// micro-dollar.
#[tokio::test]
async fn a_persona_clears_at_a_cold_wake_as_planned_and_the_ledger_replays_exactly() {
    let mut acts = Vec::new();
    for _ in 0..4 {
        acts.push(Act::Deliver { room: 0, words: 40 });
        acts.push(Act::Wait { ms: 2_000 });
    }
    // Long enough for every keep-warm the idle rules allow to end: the wake is cold.
    acts.extend(std::iter::repeat_n(Act::Wait { ms: 10_800_000 }, 3));
    acts.push(Act::Deliver { room: 0, words: 40 });
    let h = Harness::with(unrefreshed_mind(), "", None).await;
    let (report, rows) = closed_loop_on(h, &acts).await;
    let persona = persona_requests(&rows);
    assert_eq!(persona.len(), 5, "{rows:#?}");
    let wake = persona[4];
    let decided = wake.decided.as_ref().unwrap();
    assert_eq!(wake.cache_state, "cold", "{rows:#?}");
    assert_eq!(decided.action, Some(Action::Mask), "{rows:#?}");
    assert_eq!(decided.tool_results.uses, 1, "{decided:#?}");
    // What the decider weighed: the first acknowledgement, with the fourth arriving; without
    // the arriving one, nothing.
    let planned = clearable_at(&rows, wake, decided.tool_results.uses);
    assert!(planned > 0);
    assert_eq!(clearable_at(&rows, wake, 0), 0);
    // What the provider cleared.
    let edited = wake
        .events
        .iter()
        .find(|e| e["type"] == "context_edited")
        .unwrap_or_else(|| panic!("{:#?}", wake.events));
    assert_eq!(edited["cleared_tool_uses"], 1, "{edited}");
    assert_eq!(edited["cleared_input_tokens"].as_u64(), Some(planned));
    assert_holds(&report, &rows);
    assert_eq!(report.agreed, report.decisions);
    assert_eq!(report.rows_priced_apart, 0, "{report:#?}");
    assert_eq!(report.replayed_cost, report.recorded_cost, "{report:#?}");
}

/// Each Persona turn is planned with what its request carries: the delivery and, from the
/// second turn on, the acknowledgement the backend opens the message with. The decider's delta
/// (the row's `Arrival`) is the batch's estimate plus the acknowledgement's tokens exactly when
/// the row records it among the request's tool results.
#[tokio::test]
async fn a_persona_turns_planned_prompt_counts_the_acknowledgement_it_carries() {
    let words: Vec<u16> = (0..6).map(|i| 30 + 7 * i).collect();
    let acts: Vec<Act> = words
        .iter()
        .flat_map(|&words| [Act::Deliver { room: 0, words }, Act::Wait { ms: 40_000 }])
        .collect();
    let h = Harness::with(unrefreshed_mind(), "", None).await;
    let (report, rows) = closed_loop_on(h, &acts).await;
    assert_holds(&report, &rows);
    let persona = persona_requests(&rows);
    assert_eq!(persona.len(), words.len(), "{rows:#?}");
    for (k, row) in persona.iter().enumerate() {
        let d = row.decided.as_ref().unwrap();
        // One delivery per turn, without context lines (`Batch::new`'s estimate).
        let batch = count(&words_of(words[k], k as u32 + 1)) + 12;
        let Some(Event::Arrival { delta, .. }) = d.event else {
            // The first turn starts the session without asking.
            assert_eq!(k, 0, "{row:#?}");
            continue;
        };
        assert_eq!(d.tool_results.uses, 1, "turn {k}: {d:#?}");
        assert_eq!(delta, batch + count(ACK), "turn {k}");
    }
}
