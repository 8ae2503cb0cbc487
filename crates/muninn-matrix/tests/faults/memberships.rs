//! The account's memberships changing under the connector: a kick in an answer, a kick and a
//! re-join (in one answer, in the gap, while stopped), an invite back, a profile change in a new
//! room's gap, and the forward pages such a room is read with, cut at their limit.

use crate::*;
use pretty_assertions::assert_eq;

/// A message said just before the bot is kicked, in the same answer as the kick: the room is
/// among the answer's left rooms, not its joined ones, and the message is mail all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_said_before_a_kick_in_the_same_answer_is_mail() {
    let Some(rig) = rig("kick").await else {
        return;
    };
    let name = alias("kick");
    let room = rig.public_room(&name).await;
    let running = rig.start(&[&format!("#{name}")], |c| c.max_pending = 1);
    rig.first_sync().await;
    // One unanswered message holds the sync while another is said and the bot is kicked.
    let mut said = vec![rig.human.send(&room, "m0", &[]).await];
    let first = rig.mail_count(1).await;
    said.push(rig.human.send(&room, "m1, before the kick", &[]).await);
    rig.human.kick(&room, &rig.bot).await;
    let held_at = rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap();
    rig.store
        .ack_through(MIND, rig.token, first[0].seq)
        .await
        .unwrap();
    // The first answer after the hold holds both m1 and the kick.
    eventually("the kick committed", Duration::from_secs(30), || async {
        let now = rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap();
        (now.map(|c| c.value) != held_at.as_ref().map(|c| c.value.clone())).then_some(())
    })
    .await;
    let mail = rig.mail().await;
    running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "m1, before the kick"],
        "every message said while the bot was in the room, once"
    );
}

/// A room joined while the sync is held, and more said since than a timeline holds, with a
/// profile change of the bot's between: the gap is paged back past it to the join, and every
/// message after the join is mail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rooms_gap_is_paged_back_past_a_profile_change_to_the_join() {
    let Some(rig) = rig("rename").await else {
        return;
    };
    let name = alias("rename");
    let room = rig.public_room(&name).await;
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.max_pending = 1;
        c.timeline_limit = 2;
    });
    rig.first_sync().await;
    let first = vec![rig.human.send(&room, "m0", &[]).await];
    let held = rig.mail_count(1).await;
    // While the sync is held, the bot's owner joins it to a second room, where the person
    // writes before and after the bot's profile change.
    let other = rig
        .human
        .create_room(Some(&alias("rename-b")), &[], false)
        .await;
    rig.human.send(&other, "before the bot", &[]).await;
    rig.bot_user.join(&other).await;
    let mut said = first;
    said.push(rig.human.send(&other, "b0", &[]).await);
    rig.bot_user.set_display_name("Vala, renamed").await;
    // Synapse updates the bot's membership in each room in the background after it answers.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in 1..4 {
        said.push(rig.human.send(&other, &format!("b{n}"), &[]).await);
    }
    rig.store
        .ack_through(MIND, rig.token, held[0].seq)
        .await
        .unwrap();
    let mail = rig.mail_count(5).await;
    running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "b0", "b1", "b2", "b3"],
        "every message after the join, once; the one before it context"
    );
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        said.iter().map(String::as_str).collect::<Vec<_>>()
    );
}

/// The bot kicked and back within one answer: what was said before the kick is mail, what was
/// said while it was out is not, what was said after it came back is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_and_a_rejoin_in_one_answer_keep_the_mail_before_the_kick() {
    kick_and_rejoin("rejoin", 50).await;
}

/// As above, with less room in the timeline than was said after the re-join: the kick and the
/// re-join are found only in the gap paged back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_and_a_rejoin_only_in_the_gap_keep_the_mail_before_the_kick() {
    kick_and_rejoin("rejoingap", 1).await;
}

/// As above, with forward paging from the position cut at its first event (the limit stands
/// for 5,000 events of a very busy room) and a timeline of two events that does not reach back
/// to it (the kick and what was said while the bot was out are skipped): the timeline is read
/// on from the account's own membership events, what was said before the kick is still mail,
/// and the cut is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_paging_cut_at_its_limit_is_counted_and_keeps_the_mail_it_read() {
    let started = now_ms();
    let Some((stats, gaps)) = kick_and_rejoin_with("rejoincut", 2, 1).await else {
        return;
    };
    assert_eq!(stats.gaps_cut, 1, "the cut is counted");
    let gaps = gaps.expect("the account's record of its cut");
    assert_eq!(gaps.count, 1);
    assert_eq!(gaps.last.events_read, 1, "cut after the limit's one event");
    assert!(gaps.last.room_id.starts_with('!'), "{gaps:?}");
    assert!((started..=now_ms()).contains(&gaps.last.at_ms), "{gaps:?}");
}

/// As above with the timeline of fifty, which reaches back past the position: the pages cut at
/// one event stop inside it, so nothing between is skipped and no cut is counted; the timeline is
/// read on from the last event they share (before, the pages were taken for cut and its old
/// invite, read after them, said the bot was out at the position: 'm1' was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_pages_cut_inside_a_timeline_that_reaches_back_skip_nothing() {
    if let Some((stats, gaps)) = kick_and_rejoin_with("rejoininside", 50, 1).await {
        assert_eq!((stats.gaps_cut, gaps), (0, None));
    }
}

/// The boundary of forward paging: the same gap of three events (m1, the kick, what was said
/// while the bot was out) before a timeline of two (the re-join, m2), with a limit of two (one
/// under: cut after two events), three (exactly its length) and four (one more). At three the
/// page after the limit is the timeline's first event: nothing was skipped and no cut is
/// counted (before, it was, and logged at error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_paging_at_the_boundary_of_its_limit_counts_only_a_real_cut() {
    for (max, cut) in [(2, Some(2)), (3, None), (4, None)] {
        let test = format!("rejoinlimit{max}");
        let Some((stats, gaps)) = kick_and_rejoin_with(&test, 2, max).await else {
            return;
        };
        let read = gaps.map(|g| g.last.events_read);
        assert_eq!(
            (stats.gaps_cut, read),
            (u64::from(cut.is_some()), cut),
            "a limit of {max}"
        );
    }
}

async fn kick_and_rejoin(test: &str, timeline_limit: u32) {
    if let Some((stats, gaps)) = kick_and_rejoin_with(test, timeline_limit, 5_000).await {
        assert_eq!((stats.gaps_cut, gaps), (0, None));
    }
}

/// The connector's counts and the account's gaps cut (`None`: no Synapse here).
async fn kick_and_rejoin_with(
    test: &str,
    timeline_limit: u32,
    max_gap_events: usize,
) -> Option<(StatsSnapshot, Option<GapsCut>)> {
    let rig = rig(test).await?;
    let name = alias(test);
    let room = rig.human.create_room(Some(&name), &[], false).await;
    rig.human
        .send(&room, "before the bot was invited", &[])
        .await;
    rig.human.invite(&room, &rig.bot).await;
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.max_pending = 1;
        c.timeline_limit = timeline_limit;
        c.max_gap_events = max_gap_events;
    });
    rig.first_sync().await;
    // One unanswered message holds the sync while the bot is kicked and its owner joins it
    // back.
    rig.human.send(&room, "m0", &[]).await;
    let held = rig.mail_count(1).await;
    rig.human.send(&room, "m1, before the kick", &[]).await;
    rig.human.kick(&room, &rig.bot).await;
    rig.human.send(&room, "while the bot is out", &[]).await;
    rig.bot_user.join(&room).await;
    rig.human.send(&room, "m2, after it is back", &[]).await;
    rig.store
        .ack_through(MIND, rig.token, held[0].seq)
        .await
        .unwrap();
    let mail = rig.mail_count(2).await;
    // A batch more, so that a delivery the answer should not have made would be there by now.
    rig.store
        .ack_through(MIND, rig.token, mail.last().unwrap().seq)
        .await
        .unwrap();
    rig.human.send(&room, "m3", &[]).await;
    let mail = eventually("m3", Duration::from_secs(30), || async {
        let now = rig.mail().await;
        (now.len() > mail.len() && now.iter().any(|d| d.text == "m3")).then_some(now)
    })
    .await;
    let counts = running.stats.clone();
    let stats = running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "m1, before the kick", "m2, after it is back", "m3"],
        "mail while the bot was in the room, once"
    );
    Some((stats, counts.gaps_cut_of(MIND)))
}

/// The bot kicked from a configured room while its connector is down, and joined back by the
/// next start: the room is not among those the new process was in, yet it was in it at the
/// stored position, so what was said before the kick is mail (and what was said while it was
/// out is not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_while_stopped_and_the_rejoin_at_start_keep_the_mail_before_the_kick() {
    kick_while_stopped("restartkick", 40).await;
}

/// As above, with a timeline of one event: the answer holds the re-join, the kick is in the gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_while_stopped_only_in_the_gap_keeps_the_mail_before_the_kick() {
    kick_while_stopped("restartkickgap", 1).await;
}

async fn kick_while_stopped(test: &str, timeline_limit: u32) {
    let Some(rig) = rig(test).await else {
        return;
    };
    let name = alias(test);
    let room = rig.public_room(&name).await;
    let rooms = [format!("#{name}")];
    let rooms: Vec<&str> = rooms.iter().map(String::as_str).collect();
    let running = rig.start(&rooms, |_| {});
    rig.first_sync().await;
    rig.human.send(&room, "m0", &[]).await;
    rig.mail_count(1).await;
    running.stop().await;
    rig.human.send(&room, "m1, before the kick", &[]).await;
    rig.human.kick(&room, &rig.bot).await;
    rig.human.send(&room, "while the bot is out", &[]).await;
    // The next start joins its configured room again. (Another timeline limit than 50: Synapse
    // answers a `/sync` asked again with the same filter and position from its cache, and the
    // first process's last long poll, cut short, got m1 alone.)
    let running = rig.start(&rooms, |c| c.timeline_limit = timeline_limit);
    rig.bot_joined(&room).await;
    rig.human.send(&room, "m2, after it is back", &[]).await;
    let mail = eventually("m2", Duration::from_secs(30), || async {
        let now = rig.mail().await;
        now.iter().any(|d| d.text.starts_with("m2")).then_some(now)
    })
    .await;
    running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "m1, before the kick", "m2, after it is back"],
        "mail while the bot was in the room, once"
    );
}

/// The bot kicked from a configured room, invited back and written to while invited (all while
/// its sync is held): the room is new again, and what was said while it was invited is mail,
/// though its timeline shows the earlier kick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_said_while_invited_back_after_a_kick_is_mail() {
    invited_back("reinvite", 5_000).await;
}

/// As above, the forward pages cut at one event: they stop inside the timeline, which reaches
/// back, so nothing lies between them and nothing is skipped or recorded as cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_pages_cut_inside_the_timeline_skip_nothing() {
    invited_back("reinvitecut", 1).await;
}

async fn invited_back(test: &str, max_gap_events: usize) {
    let Some(rig) = rig(test).await else {
        return;
    };
    let name = alias(test);
    let room = rig.public_room(&name).await;
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.max_pending = 1;
        c.max_gap_events = max_gap_events;
    });
    rig.first_sync().await;
    rig.human.send(&room, "m0", &[]).await;
    let held = rig.mail_count(1).await;
    rig.human.send(&room, "m1, before the kick", &[]).await;
    rig.human.kick(&room, &rig.bot).await;
    rig.store
        .ack_through(MIND, rig.token, held[0].seq)
        .await
        .unwrap();
    let held = rig.mail_count(2).await;
    // Held again by m1: the invite and what follows it come in one answer.
    rig.human.invite(&room, &rig.bot).await;
    rig.human.send(&room, "m2, while invited", &[]).await;
    rig.store
        .ack_through(MIND, rig.token, held[1].seq)
        .await
        .unwrap();
    rig.bot_joined(&room).await;
    rig.human.send(&room, "m3", &[]).await;
    // The Mind keeps up from here, so that nothing holds m3 back.
    let mail = eventually("m3", Duration::from_secs(30), || async {
        let now = rig.mail().await;
        let last = now.last().unwrap().seq;
        rig.store.ack_through(MIND, rig.token, last).await.unwrap();
        now.iter().any(|d| d.text == "m3").then_some(now)
    })
    .await;
    let counts = running.stats.clone();
    let stats = running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["m0", "m1, before the kick", "m2, while invited", "m3"],
        "mail while the bot was in the room or invited to it, once"
    );
    assert_eq!((stats.gaps_cut, counts.gaps_cut_of(MIND)), (0, None));
}
