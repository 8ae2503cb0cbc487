//! Room upgrades across stops and gaps: what the account knows of an upgrade must not live only
//! in the memory of the process that read the tombstone (a restart would lose the replacement's
//! first messages, or the room's name), nor only in a timeline short enough to miss it.

use super::*;
use pretty_assertions::assert_eq;

/// The deliveries as (event id, room as the Mind names it).
fn named(mail: &[Delivery]) -> Vec<(&str, &str)> {
    mail.iter()
        .map(|d| (d.source_id.as_str(), d.room.as_str()))
        .collect()
}

/// The messages `said` as [`named`] should show them: each once, in `room`.
fn said_in<'a>(said: &'a [String], room: &'a str) -> Vec<(&'a str, &'a str)> {
    said.iter().map(|id| (id.as_str(), room)).collect()
}

/// The mail is the messages `said`, each once, named as the Mind names `room`.
fn assert_said_once_in(mail: &[Delivery], said: &[String], room: &str) {
    assert_eq!(
        named(mail),
        said_in(said, room),
        "every message once, named as configured: {:?}",
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>()
    );
}

/// The process that reads the tombstone and joins the replacement stops before the answer that
/// holds its join is committed: the next process finds the replacement among its rooms, joined
/// since its position, and must still read it from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_between_the_tombstone_and_the_replacements_join_loses_nothing() {
    let Some(rig) = rig("upstop").await else {
        return;
    };
    let room = rig.public_room(&alias("upstop")).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    let running = rig.start_on(faulty.clone(), &[&room], |c| c.max_pending = 1);
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "before the upgrade", &[]).await];
    let first = rig.mail_count(1).await;
    // Held by the unanswered first message, the account reads the upgrade only once people
    // talk in the replacement. The answer with the tombstone commits; the one with the
    // replacement's join does not (the process stops before it can).
    faulty.fail_batches_after(1, u32::MAX);
    let replacement = rig.human.upgrade_room(&room, "11").await;
    said.push(rig.human.send(&replacement, "right after", &[]).await);
    said.push(rig.human.send(&replacement, "and again", &[]).await);
    rig.store
        .ack_through(MIND, rig.token, first[0].seq)
        .await
        .unwrap();
    rig.bot_joined(&replacement).await;
    eventually("a refused batch", Duration::from_secs(30), || async {
        (faulty.refused() >= 1).then_some(())
    })
    .await;
    running.stop().await;
    said.push(rig.human.send(&replacement, "while stopped", &[]).await);
    let running = rig.start(&[&room], |_| {});
    let last = rig.human.send(&replacement, "welcome back", &[]).await;
    said.push(last.clone());
    eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == last).then_some(())
    })
    .await;
    // Time for a repeat to show up, had there been one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mail = rig.mail().await;
    running.stop().await;
    assert_said_once_in(&mail, &said, &room);
}

/// A room configured by its id (which an upgrade does not move, as it moves an alias) upgraded
/// and followed; then the connector restarts. The replacement is still the configured room: its
/// mail is named as configured, and a reply to the configured name goes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_upgrade_is_still_followed_after_a_restart() {
    let Some(rig) = rig("uprestart").await else {
        return;
    };
    let room = rig.public_room(&alias("uprestart")).await;
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&room).await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    let mut said = vec![
        rig.human
            .send(&replacement, "in the replacement", &[])
            .await,
    ];
    rig.bot_joined(&replacement).await;
    rig.mail_count(1).await;
    running.stop().await;
    let running = rig.start(&[&room], |_| {});
    rig.first_sync().await;
    said.push(rig.human.send(&replacement, "after the restart", &[]).await);
    let mail = rig.mail_count(2).await;
    rig.say(&[("vala-2-2-0", &room, "still here")]).await;
    running.outbox_changed();
    eventually("the answer", Duration::from_secs(30), || async {
        let stats = running.stats.snapshot();
        (stats.sent + stats.failed > 0).then_some(())
    })
    .await;
    let bot_said: Vec<String> = rig
        .human
        .messages(&replacement)
        .await
        .into_iter()
        .filter(|m| m.sender == rig.bot)
        .map(|m| m.body)
        .collect();
    let stats = running.stop().await;
    assert_said_once_in(&mail, &said, &room);
    assert_eq!(
        (bot_said, stats.sent, stats.failed),
        (vec!["still here".to_owned()], 1, 0)
    );
}

/// More happens in the old room after its tombstone than one answer's timeline holds (the
/// sync is held meanwhile): the tombstone is only in the gap, and the upgrade is followed all
/// the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_only_in_the_gap_is_followed() {
    let Some(rig) = rig("upgap").await else {
        return;
    };
    let room = rig.public_room(&alias("upgap")).await;
    let running = rig.start(&[&room], |c| {
        c.max_pending = 1;
        c.timeline_limit = 2;
    });
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "before the upgrade", &[]).await];
    let first = rig.mail_count(1).await;
    // Held: the upgrade and what follows it are read in one answer.
    let replacement = rig.human.upgrade_room(&room, "11").await;
    for n in 0..3 {
        // The room's creator may still speak in it after the tombstone.
        let text = format!("after the tombstone {n}");
        said.push(rig.human.send(&room, &text, &[]).await);
    }
    said.push(
        rig.human
            .send(&replacement, "in the replacement", &[])
            .await,
    );
    rig.store
        .ack_through(MIND, rig.token, first[0].seq)
        .await
        .unwrap();
    // The old room's four; then, answered, the replacement's.
    let old = rig.mail_count(4).await;
    rig.store
        .ack_through(MIND, rig.token, old[3].seq)
        .await
        .unwrap();
    let mail = rig.mail_count(5).await;
    running.stop().await;
    assert_said_once_in(&mail, &said, &room);
}

/// An invite-only room upgraded: the replacement is invite-only too, and the upgrade invites
/// nobody, so the account's join is refused. When someone invites it, the invite (to a room
/// neither configured nor direct) is accepted as the replacement's, and the replacement is
/// read from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_to_the_replacement_of_a_private_room_is_accepted_and_followed() {
    let Some(rig) = rig("upinvite").await else {
        return;
    };
    let room = rig.human.create_room(None, &[&rig.bot], false).await;
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "before the upgrade", &[]).await];
    rig.mail_count(1).await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    said.push(rig.human.send(&replacement, "before the invite", &[]).await);
    // Time for the account to read the tombstone and be refused.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    rig.human.invite(&replacement, &rig.bot).await;
    rig.bot_joined(&replacement).await;
    said.push(rig.human.send(&replacement, "after the join", &[]).await);
    let mail = rig.mail_count(3).await;
    running.stop().await;
    assert_said_once_in(&mail, &said, &room);
}

/// An invite-only room upgraded, and nobody invites the bot to the replacement: its join is
/// refused. The replacement is reported with the configured rooms not joined (with the refusal),
/// again by the next process (from the old room's tombstone), and tried again on their backoff
/// until it lets the bot in (its join rule made public, no invite): then joined, read from its
/// start, and the report emptied. Before, the refusal was only logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_that_cannot_be_joined_is_reported_and_tried_again_until_joined() {
    let Some(rig) = rig("upnotjoined").await else {
        return;
    };
    // Of version 11, so that its creator can open the replacement's join rule.
    let room = rig.human.create_private_room(&[&rig.bot], "11").await;
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "before the upgrade", &[]).await];
    rig.mail_count(1).await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    said.push(rig.human.send(&replacement, "before the join", &[]).await);
    let reported = |running: &Running| {
        let reports = running.not_joined.lock().unwrap();
        let last = reports.last().cloned().unwrap_or_default();
        let listed = last.iter().find(|r| r.room == replacement).cloned();
        listed.map(|r| (r.error.contains("M_FORBIDDEN"), r.error))
    };
    let within = Duration::from_secs(20);
    let (forbidden, error) = eventually("the replacement reported", within, || async {
        reported(&running)
    })
    .await;
    assert!(forbidden && error.contains(&room), "{error}");
    running.stop().await;
    let running = rig.start(&[&room], |_| {});
    eventually("the replacement reported again", within, || async {
        reported(&running)
    })
    .await;
    rig.human
        .set_state(
            &replacement,
            "m.room.join_rules",
            &serde_json::json!({"join_rule": "public"}),
        )
        .await;
    rig.bot_joined(&replacement).await;
    said.push(rig.human.send(&replacement, "after the join", &[]).await);
    let mail = rig.mail_count(3).await;
    eventually("the report emptied", within, || async {
        let reports = running.not_joined.lock().unwrap();
        reports.last().is_some_and(Vec::is_empty).then_some(())
    })
    .await;
    running.stop().await;
    assert_said_once_in(&mail, &said, &room);
}

/// A direct chat upgraded by the person, who invites the bot to the invite-only replacement;
/// followed. Then the connector restarts and the Mind answers the old room id (which its mail
/// from before the upgrade carries): the answer goes to the replacement, as it did before the
/// restart. Before, the restarted process did not know the room was replaced and posted in the
/// tombstoned room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_an_upgraded_direct_chats_old_room_goes_to_its_replacement_after_a_restart() {
    let Some(rig) = rig("updm").await else {
        return;
    };
    let room = rig.human.create_room(None, &[&rig.bot], true).await;
    let running = rig.start(&[], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    rig.human.send(&room, "before the upgrade", &[]).await;
    rig.mail_count(1).await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    rig.human.invite(&replacement, &rig.bot).await;
    rig.bot_joined(&replacement).await;
    rig.human
        .send(&replacement, "in the replacement", &[])
        .await;
    rig.mail_count(2).await;
    running.stop().await;
    let running = rig.start(&[], |_| {});
    rig.say(&[
        ("vala-1-1-0", &room, "to the old id"),
        ("vala-2-2-0", &rig.human.user_id, "to the person"),
    ])
    .await;
    running.outbox_changed();
    eventually("the answers", Duration::from_secs(30), || async {
        let stats = running.stats.snapshot();
        (stats.sent + stats.failed >= 2).then_some(())
    })
    .await;
    let stats = running.stop().await;
    let bot_said = |messages: Vec<synapse::RoomMessage>| -> Vec<String> {
        let bot = messages.into_iter().filter(|m| m.sender == rig.bot);
        bot.map(|m| m.body).collect()
    };
    let old = bot_said(rig.human.messages(&room).await);
    let new = bot_said(rig.human.messages(&replacement).await);
    assert_eq!(
        (old, new, stats.sent, stats.failed),
        (
            vec![],
            vec!["to the old id".to_owned(), "to the person".to_owned()],
            2,
            0
        )
    );
}

/// An invite-only room upgraded, its replacement refused and reported; then the person removes
/// the bot from the old room. The replacement is no longer the Mind's to join: the report is
/// emptied and the tries stop. Before, it stayed on the list (and in `muninn status`) for the
/// life of the process, tried every 5 minutes, and would have been joined had it opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_replacement_of_a_room_the_bot_was_removed_from_is_dropped() {
    let Some(rig) = rig("upkicked").await else {
        return;
    };
    let room = rig.human.create_private_room(&[&rig.bot], "11").await;
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    let listed = |running: &Running| {
        let reports = running.not_joined.lock().unwrap();
        let last = reports.last().cloned().unwrap_or_default();
        last.iter().any(|r| r.room == replacement)
    };
    let within = Duration::from_secs(20);
    eventually("the replacement reported", within, || async {
        listed(&running).then_some(())
    })
    .await;
    rig.human.kick(&room, &rig.bot).await;
    eventually("the report emptied", within, || async {
        let reports = running.not_joined.lock().unwrap();
        reports.last().is_some_and(Vec::is_empty).then_some(())
    })
    .await;
    running.stop().await;
}

/// An invite-only room upgraded, its replacement refused and reported, tried again twice; then
/// the person invites the bot, which accepts. The replacement leaves the report when the invite
/// is accepted, and the tries stop: no later try joins it again "at last". Before, it stayed
/// reported as not joined until the next try (up to 5 minutes later), which joined it again.
// On one thread: the subscriber below is this thread's, and the connector's tasks run on it.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_replacement_joined_through_an_invite_leaves_the_report() {
    let Some(rig) = rig("upinvited").await else {
        return;
    };
    let (logs, _capture) = Logs::capture(tracing::Level::INFO);
    let room = rig.human.create_private_room(&[&rig.bot], "11").await;
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    // Two tries refused (1 s and 3 s after the first): the next is 4 s away, time enough for
    // the invite to be read and accepted before it.
    let within = Duration::from_secs(20);
    eventually("two tries refused", within, || async {
        (logs.count("still cannot join a room") >= 2).then_some(())
    })
    .await;
    rig.human.invite(&replacement, &rig.bot).await;
    rig.bot_joined(&replacement).await;
    eventually("the report emptied", within, || async {
        let reports = running.not_joined.lock().unwrap();
        reports.last().is_some_and(Vec::is_empty).then_some(())
    })
    .await;
    running.stop().await;
    assert_eq!(
        logs.count("joined a room that could not be joined before"),
        0
    );
    assert_eq!(logs.count("invite accepted"), 1);
}

/// A room the bot was in before the Mind's first start is upgraded between that start and its
/// first sync, and someone speaks in the replacement before the bot joins it. The process that
/// reads the tombstone in its first answer joins the replacement and would read it from its
/// start in its next answer; it stops first (its first answer refused). The next process finds
/// the replacement joined since the first start and reads it in its own first answer: from its
/// start all the same, not as a room joined at this start. Before, what was said in the
/// replacement before the join was history there, and lost. (The next process runs on another
/// device, as if it started after Synapse's two-minute response cache: on the same one within
/// two minutes, it would be answered the first process's answers, the first of which did not
/// hold the join.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_at_the_first_start_read_again_by_the_next_process_loses_nothing() {
    an_upgrade_at_the_first_start_read_again("upfirst", 0).await;
}

/// A room the account joins at the Mind's first start is upgraded before its first sync is
/// committed, and someone speaks in the replacement before the bot joins it. The process that
/// reads the tombstone joins the replacement and stops (its first answer refused); the next one,
/// on another device (past Synapse's two-minute response cache), reads both rooms in its first
/// answer: the old one from the bot's join, the replacement from its start. Before, the old
/// room's tombstone, found in a room joined since the first start, was taken for one older than
/// that start, and the replacement was read as a room joined at it, from the bot's join: what
/// was said there before the join was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_joined_at_the_first_start_and_upgraded_before_its_first_commit_loses_nothing() {
    let Some(rig) = rig("upjoinfirst").await else {
        return;
    };
    let room = rig.public_room(&alias("upjoinfirst")).await;
    rig.human.send(&room, "before the join", &[]).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.hold_mailbox_reads();
    let running = rig.start_on(faulty.clone(), &[&room], |_| {});
    rig.bot_joined(&room).await;
    eventually("the first sync held", Duration::from_secs(30), || async {
        (faulty.held_mailbox_reads() > 0).then_some(())
    })
    .await;
    let mut said = vec![rig.human.send(&room, "after the join", &[]).await];
    let replacement = rig.human.upgrade_room(&room, "11").await;
    said.push(rig.human.send(&replacement, "before the bot", &[]).await);
    faulty.fail_batches(u32::MAX);
    faulty.release_mailbox_reads();
    rig.bot_joined(&replacement).await;
    eventually("a refused batch", Duration::from_secs(30), || async {
        (faulty.refused() >= 1).then_some(())
    })
    .await;
    running.stop().await;
    let running = rig.start(&[&room], |c| c.accounts[0].device_id = "MUNINNLATER".into());
    rig.first_sync().await;
    said.push(rig.human.send(&replacement, "after the restart", &[]).await);
    let last = said[2].clone();
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == last).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_said_once_in(&mail, &said, &room);
}

/// As `an_upgrade_at_the_first_start_read_again_by_the_next_process_loses_nothing`, with more
/// membership events in the old room after its tombstone than the first start's search for
/// tombstones holds (someone joins it and is kicked, 26 times: 52 memberships). The
/// tombstone is still found, and the replacement read from its start. Before, that search
/// asked for memberships too (to tell a tombstone after a room's join from one before it),
/// its 50 events were all those memberships, the upgrade went unseen, and the replacement was
/// read as a room joined at the first start: what was said in it before the bot's join was
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_at_the_first_start_behind_many_memberships_loses_nothing() {
    an_upgrade_at_the_first_start_read_again("upfirstmembers", 26).await;
}

/// The scenario of the two tests above: a room the account was in is upgraded while the Mind's
/// first sync is held, someone speaks in the replacement before the bot joins it, the first
/// answer is refused and the process stops; `passers` people then join the old room and are
/// kicked (two memberships each) before the next process, on another device, reads both rooms.
/// What was said in the replacement is mail, once.
async fn an_upgrade_at_the_first_start_read_again(name: &str, passers: usize) {
    let Some(rig) = rig(name).await else {
        return;
    };
    let room = rig.public_room(&alias(name)).await;
    rig.bot_user.join(&room).await;
    rig.human.send(&room, "backlog", &[]).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.hold_mailbox_reads();
    let running = rig.start_on(faulty.clone(), &[&room], |_| {});
    eventually("the first sync held", Duration::from_secs(30), || async {
        (faulty.held_mailbox_reads() > 0).then_some(())
    })
    .await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    let first = rig.human.send(&replacement, "before the bot", &[]).await;
    faulty.fail_batches(u32::MAX);
    faulty.release_mailbox_reads();
    rig.bot_joined(&replacement).await;
    eventually("a refused batch", Duration::from_secs(30), || async {
        (faulty.refused() >= 1).then_some(())
    })
    .await;
    running.stop().await;
    if passers > 0 {
        let passer = (rig.synapse)
            .register(&format!("passer-{}", alias(name)), PASSWORD)
            .await;
        for _ in 0..passers {
            passer.join(&room).await;
            rig.human.kick(&room, &passer.user_id).await;
        }
    }
    let running = rig.start(&[&room], |c| c.accounts[0].device_id = "MUNINNLATER".into());
    rig.first_sync().await;
    let last = rig.human.send(&replacement, "after the restart", &[]).await;
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == last).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_said_once_in(&mail, &[first, last], &room);
}
