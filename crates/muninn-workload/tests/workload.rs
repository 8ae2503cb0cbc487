//! The Persona workload: determinism, the sizes it promises, `next_batch`, the variants' shapes,
//! and history shown once making muninn's turns smaller than rebuild's.

use muninn_core::cache::Ttl;
use muninn_core::price::PriceTable;
use muninn_core::render::Renderer;
use muninn_core::tokenize::count;
use muninn_workload::persona::{self, Design, PersonaConfig, rebuild_message, session_trace};
use muninn_workload::workload::{
    Arrival, PersonaParams, Span, Stream, Variant, generate, next_batch, schedule,
};

fn stream(variant: Variant, seed: u64, turns: usize) -> Stream {
    Stream::build(&PersonaParams::default(), variant, seed, Span::Turns(turns))
}

#[test]
fn the_same_seed_gives_the_same_stream_and_another_seed_another() {
    for variant in Variant::ALL {
        let a = stream(variant, 7, 120);
        let b = stream(variant, 7, 120);
        assert_eq!(a.arrivals, b.arrivals, "{variant}");
        assert_eq!(a.turns, b.turns, "{variant}");
        assert_eq!(a.doctrine, b.doctrine);
        assert_eq!(a.persona, b.persona);
        assert_eq!(a.campaigns, b.campaigns);
        let c = stream(variant, 8, 120);
        assert_ne!(a.arrivals, c.arrivals, "{variant}");
    }
}

#[test]
fn turns_span_gives_exactly_that_many_turns_and_longer_streams_extend_shorter_ones() {
    let params = PersonaParams::default();
    for variant in Variant::ALL {
        let short = generate(&params, variant, 3, Span::Turns(150));
        let long = generate(&params, variant, 3, Span::Turns(400));
        assert_eq!(schedule(&params, &short).len(), 150, "{variant}");
        assert_eq!(schedule(&params, &long).len(), 400, "{variant}");
        assert_eq!(&long[..short.len()], &short[..], "{variant}");
        let s = stream(variant, 3, 150);
        assert_eq!(s.turns.len(), 150);
        assert_eq!(s.arrivals, short);
    }
}

#[test]
fn generated_parts_have_the_sizes_the_workload_states() {
    let p = PersonaParams::default();
    let s = stream(Variant::Mix, 11, 1_200);
    // The doctrine: 25,000 tokens in at most 96 KiB, every version, one edit per 500 turns.
    assert!(
        (3..=4).contains(&s.doctrine.len()),
        "{} versions",
        s.doctrine.len()
    );
    for d in &s.doctrine {
        assert_eq!(count(d), p.doctrine_tokens);
        assert!(d.len() <= p.doctrine_max_bytes, "{} bytes", d.len());
    }
    // Persona state: 1,500 tokens; a put changes about 200 of them.
    assert!(s.persona.len() >= 1_200 / 50);
    for pair in s.persona.windows(2) {
        assert_eq!(count(&pair[1]), p.persona_tokens);
        let (a, b) = (pair[0].as_bytes(), pair[1].as_bytes());
        let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let suffix = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        let changed = count(&pair[1][prefix..b.len() - suffix.min(b.len() - prefix)]);
        assert!(
            (150..=p.persona_put_tokens + 2).contains(&changed),
            "{changed} tokens changed"
        );
    }
    // Campaigns: 300 tokens when all are open, one fewer campaign after a close.
    assert_eq!(count(&s.campaigns[0]), p.campaigns_tokens);
    assert!(s.campaigns.len() >= 1_200 / 200);
    assert_eq!(count(&s.campaigns[1]), p.campaigns_tokens - 50);
    assert_eq!(count(&s.campaigns[2]), p.campaigns_tokens);
    assert_eq!(count(&s.framing), p.framing_tokens);
    // Every turn: a 150-token status; replies of 80–400 tokens, mean about 200.
    let mut reply_sum = 0;
    for t in &s.turns {
        assert_eq!(count(&t.status), p.status_tokens);
        let r = count(&t.reply);
        assert!((80..=400).contains(&r), "reply of {r}");
        reply_sum += r;
    }
    let reply_mean = reply_sum as f64 / s.turns.len() as f64;
    assert!((185.0..=215.0).contains(&reply_mean), "{reply_mean}");
    // Messages: 10–120 tokens, mean about 40, from 8 senders of which 2 operators.
    let mut senders = std::collections::BTreeSet::new();
    let mut msg_sum = 0;
    for a in &s.arrivals {
        assert_eq!(count(&a.text), a.tokens);
        assert!((10..=120).contains(&a.tokens), "message of {}", a.tokens);
        assert_eq!(a.operator, a.sender == "member-0" || a.sender == "member-1");
        if a.is_direct {
            assert!(a.to_you);
        }
        senders.insert(a.sender.clone());
        msg_sum += a.tokens;
        // Context: at most 20 lines and 16 KiB of the room's earlier lines.
        assert!(a.context.len() <= p.context_lines);
        let bytes: usize = a
            .context
            .iter()
            .map(|l| l.sender.len() + l.text.len() + 3)
            .sum();
        assert!(bytes <= p.context_max_bytes);
    }
    assert!(senders.len() <= p.senders);
    let msg_mean = msg_sum as f64 / s.arrivals.len() as f64;
    assert!((36.0..=44.0).contains(&msg_mean), "{msg_mean}");
}

#[test]
fn a_delivery_carries_the_previous_lines_of_its_room() {
    let s = stream(Variant::Busy, 5, 400);
    let mut last_in_room: std::collections::HashMap<&str, &Arrival> = Default::default();
    for a in &s.arrivals {
        assert_eq!(
            a.context.len(),
            20,
            "every room starts with a 20-line backlog"
        );
        if let Some(prev) = last_in_room.get(a.room.as_str()) {
            let line = a.context.last().unwrap();
            assert_eq!(line.id, prev.id);
            assert_eq!(line.text, prev.text);
        } else {
            assert!(a.context.iter().all(|l| l.id.starts_with("$backlog-")));
        }
        last_in_room.insert(&a.room, a);
    }
}

fn arrival(seq: u64, room: &str) -> Arrival {
    Arrival {
        seq,
        at_ms: seq as i64 * 1_000,
        id: format!("$e{seq}"),
        room: room.into(),
        is_direct: room.starts_with("dm"),
        sender: "member-3".into(),
        operator: false,
        to_you: room.starts_with("dm"),
        text: "hi".into(),
        tokens: 1,
        conversation: 0,
        context: Vec::new(),
    }
}

fn rooms(batch: &[Arrival]) -> Vec<&str> {
    batch.iter().map(|a| a.room.as_str()).collect()
}

#[test]
fn next_batch_takes_public_rooms_together_and_one_dm_alone() {
    let pending = |rs: &[&str]| -> Vec<Arrival> {
        rs.iter()
            .enumerate()
            .map(|(i, r)| arrival(i as u64, r))
            .collect()
    };
    // All public-room deliveries together, across rooms, up to the first DM.
    let p = pending(&["#a", "#b", "#a", "dm-0", "#c"]);
    assert_eq!(rooms(next_batch(&p)), ["#a", "#b", "#a"]);
    // One DM room alone: truncated where the room switches…
    let p = pending(&["dm-0", "dm-0", "dm-1", "dm-0"]);
    assert_eq!(rooms(next_batch(&p)), ["dm-0", "dm-0"]);
    // …or where is_direct switches.
    let p = pending(&["dm-1", "#a", "dm-1"]);
    assert_eq!(rooms(next_batch(&p)), ["dm-1"]);
    let p = pending(&["#a"]);
    assert_eq!(rooms(next_batch(&p)), ["#a"]);
    assert!(next_batch(&[]).is_empty());
}

#[test]
fn the_schedule_cuts_every_arrival_into_consecutive_batches_in_time() {
    let params = PersonaParams::default();
    for variant in [Variant::Busy, Variant::Mix] {
        let arrivals = generate(&params, variant, 9, Span::Turns(600));
        let turns = schedule(&params, &arrivals);
        let mut next = 0;
        let mut previous: Option<i64> = None;
        let mut multi = 0;
        for t in &turns {
            assert_eq!(t.deliveries.start, next);
            assert!(t.deliveries.end > t.deliveries.start);
            next = t.deliveries.end;
            let batch = &arrivals[t.deliveries.clone()];
            assert!(batch.iter().all(|a| a.at_ms <= t.at_ms));
            // A batch is what next_batch takes of a prefix of the pending deliveries.
            assert_eq!(next_batch(batch).len(), batch.len());
            if let Some(p) = previous {
                assert!(t.at_ms >= p + params.reply_latency_ms);
            }
            previous = Some(t.at_ms);
            multi += usize::from(batch.len() > 1);
        }
        assert_eq!(next, arrivals.len());
        if variant == Variant::Busy {
            assert!(multi > 0, "overlapping conversations batch together");
        }
    }
}

/// Conversation starts per hour, and the quiet periods between the end of one conversation and
/// the start of the next.
fn shape(s: &Stream) -> (f64, Vec<i64>, f64) {
    let mut starts: Vec<(u64, i64, i64)> = Vec::new(); // (conversation, first, last)
    for a in &s.arrivals {
        match starts.iter_mut().find(|c| c.0 == a.conversation) {
            Some(c) => c.2 = a.at_ms,
            None => starts.push((a.conversation, a.at_ms, a.at_ms)),
        }
    }
    starts.sort_by_key(|c| c.0);
    let span_h = (starts.last().unwrap().1 - starts[0].1) as f64 / 3.6e6;
    let gaps = starts.windows(2).map(|w| w[1].1 - w[0].2).collect();
    let dm = s.arrivals.iter().filter(|a| a.is_direct).count() as f64 / s.arrivals.len() as f64;
    ((starts.len() - 1) as f64 / span_h, gaps, dm)
}

#[test]
fn the_variants_have_their_shapes() {
    let (per_hour, _, dm) = shape(&stream(Variant::Quiet, 2, 1_500));
    assert!((0.85..=1.15).contains(&per_hour), "quiet: {per_hour}/h");
    assert!((0.22..=0.38).contains(&dm), "quiet DM share {dm}");
    let (per_hour, _, _) = shape(&stream(Variant::Busy, 2, 1_500));
    assert!((25.0..=35.0).contains(&per_hour), "busy: {per_hour}/h");
    let (_, gaps, _) = shape(&stream(Variant::LongGaps, 2, 800));
    for g in gaps {
        assert!(
            (20 * 60_000..=90 * 60_000).contains(&g),
            "long-gaps quiet period {g} ms"
        );
    }
    let (_, _, dm) = shape(&stream(Variant::DmHeavy, 2, 1_500));
    assert!((0.62..=0.78).contains(&dm), "dm-heavy DM share {dm}");
    // b6: quiet periods from the seed's idle-gap mix, mostly under a minute, a few over 5 min.
    let (_, gaps, _) = shape(&stream(Variant::B6, 2, 3_000));
    let under_min = gaps.iter().filter(|&&g| g < 60_000).count() as f64 / gaps.len() as f64;
    let over_5 = gaps.iter().filter(|&&g| g >= 300_000).count() as f64 / gaps.len() as f64;
    assert!((0.80..=0.92).contains(&under_min), "{under_min}");
    assert!((0.02..=0.07).contains(&over_5), "{over_5}");
    // mix: both busy and hour-long stretches occur.
    let (_, gaps, _) = shape(&stream(Variant::Mix, 2, 3_000));
    assert!(gaps.iter().any(|&g| g >= 20 * 60_000));
    assert!(
        gaps.iter().any(|&g| g < 0),
        "busy phases overlap conversations"
    );
}

#[test]
fn the_session_trace_counts_what_the_renderer_renders() {
    let s = stream(Variant::Busy, 4, 40);
    let config = PersonaConfig::default();
    let (trace, head, context) = session_trace(&s, "claude-opus-5-5", &config);
    let mut renderer = Renderer::new(s.layers(0), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let (cps, _) = renderer.rendered().checkpoints();
    assert_eq!(head, cps[1].tokens);
    assert_eq!(context, cps[1].tokens - cps[0].tokens);
    for (i, t) in s.turns.iter().enumerate() {
        let rendered = renderer.turn(&s.layers(i), &s.input(i));
        let (_, total) = rendered.checkpoints();
        assert_eq!(trace.requests[i].usage.prompt(), total, "turn {i}");
        renderer.reply(&t.reply);
    }
}

#[test]
fn history_shown_once_makes_muninn_turns_smaller_than_rebuild_turns() {
    for variant in [Variant::B6, Variant::Busy, Variant::Mix] {
        let s = stream(variant, 6, 500);
        let config = PersonaConfig::default();
        let (trace, _, _) = session_trace(&s, "claude-opus-5-5", &config);
        // muninn's new tokens per turn: its user message plus the previous reply.
        let added: u64 = trace
            .requests
            .windows(2)
            .map(|w| w[1].usage.prompt() - w[0].usage.prompt())
            .sum();
        let muninn = added as f64 / (trace.requests.len() - 1) as f64;
        let rebuild: u64 = (1..s.turns.len())
            .map(|i| count(&rebuild_message(&s, i)))
            .sum();
        let rebuild = rebuild as f64 / (s.turns.len() - 1) as f64;
        assert!(
            muninn < 0.5 * rebuild,
            "{variant}: muninn adds {muninn:.0} tokens a turn, rebuild sends {rebuild:.0}"
        );
        // And per turn, what each design writes follows: rebuild rewrites its message every turn.
        let prices = PriceTable::embedded();
        let price = prices.model("claude-opus-5-5").unwrap();
        let c = persona::compare(&s, price, &config);
        let r = c.summary(Design::Rebuild(Ttl::OneHour)).unwrap();
        assert!(
            r.written_per_turn >= rebuild * 0.99,
            "{} vs {rebuild}",
            r.written_per_turn
        );
    }
}

#[test]
fn params_print_every_number() {
    let text = PersonaParams::default().to_string();
    for needle in [
        "25000",
        "98304",
        "500 turns",
        "1500",
        "50 turns",
        "200 tokens differ",
        "300",
        "200 turns",
        "400",
        "150",
        "80–400 (mean 200)",
        "3 public + 2 DMs",
        "10–120 (mean 40)",
        "8 senders",
        "2 operators",
        "2–15",
        "5.0 s–1.0 min",
        "25232",
        "2336",
        "1241",
        "10 × 1.0 h",
        "1.0 h",
        "2.0 min",
        "20.0 min–1.5 h",
        "30%",
        "70%",
        "20 context lines",
        "16384",
        "2.0 s",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}
