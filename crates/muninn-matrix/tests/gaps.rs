//! A gap longer than `max_gap_events`: the events past the limit are skipped, and the account's
//! record of its cuts (how many, the last one's room, time and events read) says so, for
//! `muninn status` to show. (Forward paging cut at its limit is in `faults::memberships`.)

use super::*;
use pretty_assertions::assert_eq;

/// Three messages while the sync is held (the Mind one delivery behind), a timeline of one
/// event and a limit of one event on the gap paged back: the newest two are mail, the oldest is
/// skipped, and the cut is recorded for the account, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backward_paging_cut_at_its_limit_is_recorded_for_the_account() {
    backward_cut("backcut", 0).await;
}

/// As above, the store refusing the commit of the answer that cut the gap: the answer is read
/// again and cuts the same gap again, and the cut is counted once, when it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_read_again_after_a_refused_commit_is_recorded_once() {
    backward_cut("backcutretry", 1).await;
}

/// The boundary of `max_gap_events` paging back: the same gap of two events (the timeline
/// holding the third) with a limit of two, exactly its length, and of three, one more. Nothing
/// is skipped: all of it is mail and no cut is recorded (the limit one under the gap is
/// `backward_paging_cut_at_its_limit_is_recorded_for_the_account`). Before, a gap exactly as
/// long as the limit was recorded as cut, and logged at error, though it was read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_paged_back_whole_at_or_under_its_limit_is_not_a_cut() {
    for max in [2, 3] {
        let Some(gap) = backward_gap(&format!("backwhole{max}"), 0, max).await else {
            return;
        };
        assert_eq!(
            (gap.mail, gap.stats.gaps_cut, gap.gaps),
            (vec!["m0", "m1", "m2", "m3"], 0, None),
            "a gap of 2 with a limit of {max}"
        );
    }
}

/// The backward cut at a limit of one event, the commit of the answer that cuts it refused
/// `refusals` times.
async fn backward_cut(test: &str, refusals: u32) {
    let started = now_ms();
    let Some(gap) = backward_gap(test, refusals, 1).await else {
        return;
    };
    assert_eq!(
        gap.mail,
        vec!["m0", "m2", "m3"],
        "the timeline and the one event the limit let in"
    );
    assert_eq!(gap.stats.gaps_cut, 1);
    let gaps = gap.gaps.expect("the account's record");
    assert!((started..=now_ms()).contains(&gaps.last.at_ms), "{gaps:?}");
    assert_eq!(
        gaps,
        GapsCut {
            count: 1,
            last: muninn_matrix::GapCut {
                room_id: gap.room,
                at_ms: gaps.last.at_ms,
                events_read: 1,
            },
        }
    );
    assert_eq!(gap.others, None, "another Mind's record");
}

/// What one backward gap came to.
struct BackwardGap {
    room: String,
    /// The mail's texts, in order.
    mail: Vec<&'static str>,
    stats: StatsSnapshot,
    /// The account's record of its cuts.
    gaps: Option<GapsCut>,
    /// Another Mind's record.
    others: Option<GapsCut>,
}

/// Three messages (`m1`, `m2`, `m3`) while the sync is held (the Mind one delivery behind), a
/// timeline of one event and a limit of `max_gap_events` on the gap of two paged back, the
/// commit of the answer refused `refusals` times.
async fn backward_gap(test: &str, refusals: u32, max_gap_events: usize) -> Option<BackwardGap> {
    let rig = rig(test).await?;
    let name = alias(test);
    let room = rig.public_room(&name).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    let running = rig.start_on(faulty.clone(), &[&format!("#{name}")], |c| {
        c.timeline_limit = 1;
        c.max_gap_events = max_gap_events;
        c.max_pending = 1;
    });
    rig.first_sync().await;
    // One unanswered message holds the sync (no long poll open, whose answer Synapse would
    // keep for the same position) while three more are said.
    rig.human.send(&room, "m0", &[]).await;
    let held = rig.mail_count(1).await;
    let said = ["m0", "m1", "m2", "m3"];
    for text in &said[1..] {
        rig.human.send(&room, text, &[]).await;
    }
    assert_eq!(running.stats.gaps_cut_of(MIND), None, "nothing cut yet");
    faulty.fail_batches(refusals);
    rig.store
        .ack_through(MIND, rig.token, held[0].seq)
        .await
        .unwrap();
    let mail = eventually("m3", Duration::from_secs(30), || async {
        let now = rig.mail().await;
        now.iter().any(|d| d.text == "m3").then_some(now)
    })
    .await;
    let counts = running.stats.clone();
    let stats = running.stop().await;
    assert_eq!(faulty.refused(), refusals);
    let mail = mail
        .iter()
        .map(|d| *said.iter().find(|s| **s == d.text).expect("a message said"))
        .collect();
    Some(BackwardGap {
        room,
        mail,
        stats,
        gaps: counts.gaps_cut_of(MIND),
        others: counts.gaps_cut_of("another mind"),
    })
}

/// The bot kicked from a configured room (the leave committed), more said while it is out and
/// its connector down than `max_gap_events`, and the room joined again by the next start: the
/// room is new to that process, so the forward pages (cut at one event, not reaching a timeline
/// of two) serve only to learn that the bot was out at the position and are set aside; the room
/// is read as a new one from its join. Nothing the bot could have had as mail was skipped, so no
/// cut is recorded (before, the set-aside pages' cut was counted and logged at error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_pages_set_aside_for_a_room_joined_again_record_no_cut() {
    let Some(rig) = rig("rejoinnew").await else {
        return;
    };
    let name = alias("rejoinnew");
    let room = rig.public_room(&name).await;
    let rooms = [format!("#{name}")];
    let rooms: Vec<&str> = rooms.iter().map(String::as_str).collect();
    let running = rig.start(&rooms, |_| {});
    rig.first_sync().await;
    rig.human.send(&room, "m0", &[]).await;
    rig.mail_count(1).await;
    let before_kick = rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap();
    rig.human.kick(&room, &rig.bot).await;
    eventually("the kick committed", Duration::from_secs(30), || async {
        let now = rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap();
        (now.map(|c| c.value) != before_kick.as_ref().map(|c| c.value.clone())).then_some(())
    })
    .await;
    running.stop().await;
    for text in ["out 1", "out 2", "out 3"] {
        rig.human.send(&room, text, &[]).await;
    }
    let running = rig.start(&rooms, |c| {
        c.timeline_limit = 2;
        c.max_gap_events = 1;
    });
    rig.bot_joined(&room).await;
    rig.human.send(&room, "m1, after it is back", &[]).await;
    let mail = eventually("m1", Duration::from_secs(30), || async {
        let now = rig.mail().await;
        now.iter().any(|d| d.text.starts_with("m1")).then_some(now)
    })
    .await;
    let counts = running.stats.clone();
    let stats = running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "m1, after it is back"],
        "mail while the bot was in the room, once"
    );
    assert_eq!((stats.gaps_cut, counts.gaps_cut_of(MIND)), (0, None));
}

/// A room joined while the sync is held, a timeline of two and a limit of two events on the
/// gap paged back, which holds exactly one message and the join: paging stops at the join, the
/// limit's last event, so nothing older was skipped and no cut is recorded (before, reaching
/// the limit was taken for a cut even when the event paging looked for was the last one read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backward_paging_that_finds_the_join_at_its_limit_records_no_cut() {
    let Some(rig) = rig("joinatlimit").await else {
        return;
    };
    let name = alias("joinatlimit");
    let room = rig.public_room(&name).await;
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.max_pending = 1;
        c.timeline_limit = 2;
        c.max_gap_events = 2;
    });
    rig.first_sync().await;
    rig.human.send(&room, "m0", &[]).await;
    let held = rig.mail_count(1).await;
    // While the sync is held, the bot's owner joins it to a second room, where the person
    // writes three messages: two for the timeline, one for the gap before them.
    let other = rig
        .human
        .create_room(Some(&alias("joinatlimit-b")), &[], false)
        .await;
    rig.human.send(&other, "before the bot", &[]).await;
    rig.bot_user.join(&other).await;
    for text in ["b0", "b1", "b2"] {
        rig.human.send(&other, text, &[]).await;
    }
    rig.store
        .ack_through(MIND, rig.token, held[0].seq)
        .await
        .unwrap();
    let mail = rig.mail_count(4).await;
    let counts = running.stats.clone();
    let stats = running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "b0", "b1", "b2"],
        "every message after the join, once"
    );
    assert_eq!((stats.gaps_cut, counts.gaps_cut_of(MIND)), (0, None));
}

/// The bot kicked and back within one answer, three messages before the kick, forward paging
/// from the position cut at its first event and a timeline of five, which holds the third
/// message, the kick and what follows but not the first two (the second is skipped): the
/// timeline follows the pages, so what it holds before the kick is mail too (before, the
/// timeline was read from the kick on and 'm2' was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_cut_keeps_the_timelines_mail_before_the_kick() {
    let expected = [
        "m0",
        "m1, paged",
        "m2, before the kick",
        "m3, after it is back",
    ];
    forward_cut_and_kick("cutbeforekick", 5, &expected).await;
}

/// As above with a timeline of three, which starts after the kick: the kick and 'm2' are in
/// the gap skipped (with the second message), and what the timeline holds before the re-join was said while the bot was
/// out (its re-join says so), which is not mail though the pages saw the bot in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_cut_past_the_kick_keeps_what_was_said_while_out_out_of_the_mail() {
    let expected = ["m0", "m1, paged", "m3, after it is back"];
    forward_cut_and_kick("cutpastkick", 3, &expected).await;
}

/// Forward paging cut at one event in an answer with three messages, a kick, one message while
/// the bot is out, its re-join and one more; the timeline holds the last `timeline_limit`, so
/// the gap before it is longer than the limit (a gap of one event, the limit's length, would
/// skip nothing and be no cut: `faults::memberships::forward_paging_at_the_boundary_…`).
async fn forward_cut_and_kick(test: &str, timeline_limit: u32, expected: &[&str]) {
    let Some(rig) = rig(test).await else {
        return;
    };
    let name = alias(test);
    let room = rig.public_room(&name).await;
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.max_pending = 1;
        c.timeline_limit = timeline_limit;
        c.max_gap_events = 1;
    });
    rig.first_sync().await;
    // One unanswered message holds the sync while the bot is kicked and its owner joins it back.
    rig.human.send(&room, "m0", &[]).await;
    let held = rig.mail_count(1).await;
    rig.human.send(&room, "m1, paged", &[]).await;
    rig.human.send(&room, "between, skipped", &[]).await;
    rig.human.send(&room, "m2, before the kick", &[]).await;
    rig.human.kick(&room, &rig.bot).await;
    rig.human.send(&room, "while the bot is out", &[]).await;
    rig.bot_user.join(&room).await;
    rig.human.send(&room, "m3, after it is back", &[]).await;
    rig.store
        .ack_through(MIND, rig.token, held[0].seq)
        .await
        .unwrap();
    let mail = eventually("m3", Duration::from_secs(30), || async {
        let now = rig.mail().await;
        now.iter().any(|d| d.text.starts_with("m3")).then_some(now)
    })
    .await;
    let counts = running.stats.clone();
    running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        expected,
        "mail while the bot was in the room, once"
    );
    assert_eq!(counts.gaps_cut_of(MIND).map(|g| g.count), Some(1));
}
