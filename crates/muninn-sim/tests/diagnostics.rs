//! muninn's miss causes against the provider's cache diagnostics, as the simulator answers them:
//! the Anthropic backend asks for a diagnosis on every request and records it beside its own
//! cause. This is a *consistency* check — the simulator diagnoses with the same structural
//! comparison the backend uses to name a level, so it shows that the two paths (the wire, the
//! SSE decoding, the ledger fields, the mapping of the vocabularies) carry the labels intact;
//! agreement with the real API's labels is what `muninn check-cache` measures on transcripts
//! that carry them.

use crate::support::{long_system, sim, tool_specs, wired};
use muninn_backend::{Backend, SessionSpec, TurnInput, TurnOutcome};
use muninn_core::cache::Ttl;
use muninn_core::ledger::MissCause;
use muninn_core::miss::{ProviderMissReason, agrees};
use pretty_assertions::assert_eq;
use serde_json::json;

fn spec(model: &str, system: &str, tools: usize) -> SessionSpec {
    SessionSpec {
        model: model.to_string(),
        system: vec![long_system(system, 2), "Be brief.".to_string()],
        tools: tool_specs(tools),
        output_schema: None,
        system_ttl: Ttl::OneHour,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 256,
    }
}

async fn turn(w: &mut crate::support::Wired, text: &str) -> TurnOutcome {
    w.backend.turn(TurnInput::text(text)).await.unwrap()
}

#[tokio::test]
async fn each_change_is_named_alike_by_muninn_and_by_the_diagnostics() {
    let h = sim().await;
    let mut w = wired(&h);
    w.backend
        .start(spec("claude-opus-5-5", "a", 1))
        .await
        .unwrap();
    let first = turn(&mut w, "one").await;
    assert_eq!(
        (first.miss, first.provider_miss),
        (Some(MissCause::ColdStart), None)
    );
    let warm = turn(&mut w, "two").await;
    assert_eq!(warm.miss, None);
    assert_eq!(
        warm.provider_miss.map(|p| p.reason),
        Some(ProviderMissReason::NoDivergence)
    );
    // Ten minutes idle: the 5m tail expired, nothing changed.
    w.clock.advance(600_000);
    h.sim.advance_clock(600_000);
    let expired = turn(&mut w, "three").await;
    assert_eq!(expired.miss, Some(MissCause::TtlExpiry));
    assert_eq!(
        expired.provider_miss.map(|p| p.reason),
        Some(ProviderMissReason::NoDivergence)
    );
    // A new segment on other layers, each level in turn.
    let cases = [
        (
            spec("claude-opus-5-5", "b", 1),
            MissCause::SystemChange,
            "system_changed",
        ),
        (
            spec("claude-opus-5-5", "b", 2),
            MissCause::ToolsChange,
            "tools_changed",
        ),
        (
            spec("claude-opus-5-5", "b", 2),
            MissCause::MessagesChange,
            "messages_changed",
        ),
        (
            spec("claude-sonnet-4-5", "b", 2),
            MissCause::ModelChange,
            "model_changed",
        ),
    ];
    for (next, cause, label) in cases {
        turn(&mut w, "before").await;
        w.backend.start(next).await.unwrap();
        let o = turn(&mut w, "after").await;
        assert_eq!(o.miss, Some(cause), "{label}");
        let p = o.provider_miss.unwrap();
        assert_eq!(p.reason.as_str(), label);
        assert!(p.missed_tokens.is_some_and(|t| t > 0), "{label}: {p:?}");
    }
    // What went over the wire: every request asked, naming the last turn's response.
    let records = h.sim.requests();
    assert!(records.iter().all(|r| r.body.get("diagnostics").is_some()));
    assert_eq!(
        records[0].body["diagnostics"],
        json!({"previous_message_id": null})
    );
    assert_eq!(
        records[1].body["diagnostics"]["previous_message_id"],
        json!("msg_sim_00000001")
    );
}

/// A tiny deterministic generator (xorshift64*), so the workload is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// The figure: over a random workload of turns, idle gaps (some past the 5m TTL), keep-warm
/// pings and new segments that change the model, the tools, the system or only the messages,
/// muninn's cause agrees with the simulator's label on every request that has one. FAIL below
/// 100%: the two describe the same change, so any disagreement is a bug in one path.
#[tokio::test]
async fn causes_agree_with_the_simulators_labels_on_a_random_workload() {
    let h = sim().await;
    let mut w = wired(&h);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut model, mut system, mut tools) = ("claude-opus-5-5", 0u64, 1usize);
    w.backend
        .start(spec(model, &system.to_string(), tools))
        .await
        .unwrap();
    let mut outcomes: Vec<TurnOutcome> = Vec::new();
    for step in 0..300 {
        let gap = [5_000, 60_000, 240_000, 400_000, 1_800_000][rng.below(5) as usize];
        w.clock.advance(gap);
        h.sim.advance_clock(gap);
        match rng.below(10) {
            0 => model = ["claude-opus-5-5", "claude-sonnet-4-5"][rng.below(2) as usize],
            1 => system += 1,
            2 => tools = 1 + rng.below(3) as usize,
            _ => {}
        }
        if rng.below(8) == 0 {
            w.backend
                .start(spec(model, &system.to_string(), tools))
                .await
                .unwrap();
        }
        if rng.below(10) == 0 && !outcomes.is_empty() {
            if let Ok(o) = w.backend.ping().await {
                outcomes.push(o);
            }
            continue;
        }
        outcomes.push(
            w.backend
                .turn(TurnInput::text(format!("step {step}")))
                .await
                .unwrap(),
        );
    }
    let labelled: Vec<(Option<MissCause>, bool)> = outcomes
        .iter()
        .filter_map(|o| {
            o.provider_miss
                .and_then(|p| agrees(o.miss, &p))
                .map(|a| (o.miss, a))
        })
        .collect();
    let agree = labelled.iter().filter(|(_, a)| *a).count();
    let changed = labelled.iter().filter(|(c, _)| c.is_some()).count();
    println!(
        "muninn's causes agree with the simulator's diagnostics on {agree} of {} labelled \
         requests ({:.2}%; {changed} with a cause, of {} requests in all; consistency, not \
         validation)",
        labelled.len(),
        100.0 * agree as f64 / labelled.len().max(1) as f64,
        outcomes.len(),
    );
    assert!(labelled.len() > 250, "the workload labels most requests");
    assert!(changed > 50, "and changes often");
    assert_eq!(agree, labelled.len(), "FAIL: a cause and a label disagree");
}

/// `output_config.effort` is part of the messages' prefix (the reference's invalidation rules):
/// the same request at another effort reads the system prompt and rewrites the messages, and
/// the diagnostics name `messages_changed`; at the same effort it reads everything.
#[tokio::test]
async fn an_effort_change_rewrites_the_messages_only() {
    let h = sim().await;
    let body = |effort: &str| {
        json!({"model": "claude-opus-5-5", "max_tokens": 64, "output_config": {"effort": effort},
               "diagnostics": {"previous_message_id": null},
               "system": [{"type": "text", "text": long_system("e", 2),
                           "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
               "messages": [{"role": "user", "content": [{"type": "text",
                   "text": long_system("a long question", 2),
                   "cache_control": {"type": "ephemeral"}}]}]})
    };
    let system_tokens = muninn_anthropic::prompt::shape(&body("medium"))
        .unwrap()
        .checkpoints[0]
        .tokens;
    let now = crate::support::T0;
    let first = h.sim.messages(&body("medium"), None, 1, now).unwrap();
    let same = h.sim.messages(&body("medium"), None, 2, now).unwrap();
    assert_eq!(same.usage.cache_read, first.usage.written());
    let mut other = body("high");
    other["diagnostics"] = json!({"previous_message_id": same.id});
    let changed = h.sim.messages(&other, None, 3, now).unwrap();
    assert_eq!(
        (changed.usage.cache_read, changed.usage.cache_write_5m),
        (system_tokens, first.usage.cache_write_5m)
    );
    let reason = changed.diagnostics.and_then(|d| d.cache_miss_reason);
    assert_eq!(reason.map(|r| r.kind), Some("messages_changed".to_string()));
}
