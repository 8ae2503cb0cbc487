#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const OWN: &str = "@vala:hs";

fn message(id: &str, sender: &str, text: &str, ts: i64) -> RoomEvent {
    serde_json::from_value(json!({
        "event_id": id, "type": "m.room.message", "sender": sender, "origin_server_ts": ts,
        "content": {"msgtype": "m.text", "body": text}
    }))
    .unwrap()
}

fn member(id: &str, user: &str, membership: &str) -> RoomEvent {
    serde_json::from_value(json!({
        "event_id": id, "type": "m.room.member", "sender": "@ann:hs", "state_key": user,
        "origin_server_ts": 1, "content": {"membership": membership}
    }))
    .unwrap()
}

fn line(id: &str, sender: &str, text: &str) -> ContextLine {
    ContextLine {
        id: Some(id.into()),
        sender: sender.into(),
        text: text.into(),
    }
}

const LIMITS: Limits = Limits {
    lines: 3,
    bytes: 1000,
};

fn nothing_held(_: &Line) -> bool {
    false
}

#[test]
fn mail_carries_the_lines_before_it_and_the_first_sync_is_history() {
    let public = RoomKind::Public {
        name: "#swarm".into(),
    };
    let mut window = Window::new(12, Some("t0".into()));
    // The first sync: everything is history.
    let history = [
        message("$1", "@ann:hs", "one", 1),
        message("$2", OWN, "two (mine)", 2),
        message("$3", "@bob:hs", "three", 3),
    ];
    let chunk = Chunk {
        room_id: "!s:hs",
        kind: &public,
        events: &history,
        out_at_start: false,
        mail_from: history.len(),
    };
    assert_eq!(
        read_chunk(&mut window, &chunk, OWN, LIMITS, &nothing_held, 9),
        vec![]
    );
    // Then mail: each message from someone else, with up to three lines before it; the
    // account's own message is never mail.
    let later = [
        message("$4", "@ann:hs", "four", 4),
        message("$5", OWN, "five (mine)", 5),
        message("$6", "@bob:hs", "six <@vala:hs>", 6),
    ];
    let chunk = Chunk {
        room_id: "!s:hs",
        kind: &public,
        events: &later,
        out_at_start: false,
        mail_from: 0,
    };
    let mail = read_chunk(&mut window, &chunk, OWN, LIMITS, &nothing_held, 9);
    assert_eq!(mail.len(), 2);
    let (ts, four) = &mail[0];
    assert_eq!(*ts, 4);
    assert_eq!(
        four,
        &NewDelivery {
            room: "#swarm".into(),
            sender: "@ann:hs".into(),
            is_direct: false,
            to_you: false,
            text: "four".into(),
            source_id: "$4".into(),
            received_at_ms: 9,
            context: vec![
                line("$1", "@ann:hs", "one"),
                line("$2", OWN, "two (mine)"),
                line("$3", "@bob:hs", "three"),
            ],
        }
    );
    let six = &mail[1].1;
    assert!(six.to_you, "the user id in the text addresses the Mind");
    assert_eq!(
        six.context,
        vec![
            line("$3", "@bob:hs", "three"),
            line("$4", "@ann:hs", "four"),
            line("$5", OWN, "five (mine)"),
        ]
    );
    // Reading the same events again (a retried batch) gives the same context: the lines
    // before each event, not after.
    let again = read_chunk(&mut window, &chunk, OWN, LIMITS, &nothing_held, 9);
    assert_eq!(again, mail);
}

#[test]
fn context_leaves_out_what_the_segment_holds_and_keeps_to_its_bounds() {
    let mut window = Window::new(10, None);
    for (i, sender) in [(1, "@ann:hs"), (2, OWN), (3, "@ann:hs"), (4, OWN)] {
        window.push(Line {
            id: format!("${i}"),
            sender: sender.into(),
            text: format!("line {i}"),
            ts: i,
        });
    }
    // The Mind's own words from ts 3 on are in its segment's transcript.
    let held = |l: &Line| l.sender == OWN && l.ts >= 3;
    assert_eq!(
        window.context("$new", LIMITS, held),
        vec![
            line("$1", "@ann:hs", "line 1"),
            line("$2", OWN, "line 2"),
            line("$3", "@ann:hs", "line 3"),
        ]
    );
    // Bytes bound: the newest lines that fit.
    let tight = Limits {
        lines: 10,
        bytes: "@ann:hsline 3".len() + OWN.len() + "line 4".len(),
    };
    assert_eq!(
        window.context("$new", tight, nothing_held),
        vec![line("$3", "@ann:hs", "line 3"), line("$4", OWN, "line 4")]
    );
    // Before a held event: only what precedes it.
    assert_eq!(
        window.context("$2", LIMITS, nothing_held),
        vec![line("$1", "@ann:hs", "line 1")]
    );
}

#[test]
fn a_window_keeps_its_newest_lines_and_is_backfilled_once() {
    let mut window = Window::new(3, Some("t-before".into()));
    assert_eq!(window.needs_backfill(LIMITS), Some("t-before"));
    let l = |i: i64| Line {
        id: format!("${i}"),
        sender: "@ann:hs".into(),
        text: format!("{i}"),
        ts: i,
    };
    window.push(l(5));
    window.push(l(5));
    window.prepend(vec![l(3), l(4)], None);
    assert_eq!(window.needs_backfill(LIMITS), None, "asked once");
    window.push(l(6));
    assert!(!window.holds("$3") && window.holds("$4") && window.holds("$6"));
    assert_eq!(
        window
            .context("$x", LIMITS, nothing_held)
            .iter()
            .map(|c| c.text.as_str())
            .collect::<Vec<_>>(),
        vec!["4", "5", "6"]
    );
}

#[test]
fn a_new_rooms_mail_starts_after_the_invite_or_the_join() {
    let invited = [
        message("$old", "@ann:hs", "before the invite", 1),
        member("$inv", OWN, "invite"),
        message("$hi", "@ann:hs", "hi, sent while invited", 2),
        member("$join", OWN, "join"),
        message("$more", "@ann:hs", "more", 3),
    ];
    assert_eq!(mail_start(&invited, OWN), Some(2));
    let joined = [
        message("$old", "@ann:hs", "history", 1),
        member("$other", "@bob:hs", "join"),
        member("$join", OWN, "join"),
        message("$new", "@ann:hs", "new", 2),
    ];
    assert_eq!(mail_start(&joined, OWN), Some(3));
    // Left and came back uninvited: the latest join counts, not the old invite.
    let rejoined = [
        member("$inv", OWN, "invite"),
        member("$join1", OWN, "join"),
        member("$leave", OWN, "leave"),
        message("$between", "@ann:hs", "while away", 2),
        member("$join2", OWN, "join"),
    ];
    assert_eq!(mail_start(&rejoined, OWN), Some(5));
    assert_eq!(mail_start(&joined[..2], OWN), None);
    // A profile change after the join (a join whose previous membership was a join) is not
    // where the mail starts: what came between is mail.
    let mut renamed = member("$rename", OWN, "join");
    renamed.unsigned = json!({"prev_content": {"membership": "join"}});
    let profile = [
        message("$old", "@ann:hs", "history", 1),
        member("$join", OWN, "join"),
        message("$first", "@ann:hs", "first", 2),
        renamed,
        message("$second", "@ann:hs", "second", 3),
    ];
    assert_eq!(mail_start(&profile, OWN), Some(2));
    // Paging back stops at neither the profile change nor the join, but at a join that
    // followed no invite.
    assert!(!settles_mail_start(&profile[3], OWN) && settles_mail_start(&profile[1], OWN));
    // A join over an invite the events do not hold: what came before it was sent while the
    // account was invited, so the invite is to be found further back (not the join taken).
    let mut join = member("$join", OWN, "join");
    join.unsigned = json!({"prev_content": {"membership": "invite"}});
    assert!(!settles_mail_start(&join, OWN));
    assert!(settles_mail_start(&invited[1], OWN));
    let late = [message("$hi", "@ann:hs", "sent while invited", 2), join];
    assert_eq!(mail_start(&late, OWN), None);
    assert_eq!(after_join(&late, OWN), Some(2));
}

#[test]
fn direct_mail_is_named_by_its_room_and_content_is_read_as_people_see_it() {
    let direct = RoomKind::Direct;
    let events: Vec<RoomEvent> = [
        json!({"msgtype": "m.emote", "body": "waves"}),
        json!({"msgtype": "m.image", "body": "cat.png"}),
        json!({"msgtype": "m.text", "body": "* fixed", "m.new_content": {"msgtype": "m.text", "body": "fixed"},
               "m.relates_to": {"rel_type": "m.replace", "event_id": "$0"}}),
        json!({"msgtype": "m.text", "body": "hey", "m.mentions": {"user_ids": [OWN]}}),
        json!({}),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, content)| {
        serde_json::from_value(json!({"event_id": format!("${i}"), "type": "m.room.message",
            "sender": "@ann:hs", "origin_server_ts": i, "content": content}))
        .unwrap()
    })
    .collect();
    let chunk = Chunk {
        room_id: "!dm:hs",
        kind: &direct,
        events: &events,
        out_at_start: false,
        mail_from: 0,
    };
    let mut window = Window::new(10, None);
    let mail = read_chunk(&mut window, &chunk, OWN, LIMITS, &nothing_held, 0);
    let seen: Vec<(&str, bool, bool, &str)> = mail
        .iter()
        .map(|(_, d)| (d.room.as_str(), d.is_direct, d.to_you, d.text.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("!dm:hs", true, false, "* waves"),
            ("!dm:hs", true, false, "[m.image] cat.png"),
            ("!dm:hs", true, false, "(edited) fixed"),
            ("!dm:hs", true, true, "hey"),
        ],
        "a redacted message (no body) is not mail"
    );
}

#[test]
fn rooms_interleave_by_time_but_each_keeps_its_timeline_order() {
    let d = |room: &str, id: &str| NewDelivery {
        room: room.into(),
        sender: "@ann:hs".into(),
        is_direct: false,
        to_you: false,
        text: id.into(),
        source_id: id.into(),
        received_at_ms: 0,
        context: Vec::new(),
    };
    // Room a's second message carries an earlier time than its first (concurrent senders):
    // the timeline's order stands.
    let a = vec![(10, d("#a", "a1")), (5, d("#a", "a2")), (30, d("#a", "a3"))];
    let b = vec![(7, d("#b", "b1")), (20, d("#b", "b2"))];
    let merged: Vec<String> = merge_rooms(vec![a, b])
        .into_iter()
        .map(|d| d.source_id)
        .collect();
    assert_eq!(merged, vec!["b1", "a1", "a2", "b2", "a3"]);
}

#[test]
fn what_is_said_while_the_account_is_out_of_the_room_is_history() {
    let mut kick = member("$kick", OWN, "leave");
    kick.unsigned = json!({"prev_content": {"membership": "join"}});
    let mut back = member("$back", OWN, "join");
    back.unsigned = json!({"prev_content": {"membership": "leave"}});
    let events = [
        message("$m1", "@ann:hs", "before the kick", 1),
        kick,
        message("$out", "@ann:hs", "while out", 2),
        back,
        message("$m2", "@ann:hs", "after the re-join", 3),
    ];
    // In at the start (its first membership event was a kick out of a join) ...
    assert_eq!(out_before(&events, OWN), Some(false));
    assert!(changes_membership(&events[1], OWN) && changes_membership(&events[3], OWN));
    let public = RoomKind::Public {
        name: "#swarm".into(),
    };
    let texts = |out_at_start: bool| {
        let chunk = Chunk {
            room_id: "!s:hs",
            kind: &public,
            events: &events,
            out_at_start,
            mail_from: 0,
        };
        let mut window = Window::new(10, None);
        read_chunk(&mut window, &chunk, OWN, LIMITS, &nothing_held, 0)
            .into_iter()
            .map(|(_, d)| d.text)
            .collect::<Vec<_>>()
    };
    assert_eq!(texts(false), vec!["before the kick", "after the re-join"]);
    // ... and out at the start: only what follows its join.
    assert_eq!(texts(true), vec!["after the re-join"]);
    let mut renamed = member("$rename", OWN, "join");
    renamed.unsigned = json!({"prev_content": {"membership": "join"}});
    assert!(!changes_membership(&renamed, OWN));
    let returns = |e: &RoomEvent| leaves_or_returns(e, OWN);
    assert!(returns(&events[1]) && returns(&events[3]) && !returns(&renamed));
    assert!(!returns(&member("$join", OWN, "join")) && !returns(&member("$inv", OWN, "invite")));
    assert!(!returns(&member("$other", "@bob:hs", "leave")));
    assert!(joined_before(&events, OWN) && !joined_before(&events[2..], OWN));
    assert!(!joined_before(&events[4..], OWN));
    assert_eq!(out_before(&events[2..], OWN), Some(true));
    assert_eq!(out_before(&events[4..], OWN), None);
}
