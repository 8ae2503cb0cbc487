//! The Persona optimum sees every charge the policies pay: the layer-change charge (a refresh that
//! reads the head writes the layers changed since its segment began) is in its program, so it
//! matches brute force over every segmentation charged the same way, and no plan beats it.

use muninn_core::price::PriceTable;
use muninn_core::replay::Plan;
use muninn_workload::persona::{self, Design, PersonaConfig, head_changes, session_trace};
use muninn_workload::workload::{PersonaParams, Span, Stream, Variant};

/// Layers that change every few turns (the defaults change them every 50–500 turns, too rarely for
/// a stream small enough to brute-force).
fn busy_layers() -> PersonaParams {
    PersonaParams {
        doctrine_edit_every_turns: 5,
        persona_put_every_turns: 3,
        campaign_change_every_turns: 4,
        ..PersonaParams::default()
    }
}

fn small_config() -> PersonaConfig {
    PersonaConfig {
        min_segment_requests: 1,
        ..PersonaConfig::default()
    }
}

#[test]
fn the_persona_optimum_matches_brute_force_with_layer_changes() {
    let prices = PriceTable::embedded();
    let price = prices.model("claude-opus-5-5").unwrap();
    let config = small_config();
    for (variant, seed) in [
        (Variant::Quiet, 1),
        (Variant::LongGaps, 2),
        (Variant::Mix, 3),
        (Variant::B6, 4),
    ] {
        let stream = Stream::build(&busy_layers(), variant, seed, Span::Turns(11));
        let (trace, head, context) = session_trace(&stream, &price.name, &config);
        let changes = head_changes(&stream, (head, context));
        assert!(changes.contains(&head) && changes.contains(&context));
        let n = stream.turns.len();
        let total = |r: &persona::DesignResult| r.cost.iter().map(|c| c.0).sum::<i64>();
        let brute = (0u32..1 << (n - 1))
            .map(|mask| {
                let starts: Vec<bool> = (0..n)
                    .map(|j| j == 0 || mask & (1 << (j - 1)) != 0)
                    .collect();
                let r = persona::muninn_segmented(
                    &stream,
                    &trace,
                    (head, context),
                    price,
                    starts,
                    &config,
                );
                total(&r)
            })
            .min()
            .unwrap();
        let optimum = persona::muninn(
            &stream,
            &trace,
            (head, context),
            price,
            Plan::Optimum,
            &config,
        );
        let optimum = total(&optimum);
        assert!(
            optimum <= brute + brute / 1000 + 5,
            "{variant} seed {seed}: optimum {optimum} µ$ > brute force {brute} µ$"
        );
    }
}

#[test]
fn no_plan_beats_the_persona_optimum_with_its_charges() {
    let prices = PriceTable::embedded();
    let price = prices.model("claude-opus-5-5").unwrap();
    for (params, turns) in [(PersonaParams::default(), 200), (busy_layers(), 120)] {
        for variant in Variant::ALL {
            let stream = Stream::build(&params, variant, 5, Span::Turns(turns));
            let c = persona::compare(&stream, price, &PersonaConfig::default());
            let optimum = c.summary(Design::Muninn(Plan::Optimum)).unwrap().total;
            for r in &c.results {
                if let Design::Muninn(plan) = r.design {
                    let cost = r.summary(c.doctrine_tokens).total;
                    assert!(
                        optimum.0 <= cost.0 + cost.0 / 1000,
                        "{variant}, {turns} turns: {plan} {cost} < optimum {optimum}"
                    );
                }
            }
        }
    }
}
