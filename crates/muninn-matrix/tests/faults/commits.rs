//! A commit refused or never made: the same answer read again, by the same process or the
//! next one, delivers what it holds once — a new room's history stays context, a gap is paged
//! back whole, and what a first start that never committed joined stays mail.

use crate::*;
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

/// A first start that joined its configured room (public, no invite) and heard "after the
/// first join" there, its first answer refused and the process stopped; then, while none ran,
/// the bot kicked and "while the bot is out" said. Returns the rig, the room, its configured
/// name and the id of what was heard.
async fn a_first_join_kicked_before_the_first_commit(
    test: &str,
) -> Option<(Rig, String, String, String)> {
    let rig = rig(test).await?;
    let name = alias(test);
    let room = rig.human.create_room(Some(&name), &[], false).await;
    rig.human.send(&room, "before the first join", &[]).await;
    let configured = format!("#{name}");
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.fail_batches(u32::MAX);
    let running = rig.start_on(faulty.clone(), &[&configured], |_| {});
    rig.bot_joined(&room).await;
    let heard = rig.human.send(&room, "after the first join", &[]).await;
    let refused = faulty.refused();
    eventually(
        "an answer after it refused",
        Duration::from_secs(30),
        || async { (faulty.refused() > refused).then_some(()) },
    )
    .await;
    running.stop().await;
    assert_eq!(rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap(), None);
    rig.human.kick(&room, &rig.bot).await;
    rig.human.send(&room, "while the bot is out", &[]).await;
    Some((rig, room, configured, heard))
}

/// A room joined at a first start that never committed, the bot kicked and the room joined
/// again by the next process's open (on another device, so that Synapse's two-minute response
/// cache does not answer it with the first process's answers, from before the kick): what was
/// said between the first join and the kick was said to a Mind listening and is mail, what was
/// said while the bot was out is not, what follows its return is. Before, the next process read
/// the room as joined at the first start from its latest join, and "after the first join" was
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_joined_at_a_first_start_then_kicked_and_joined_again_keeps_the_mail_before_the_kick()
 {
    let Some((rig, room, configured, heard)) =
        a_first_join_kicked_before_the_first_commit("joinkick").await
    else {
        return;
    };
    let running = rig.start(&[&configured], |c| {
        c.accounts[0].device_id = "MUNINNTEST2".into();
    });
    rig.bot_joined(&room).await;
    let back = rig.human.send(&room, "after it is back", &[]).await;
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == back).then_some(mail)
    })
    .await;
    running.stop().await;
    let said: Vec<(&str, &str)> = (mail.iter())
        .map(|d| (d.text.as_str(), d.source_id.as_str()))
        .collect();
    assert_eq!(
        said,
        vec![
            ("after the first join", heard.as_str()),
            ("after it is back", back.as_str()),
        ],
        "mail while the bot was in the room, once, in order"
    );
}

/// As above, but the bot's owner joins the room again while no process runs, and more is said
/// after the return than the next process's timeline holds (two events): its first answer
/// holds none of the account's memberships, nothing in it says the room was joined again.
/// Before, the room was paged back to its latest join, and "after the first join" was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_joined_at_a_first_start_kicked_and_joined_again_before_a_long_conversation_keeps_its_mail()
 {
    let Some((rig, room, configured, heard)) =
        a_first_join_kicked_before_the_first_commit("joinkicklong").await
    else {
        return;
    };
    rig.bot_user.join(&room).await;
    let mut said = vec![("after the first join".to_owned(), heard)];
    for n in 0..4 {
        let text = format!("after it is back {n}");
        said.push((text.clone(), rig.human.send(&room, &text, &[]).await));
    }
    let running = rig.start(&[&configured], |c| {
        c.timeline_limit = 2;
        c.accounts[0].device_id = "MUNINNTEST2".into();
    });
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
    assert_eq!(mail, said);
}

/// A direct chat the bot was invited to before its first start ("while invited"), accepted at
/// that start, "after the accept" heard there, the first answer refused and the process stopped;
/// then, while none ran, the bot out of the chat (its owner leaves it: in Synapse's default room
/// version a direct chat's invitee is one of its creators, whom no one can kick; a leave is the
/// same membership), "while the bot is out" said, the bot invited back, "while invited again"
/// said, its owner joining it again and `after` messages said. The next process (on another
/// device: Synapse's response cache keeps the first process's answers two minutes), its
/// configuration adjusted by `tweak`, reads the chat on its first answer. Returns the mail and
/// what was said while the bot was invited to or in the chat, in order.
async fn a_direct_chat_left_and_joined_again_before_the_first_commit(
    test: &str,
    after: usize,
    tweak: impl FnOnce(&mut ConnectorConfig),
) -> Option<(Vec<(String, String)>, Vec<(String, String)>)> {
    let rig = rig(test).await?;
    let dm = rig.human.create_room(None, &[&rig.bot], true).await;
    let mut said = Vec::new();
    let mut say = async |text: &str| {
        said.push((text.to_owned(), rig.human.send(&dm, text, &[]).await));
    };
    say("while invited").await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.fail_batches(u32::MAX);
    let running = rig.start_on(faulty.clone(), &[], |_| {});
    rig.bot_joined(&dm).await;
    let refused = faulty.refused();
    say("after the accept").await;
    eventually(
        "an answer after it refused",
        Duration::from_secs(30),
        || async { (faulty.refused() > refused).then_some(()) },
    )
    .await;
    running.stop().await;
    assert_eq!(rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap(), None);
    rig.bot_user.leave(&dm).await;
    rig.human.send(&dm, "while the bot is out", &[]).await;
    rig.human.invite(&dm, &rig.bot).await;
    say("while invited again").await;
    rig.bot_user.join(&dm).await;
    for n in 0..after {
        say(&format!("after it is back {n}")).await;
    }

    let running = rig.start(&[], |c| {
        c.accounts[0].device_id = "MUNINNTEST2".into();
        tweak(c);
    });
    rig.first_sync().await;
    say("after the restart").await;
    let later = said.last().map(|(_, id)| id.clone()).unwrap();
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == later).then_some(mail)
    })
    .await;
    running.stop().await;
    let mail = (mail.into_iter()).map(|d| (d.text, d.source_id)).collect();
    Some((mail, said))
}

/// [`a_direct_chat_left_and_joined_again_before_the_first_commit`]: what was said while the
/// bot was invited to or in the chat is mail, once, in order; what was said while it was out
/// is not. Before, the chat was read from its latest invite: "while invited" and "after the
/// accept" were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_chat_accepted_at_a_first_start_then_left_and_joined_again_keeps_its_mail() {
    let Some((mail, said)) =
        a_direct_chat_left_and_joined_again_before_the_first_commit("dmleave", 1, |_| {}).await
    else {
        return;
    };
    assert_eq!(
        mail, said,
        "mail while the bot was invited to or in the chat, once, in order"
    );
}

/// As above, with more said after the return than the next process's timeline holds (two
/// events): its first answer holds none of the account's memberships. Before, the chat was
/// paged back to its latest invite, and what was said before the leave was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_chat_left_and_joined_again_before_a_long_conversation_keeps_its_mail() {
    let Some((mail, said)) =
        a_direct_chat_left_and_joined_again_before_the_first_commit("dmleavelong", 4, |c| {
            c.timeline_limit = 2;
        })
        .await
    else {
        return;
    };
    assert_eq!(mail, said);
}
