//! The connector when something under it fails: a store that refuses a commit, a read or an
//! ack, and a homeserver whose answer is larger than the connector reads. Each failure is
//! retried, loud (health or log, with its cause), bounded, and loses or repeats nothing.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rooms_history_stays_context_when_its_first_batch_is_committed_late() {
    let Some(rig) = rig("late").await else { return };
    let running = rig.start(&[], |_| {});
    rig.first_sync().await;
    running.stop().await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    // A public room the bot joins by its alias (no invite): what was said before the join is
    // history.
    let (a, b) = (alias("late-a"), alias("late-b"));
    let room_a = rig.human.create_room(Some(&a), &[], false).await;
    rig.human.send(&room_a, "before the bot, in a", &[]).await;
    let rooms = [format!("#{a}"), format!("#{b}")];
    let rooms: Vec<&str> = rooms.iter().map(String::as_str).collect();

    // The store refuses the batch that holds the join once; the connector retries it.
    faulty.fail_batches(1);
    let running = rig.start_on(faulty.clone(), &rooms[..1], |_| {});
    eventually(
        "the refused batch retried",
        Duration::from_secs(30),
        || async {
            let cursor = rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap();
            (faulty.refused() == 1 && cursor.is_some()).then_some(())
        },
    )
    .await;
    let after_a = rig.human.send(&room_a, "after the join, in a", &[]).await;
    rig.mail_count(1).await;
    running.stop().await;

    // A crash before the commit: the next process reads the same batch, the room already
    // joined.
    let room_b = rig.human.create_room(Some(&b), &[], false).await;
    rig.human.send(&room_b, "before the bot, in b", &[]).await;
    faulty.fail_batches(u32::MAX);
    let running = rig.start_on(faulty.clone(), &rooms, |_| {});
    eventually("a refused batch", Duration::from_secs(30), || async {
        (faulty.refused() >= 2).then_some(())
    })
    .await;
    running.stop().await;
    faulty.fail_batches(0);
    let running = rig.start(&rooms, |_| {});
    let after_b = rig.human.send(&room_b, "after the join, in b", &[]).await;
    let mail = rig.mail_count(2).await;
    running.stop().await;
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        vec!["after the join, in a", "after the join, in b"],
        "history before each join is context, not mail"
    );
    assert_eq!(
        (mail[0].source_id.as_str(), mail[1].source_id.as_str()),
        (after_a.as_str(), after_b.as_str())
    );
    assert_eq!(
        mail[1].context.last().map(|l| l.text.as_str()),
        Some("before the bot, in b")
    );
}

/// A crash before the batch holding a join is committed, and more said after the join than a
/// timeline holds: the next process finds the room among its rooms and the join only in the gap
/// it pages back, where it must still mark where the mail starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rooms_history_stays_context_when_its_join_is_only_in_the_gap_read_again() {
    let Some(rig) = rig("gapjoin").await else {
        return;
    };
    let running = rig.start(&[], |_| {});
    rig.first_sync().await;
    running.stop().await;
    let a = alias("gapjoin");
    let room = rig.human.create_room(Some(&a), &[], false).await;
    rig.human.send(&room, "before the bot", &[]).await;
    let rooms = [format!("#{a}")];
    let rooms: Vec<&str> = rooms.iter().map(String::as_str).collect();

    // The process that joins never commits (a crash stand-in) ...
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.fail_batches(u32::MAX);
    let running = rig.start_on(faulty.clone(), &rooms, |_| {});
    eventually("a refused batch", Duration::from_secs(30), || async {
        (faulty.refused() >= 1).then_some(())
    })
    .await;
    running.stop().await;
    // ... and more is said after the join than the next answer's timeline holds.
    let mut after = Vec::new();
    for n in 0..4 {
        after.push(
            rig.human
                .send(&room, &format!("after the join {n}"), &[])
                .await,
        );
    }
    let running = rig.start(&rooms, |config| config.timeline_limit = 2);
    rig.mail_count(4).await;
    // A batch more, so that a fifth delivery (the history) would have been committed by now.
    let last = rig.human.send(&room, "after the join 4", &[]).await;
    after.push(last);
    let mail = rig.mail_count(5).await;
    running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        after.iter().map(String::as_str).collect::<Vec<_>>(),
        "history before the join is context, not mail: {:?}",
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>()
    );
}

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

/// A gap (more said than a timeline holds) whose batch the store refuses once: the retry
/// pages the same gap back, whole, though the first attempt already read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_read_again_after_a_refused_commit_is_delivered_whole() {
    let Some(rig) = rig("gapretry").await else {
        return;
    };
    let name = alias("gapretry");
    let room = rig.public_room(&name).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    let running = rig.start_on(faulty.clone(), &[&format!("#{name}")], |c| {
        c.max_pending = 1;
        c.timeline_limit = 2;
    });
    rig.first_sync().await;
    // One unanswered message holds the sync while six more are said: a gap of four behind a
    // timeline of two.
    let mut said = vec![rig.human.send(&room, "m0", &[]).await];
    let first = rig.mail_count(1).await;
    for n in 1..7 {
        said.push(rig.human.send(&room, &format!("m{n}"), &[]).await);
    }
    faulty.fail_batches(1);
    rig.store
        .ack_through(MIND, rig.token, first[0].seq)
        .await
        .unwrap();
    let mail = eventually("the gap committed", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        let last = said.last().unwrap();
        mail.iter().any(|d| &d.source_id == last).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_eq!(faulty.refused(), 1, "the gap's batch was refused once");
    assert_eq!(
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>(),
        (0..7).map(|n| format!("m{n}")).collect::<Vec<_>>(),
        "every message once, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_say_how_far_the_mind_is_is_a_store_failure_not_a_hold() {
    let Some(rig) = rig("askfail").await else {
        return;
    };
    let name = alias("askfail");
    let room = rig.public_room(&name).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    // The first three reads of the ack position (before the first sync) fail.
    faulty.fail_ack_position_reads(3);
    let running = rig.start_on(faulty.clone(), &[&format!("#{name}")], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let said = rig.human.send(&room, "still listening?", &[]).await;
    let mail = rig.mail_count(1).await;
    let health = running.health.lock().unwrap().clone();
    running.stop().await;
    assert_eq!(
        mail[0].source_id, said,
        "it read on once the store answered"
    );
    let failing: Vec<&AccountHealth> = health
        .iter()
        .filter(|h| matches!(h, AccountHealth::Failing { .. }))
        .collect();
    assert!(
        !health
            .iter()
            .any(|h| matches!(h, AccountHealth::Held { .. })),
        "nothing was held: the Mind has no mail at all: {health:?}"
    );
    assert!(
        failing.iter().any(
            |h| matches!(h, AccountHealth::Failing { stage: "store", error }
            if error.contains("the database server closed the connection"))
        ),
        "the store's failure is reported with its cause: {health:?}"
    );
    assert_eq!(
        health.last(),
        Some(&AccountHealth::Open),
        "and clears: {health:?}"
    );
}

// On one thread: the subscriber below is this thread's, and the connector's tasks run on it.
#[tokio::test(flavor = "current_thread")]
async fn a_send_the_store_cannot_record_is_logged_with_its_cause_and_sent_once() {
    let Some(rig) = rig("ackfail").await else {
        return;
    };
    let (logs, _capture) = Logs::capture(tracing::Level::WARN);
    let name = alias("ackfail");
    let room = rig.public_room(&name).await;
    let public = format!("#{name}");
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.fail_outbox_acks(2);
    let running = rig.start_on(faulty.clone(), &[&public], |_| {});
    rig.bot_joined(&room).await;
    rig.say(&[("vala-1-1-0", &public, "once")]).await;
    running.outbox_changed();
    eventually("the send acked", Duration::from_secs(30), || async {
        let unacked = rig.store.unacked_outbox(MIND, 10).await.unwrap();
        unacked.is_empty().then_some(())
    })
    .await;
    running.stop().await;
    let bodies: Vec<String> = rig
        .human
        .messages(&room)
        .await
        .into_iter()
        .filter(|m| m.sender == rig.bot)
        .map(|m| m.body)
        .collect();
    assert_eq!(
        bodies,
        vec!["once"],
        "sent again after each refused ack, shown once"
    );
    assert_eq!(faulty.refused(), 2);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let logged: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("vala-1-1-0") && l.contains("injected: database or disk is full"))
        .collect();
    assert_eq!(
        logged.len(),
        2,
        "each refused ack logged with its cause:\n{text}"
    );
}

/// A homeserver stand-in on loopback for one request: it answers `200` with `declared` as the
/// `Content-Length` and then sends nothing (holding the connection), or, with `None`, a chunked
/// `/sync` answer padded with `pad_mib` MiB inside a JSON string; it counts the padding bytes
/// it got written before the client hung up.
fn oversized_homeserver(declared: Option<u64>, pad_mib: usize) -> (String, Arc<AtomicU64>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let written = Arc::new(AtomicU64::new(0));
    let count = written.clone();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut request = [0u8; 16 * 1024];
        let _ = stream.read(&mut request);
        let head = match declared {
            Some(n) => format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r\n"),
            None => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_owned(),
        };
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        if declared.is_some() {
            std::thread::sleep(Duration::from_secs(120));
            return;
        }
        let chunk = |data: &[u8]| {
            let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
            framed.extend_from_slice(data);
            framed.extend_from_slice(b"\r\n");
            framed
        };
        let pad = chunk(&vec![b'a'; 1 << 20]);
        let mut pieces = vec![chunk(br#"{"next_batch":"s1","padding":""#)];
        pieces.extend(std::iter::repeat_n(pad, pad_mib));
        pieces.push(chunk(br#""}"#));
        pieces.push(b"0\r\n\r\n".to_vec());
        for piece in pieces {
            if stream.write_all(&piece).is_err() {
                return;
            }
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    (url, written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_its_limit_is_refused_at_the_limit_not_read_whole() {
    use muninn_matrix::client::{MatrixClient, SYNC_ANSWER_MAX_BYTES};
    let limit_mib = SYNC_ANSWER_MAX_BYTES >> 20;
    let is_too_large = |answer: &Result<_, muninn_matrix::MatrixError>| {
        matches!(answer, Err(muninn_matrix::MatrixError::TooLarge { what, limit })
            if what == "sync" && *limit == SYNC_ANSWER_MAX_BYTES)
    };
    // Chunked, no length declared: twice the limit on offer, the client stops at the limit.
    let (url, written) = oversized_homeserver(None, 2 * limit_mib);
    let client = MatrixClient::new(&url).unwrap();
    let answer = client.sync(None, "{}", Duration::ZERO).await;
    assert!(is_too_large(&answer), "{answer:?}");
    let pieces = written.load(Ordering::Relaxed) as usize;
    assert!(
        pieces < 2 * limit_mib + 3,
        "the client hung up before the whole answer ({pieces} pieces written)"
    );
    assert!(
        answer.unwrap_err().retry_after().is_some(),
        "retried with backoff"
    );

    // A declared length over the limit is refused before waiting for a byte of it.
    let (url, _) = oversized_homeserver(Some(1 << 40), 0);
    let client = MatrixClient::new(&url).unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        client.sync(None, "{}", Duration::ZERO),
    )
    .await
    .expect("refused at once, not after the call's deadline");
    assert!(is_too_large(&answer), "{answer:?}");
}

/// A homeserver stand-in on loopback for one request: `200`, a declared length of 10,000 bytes,
/// then one byte every 100 ms — never silent, never done within a test.
fn trickling_homeserver() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut request = [0u8; 16 * 1024];
        let _ = stream.read(&mut request);
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000\r\n\r\n{\"next_batch\":\"s1\",\"padding\":\"";
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..10_000 {
            std::thread::sleep(Duration::from_millis(100));
            if stream.write_all(b"a").is_err() {
                return;
            }
        }
    });
    url
}

/// A homeserver (or a proxy before it) that trickles its answer cannot hold the connector: a
/// `/sync` long poll ends at its own wait plus the call timeout however lively the answer, an
/// ordinary call at the call timeout, each as a retryable failure that says it timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_trickles_is_cut_at_the_calls_deadline() {
    use muninn_matrix::client::MatrixClient;
    let call_timeout = Duration::from_millis(800);
    let sync_wait = Duration::from_millis(700);
    for (what, bound) in [("sync", sync_wait + call_timeout), ("whoami", call_timeout)] {
        let client = MatrixClient::new(&trickling_homeserver())
            .unwrap()
            .with_call_timeout(call_timeout);
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            match what {
                "sync" => client.sync(None, "{}", sync_wait).await.map(drop),
                _ => client.whoami().await.map(drop),
            }
        })
        .await
        .expect("the call was not cut at its deadline");
        let elapsed = started.elapsed();
        let error = answer.unwrap_err();
        assert!(
            matches!(&error, muninn_matrix::MatrixError::Unreachable(m)
                if m.starts_with(what) && m.contains("timed out")),
            "{what}: {error:?}"
        );
        assert!(
            error.retry_after().is_some(),
            "{what}: retried with backoff"
        );
        assert!(
            elapsed >= bound && elapsed < bound + Duration::from_secs(2),
            "{what}: {elapsed:?}"
        );
    }
}

/// A bug under an account's sync loop (a panic, here on its first read of the sync position)
/// takes the account's task down: it is reported as the account's health with the panic's
/// message, and the account is opened again — it hears and speaks as before. Before, the task's
/// end was dropped: the health stayed `open` and the account never synced nor sent again. A
/// panic met again at the reopen is reported as the second in a row (each reopen reports the
/// account `open`, which ends the host's count of failures in a row: it showed `1` for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_whose_task_panicked_is_reported_and_opened_again() {
    let Some(rig) = rig("panic").await else {
        return;
    };
    let name = alias("panic");
    let room = rig.public_room(&name).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.panic_cursor_reads(2);
    let running = rig.start_on(faulty.clone(), &[&format!("#{name}")], |_| {});
    let panics = || {
        let health = running.health.lock().unwrap().clone();
        let panics = health.into_iter().filter_map(|h| match h {
            AccountHealth::Failing {
                stage: "panic",
                error,
            } => Some(error),
            _ => None,
        });
        panics.collect::<Vec<_>>()
    };
    eventually("both panics reported", Duration::from_secs(30), || async {
        (panics().len() == 2).then_some(())
    })
    .await;
    for (n, error) in panics().iter().enumerate() {
        assert!(
            error.contains("injected: a bug while reading vala's"),
            "{error}"
        );
        assert!(error.contains(&format!("({} in a row;", n + 1)), "{error}");
    }
    rig.first_sync().await;
    let after = rig.human.send(&room, "after the panic", &[]).await;
    let mail = rig.mail_count(1).await;
    assert_eq!(mail[0].source_id, after);
    rig.say(&[("vala-panic-0", &format!("#{name}"), "still here")])
        .await;
    running.outbox_changed();
    eventually(
        "the answer in the room",
        Duration::from_secs(30),
        || async {
            let messages = rig.human.messages(&room).await;
            messages.iter().any(|m| m.sender == rig.bot).then_some(())
        },
    )
    .await;
    let health = running.health.lock().unwrap().clone();
    assert_eq!(health.last(), Some(&AccountHealth::Open), "{health:?}");
    running.stop().await;
}

/// A first start whose first answer is never committed (the store refuses it, then the process
/// stops, as at a crash before the commit): the next process finds the rooms joined and no
/// position stored. What was said after the first start's join, and in the direct chat it
/// accepted while reading that answer, is mail once all the same; what was said before the
/// join is history, and so is the backlog of a room the bot was in before it ever ran. Before, the next process took both rooms for rooms the account was in
/// before the Mind ever ran, and read their first sync as history: both messages were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_first_start_that_never_committed_joined_stays_mail_for_the_next_process() {
    let Some(HeldAfterJoin {
        rig,
        room,
        public,
        earlier,
        dm,
        invited,
        between,
        faulty,
        running,
    }) = a_first_start_held_after_its_join("firstcrash").await
    else {
        return;
    };
    faulty.fail_batches(u32::MAX);
    faulty.release_mailbox_reads();
    eventually(
        "the first answer refused",
        Duration::from_secs(30),
        || async { (faulty.refused() > 0).then_some(()) },
    )
    .await;
    running.stop().await;
    rig.bot_joined(&dm).await;
    assert_eq!(rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap(), None);

    let running = rig.start(&[&public, &earlier], |_| {});
    rig.first_sync().await;
    let later = rig.human.send(&room, "after the restart", &[]).await;
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == later).then_some(mail)
    })
    .await;
    running.stop().await;
    let mut said: Vec<(&str, &str)> = (mail.iter())
        .map(|d| (d.text.as_str(), d.source_id.as_str()))
        .collect();
    said.sort();
    assert_eq!(
        said,
        vec![
            ("after the join", between.as_str()),
            ("after the restart", later.as_str()),
            ("while invited", invited.as_str()),
        ]
    );
}

/// A first start that stopped before its first sync (its position stored, its room joined),
/// restarted after more was said in that room than Synapse's `/sync` looks through for a room's
/// timeline (it filters a newly joined room's last 551 events: the timeline limit and one, then
/// five pages of twice the limit): the account's join is further back than that. Everything said
/// after the join is mail all the same, in order, once. Before, the rooms-joined-since query
/// filtered the timeline for the account's own join, found none in the last 551 events
/// (600 were said after it), and took the room
/// for one the account was in before the Mind ever ran: every message was read as history and
/// lost. (The first process never asks its first sync here: a first answer it had read would be
/// answered again from Synapse's two-minute response cache, with the rooms-joined-since answer
/// read with it, and hide the restart's own questions.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_restarted_after_a_long_conversation_in_the_room_it_joined_delivers_it() {
    let Some(rig) = rig("firstbusy").await else {
        return;
    };
    let name = alias("firstbusy");
    let room = rig.public_room(&name).await;
    rig.human.send(&room, "before the join", &[]).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    // The store cannot say how far behind the Mind is: the first sync is never asked.
    faulty.fail_ack_position_reads(u32::MAX);
    let public = format!("#{name}");
    let running = rig.start_on(faulty.clone(), &[&public], |_| {});
    rig.bot_joined(&room).await;
    eventually(
        "the first start marked",
        Duration::from_secs(30),
        || async {
            let cursor = rig.store.cursor(MIND, FIRST_START_CURSOR).await.unwrap();
            cursor.map(|_| ())
        },
    )
    .await;
    running.stop().await;
    assert_eq!(rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap(), None);
    let mut said = Vec::new();
    for n in 0..600 {
        let text = format!("while stopped {n}");
        said.push((text.clone(), rig.human.send(&room, &text, &[]).await));
    }

    let running = rig.start(&[&public], |c| c.max_pending = 10_000);
    rig.first_sync().await;
    let later = rig.human.send(&room, "after the restart", &[]).await;
    said.push(("after the restart".to_owned(), later.clone()));
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == later).then_some(mail)
    })
    .await;
    running.stop().await;
    let mail: Vec<(String, String)> = (mail.into_iter()).map(|d| (d.text, d.source_id)).collect();
    assert_eq!(
        mail.len(),
        said.len(),
        "mail: {:?}",
        &mail[..mail.len().min(3)]
    );
    assert_eq!(mail, said);
}
