//! The renderer: append-only within a segment, byte by byte, across hundreds of turns with lower
//! layers changing in the middle; history shown once; breakpoints within the rules.

use muninn_core::cache::{CacheOutcome, CacheRules, CacheState, Prompt, Ttl};
use muninn_core::render::{Delivery, HistoryLine, Layers, Rendered, Renderer, TurnInput, extends};

fn layers() -> Layers {
    Layers {
        tools: Vec::new(),
        doctrine: "Doctrine. ".repeat(2_000),
        persona: "{\"name\": \"Vala\", \"mood\": \"curious\"}".into(),
        campaigns: "c1: open the archive".into(),
        memory: "Ari prefers short answers.".into(),
    }
}

/// The wire JSON with every `cache_control` removed, as text.
fn unmarked(body: &serde_json::Value) -> String {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.remove("cache_control");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = body.clone();
    strip(&mut v);
    v.to_string()
}

fn delivery(turn: usize, i: usize, room: &str) -> Delivery {
    // Each delivery carries the room's previous three lines as context, as the mouth does.
    let context = (turn.saturating_sub(3)..turn)
        .map(|t| HistoryLine {
            id: format!("{room}-{t}-0"),
            sender: format!("user{}", t % 5),
            text: format!("line {t} in {room}"),
        })
        .collect();
    Delivery {
        id: format!("{room}-{turn}-{i}"),
        room: room.into(),
        sender: format!("user{}", turn % 5),
        is_direct: room.starts_with('@'),
        to_you: turn.is_multiple_of(7),
        text: format!("message {turn}.{i} in {room}"),
        context,
    }
}

/// A rendered turn, its system and messages without markers, and the tokens it cached.
type Turn = (Rendered, (String, String), u64);

/// Lower layers change in the middle of the segment: the doctrine at turn 60, the persona at
/// every 50th turn from 25, the campaigns at turn 130.
fn change_lower_layers(current: &mut Layers, turn: usize) {
    if turn == 60 {
        current.doctrine.push_str(" Amended.");
    }
    if turn % 50 == 25 {
        current.persona = format!("{{\"name\": \"Vala\", \"mood\": \"mood{turn}\"}}");
    }
    if turn == 130 {
        current.campaigns.push_str("\nc2: map the caves");
    }
}

/// One to three deliveries in `room` and a status line that changes every ten turns.
fn turn_input(turn: usize, room: &str) -> TurnInput {
    TurnInput {
        deliveries: (0..1 + turn % 3).map(|i| delivery(turn, i, room)).collect(),
        status: format!("spend: ${}.00 of $50.00", turn / 10),
        text: String::new(),
    }
}

/// Turn `turn` (`rendered`, its unmarked `text`) extends the previous one, byte by byte, and
/// the cache model reads the whole previous prompt.
fn extends_byte_by_byte(
    previous: &Turn,
    rendered: &Rendered,
    text: &(String, String),
    outcome: &CacheOutcome,
    turn: usize,
) {
    let (prev, prev_text, prev_cached) = previous;
    assert!(
        extends(prev, rendered),
        "turn {turn} does not extend turn {}",
        turn - 1
    );
    // Byte by byte: the same system, and the previous messages array (without its closing
    // bracket) is a prefix of this one.
    assert_eq!(text.0, prev_text.0, "system changed at turn {turn}");
    let prev_messages = &prev_text.1[..prev_text.1.len() - 1];
    assert!(
        text.1.starts_with(prev_messages),
        "turn {turn} rewrote history"
    );
    // And the cache model sees it: the whole previous prompt is read.
    assert_eq!(outcome.read, *prev_cached, "turn {turn}");
    assert_eq!(outcome.miss, None);
}

#[test]
fn two_hundred_and_forty_turns_extend_each_other_byte_by_byte() {
    let mut current = layers();
    let mut renderer = Renderer::new(current.clone(), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let mut cache = CacheState::new();
    let rules = CacheRules::default();
    let mut previous: Option<Turn> = None;
    let mut now = 1_800_000_000_000i64;
    for turn in 0..240 {
        change_lower_layers(&mut current, turn);
        let room = if turn % 4 == 3 { "@ari" } else { "#swarm" };
        let rendered = renderer.turn(&current, &turn_input(turn, room));
        let wire = rendered.to_wire("claude-opus-5-5", 1024);
        // The system blocks and the messages, without markers, as bytes.
        let text = (unmarked(&wire["system"]), unmarked(&wire["messages"]));
        let (checkpoints, total) = rendered.checkpoints();
        let breakpoints = checkpoints
            .iter()
            .filter(|c| c.breakpoint.is_some())
            .count();
        assert!(breakpoints <= 4);
        let outcome = cache
            .apply(
                &Prompt {
                    model: "claude-opus-5-5",
                    checkpoints: &checkpoints,
                    total_tokens: total,
                },
                now,
                512,
                &rules,
            )
            .expect("the rules hold: at most 4 breakpoints, 1h before 5m");
        if let Some(previous) = &previous {
            extends_byte_by_byte(previous, &rendered, &text, &outcome, turn);
        }
        let cached = total;
        renderer.reply(&format!(
            "{{\"say\": [{{\"room\": \"{room}\", \"text\": \"reply {turn}\"}}]}}"
        ));
        previous = Some((rendered, text, cached));
        now += 30_000;
    }
    // The doctrine edit and persona updates were noticed inside the conversation, not rewritten.
    let last = renderer.rendered();
    let all: String = last
        .messages
        .iter()
        .flat_map(|m| m.blocks.iter().map(|b| b.text.clone()))
        .collect();
    assert_eq!(all.matches("[notice: the doctrine changed").count(), 1);
    assert_eq!(
        all.matches("[notice: your persona state changed").count(),
        5
    );
    assert_eq!(
        all.matches("[notice: the campaigns in force changed")
            .count(),
        1
    );
    assert_eq!(last.system[0].text, layers().doctrine);
}

#[test]
fn room_history_is_shown_once_per_segment() {
    let mut renderer = Renderer::new(layers(), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let lines: Vec<HistoryLine> = (0..20)
        .map(|i| HistoryLine {
            id: format!("e{i}"),
            sender: "ari".into(),
            text: format!("history {i}"),
        })
        .collect();
    let d = |id: &str, context: &[HistoryLine]| Delivery {
        id: id.into(),
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("new {id}"),
        context: context.to_vec(),
    };
    let first = renderer.turn(
        &layers(),
        &TurnInput {
            deliveries: vec![d("e20", &lines)],
            ..TurnInput::default()
        },
    );
    renderer.reply("ok");
    // The next delivery's 20 lines of context overlap the first's in 19 lines and include the
    // first delivery itself: only the one line never shown before is rendered.
    let mut next_context = lines[1..].to_vec();
    next_context.push(HistoryLine {
        id: "e20".into(),
        sender: "ari".into(),
        text: "new e20".into(),
    });
    let second = renderer.turn(
        &layers(),
        &TurnInput {
            deliveries: vec![d("e21", &next_context)],
            ..TurnInput::default()
        },
    );
    let first_text = &first.messages[0].blocks[0].text;
    renderer.reply("ok");
    let second_text = &second.messages[2].blocks[0].text;
    assert_eq!(first_text.matches("history").count(), 20);
    assert_eq!(second_text.matches("history").count(), 0);
    assert!(second_text.contains("new e21"));
    // The same event in another room is another line.
    let third = renderer.turn(
        &layers(),
        &TurnInput {
            deliveries: vec![Delivery {
                room: "#burn".into(),
                ..d("e22", &lines[..2])
            }],
            ..TurnInput::default()
        },
    );
    assert_eq!(
        third.messages[4].blocks[0].text.matches("history").count(),
        2
    );
}

#[test]
fn a_new_segment_starts_from_the_current_layers_and_reads_the_doctrine_from_cache() {
    let rules = CacheRules::default();
    let mut cache = CacheState::new();
    let mut current = layers();
    let mut r = Renderer::new(current.clone(), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let req = r.turn(
        &current,
        &TurnInput {
            text: "hello".into(),
            ..TurnInput::default()
        },
    );
    let (cps, total) = req.checkpoints();
    cache
        .apply(
            &Prompt {
                model: "m",
                checkpoints: &cps,
                total_tokens: total,
            },
            0,
            512,
            &rules,
        )
        .unwrap();
    current.persona = "{\"name\": \"Vala\", \"mood\": \"new\"}".into();
    current.memory = "Ari prefers long answers now.".into();
    let mut fresh = Renderer::new(current.clone(), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let req = fresh.turn(
        &current,
        &TurnInput {
            text: "hello again".into(),
            ..TurnInput::default()
        },
    );
    assert!(req.system[1].text.contains("long answers"));
    let (cps, total) = req.checkpoints();
    // Ten minutes later the 5m tail is gone but the 1h doctrine block is read.
    let outcome = cache
        .apply(
            &Prompt {
                model: "m",
                checkpoints: &cps,
                total_tokens: total,
            },
            600_000,
            512,
            &rules,
        )
        .unwrap();
    assert_eq!(outcome.read, cps[0].tokens);
}

#[test]
fn a_head_ttl_shorter_than_the_tail_is_refused() {
    assert!(Renderer::new(layers(), Ttl::FiveMinutes, Ttl::OneHour).is_err());
}

#[test]
fn a_renderer_rebuilt_from_recorded_turns_renders_the_next_turn_identically() {
    // The live renderer runs 30 turns with a persona edit noticed in the middle; a second one is
    // rebuilt from what was recorded (each user message verbatim, its shown keys, the layers
    // shown after it, each reply). Both must then render the next request byte for byte alike,
    // history still shown once and no notice repeated.
    let start = layers();
    let mut live = Renderer::new(start.clone(), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let mut current = start.clone();
    let mut recorded = Vec::new();
    for turn in 0..30 {
        if turn == 12 {
            current.persona = "{\"name\": \"Vala\", \"mood\": \"tired\"}".into();
        }
        let input = TurnInput {
            deliveries: vec![delivery(turn, 0, "#swarm"), delivery(turn, 1, "#burn")],
            ..TurnInput::default()
        };
        let user = live.append_turn(&current, &input).blocks[0].text.clone();
        let reply = format!("reply {turn}");
        live.reply(&reply);
        recorded.push((
            user,
            Renderer::shown_keys(&input),
            live.shown().clone(),
            reply,
        ));
    }
    let mut rebuilt = Renderer::new(start, Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    for (user, keys, shown, reply) in recorded {
        rebuilt.push_user(&user);
        rebuilt.mark_shown(keys);
        rebuilt.restore_shown(shown);
        rebuilt.reply(&reply);
    }
    assert_eq!(live.rendered(), rebuilt.rendered());
    assert_eq!(live.conversation_text(), rebuilt.conversation_text());
    let next = TurnInput {
        deliveries: vec![delivery(30, 0, "#swarm")],
        ..TurnInput::default()
    };
    let a = live.turn(&current, &next);
    let b = rebuilt.turn(&current, &next);
    assert_eq!(a, b);
    let last = &b.messages.last().unwrap().blocks[0].text;
    assert!(!last.contains("notice"), "{last}");
    assert!(!last.contains("line 28 in #swarm"), "shown before: {last}");
    // Without the shown keys the history would be shown again: the keys are what matters.
    let mut forgetful = Renderer::new(layers(), Ttl::OneHour, Ttl::FiveMinutes).unwrap();
    let c = forgetful.turn(&current, &next);
    assert!(c.messages[0].blocks[0].text.contains("line 28 in #swarm"));
}
