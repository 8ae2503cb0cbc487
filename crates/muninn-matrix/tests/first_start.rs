//! A Mind's first start in a room its account was in before it: the backlog up to the first
//! start's position is history (context, never answered), what was said after it is mail, once
//! — whether the first answer is committed at once or read again by a process started long
//! after one that stopped before its first commit.

use super::*;
use pretty_assertions::assert_eq;

/// A room the bot was in before the Mind ever ran, with a backlog; a first start held just
/// before its first sync.
struct Held {
    rig: Rig,
    room: String,
    /// The room's `#alias`, configured.
    configured: String,
    faulty: Arc<muninn_testkit::FaultyStore>,
    running: Running,
}

/// Starts the Mind for the first time over a store that holds its first sync until the test
/// releases it, the bot already in a room with a backlog.
async fn first_start_held(test: &str) -> Option<Held> {
    let rig = rig(test).await?;
    let name = alias(test);
    let room = rig.human.create_room(Some(&name), &[], false).await;
    rig.bot_user.join(&room).await;
    rig.human.send(&room, "backlog", &[]).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.hold_mailbox_reads();
    let configured = format!("#{name}");
    let running = rig.start_on(faulty.clone(), &[&configured], |_| {});
    eventually("the first sync held", Duration::from_secs(30), || async {
        (faulty.held_mailbox_reads() > 0).then_some(())
    })
    .await;
    assert!(
        rig.store
            .cursor(MIND, FIRST_START_CURSOR)
            .await
            .unwrap()
            .is_some()
    );
    Some(Held {
        rig,
        room,
        configured,
        faulty,
        running,
    })
}

impl Held {
    /// Refuses the held first answer and stops the process: a first start that never
    /// committed, no sync position stored. Returns the rig, the room and its configured name.
    async fn stopped_before_its_first_commit(self) -> (Rig, String, String) {
        let Held {
            rig,
            room,
            configured,
            faulty,
            running,
        } = self;
        faulty.fail_batches(u32::MAX);
        faulty.release_mailbox_reads();
        eventually(
            "the first answer refused",
            Duration::from_secs(30),
            || async { (faulty.refused() > 0).then_some(()) },
        )
        .await;
        running.stop().await;
        assert_eq!(rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap(), None);
        (rig, room, configured)
    }
}

/// The mail's texts and event ids, sorted by text.
fn said(mail: &[Delivery]) -> Vec<(&str, &str)> {
    let mut said: Vec<(&str, &str)> = (mail.iter())
        .map(|d| (d.text.as_str(), d.source_id.as_str()))
        .collect();
    said.sort();
    said
}

/// What a person says in a room the bot was in before its first start, after that start's
/// position and before its first sync answers, was said to a Mind already listening: it is
/// mail, once, with the backlog as its context; the backlog itself is never mail. Before, the
/// whole first answer of such a room was history and the message was never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_said_in_an_old_room_after_the_first_start_and_before_the_first_sync_is_mail_once()
{
    let Some(held) = first_start_held("oldfirst").await else {
        return;
    };
    let Held {
        rig,
        room,
        configured,
        faulty,
        running,
    } = held;
    let between = rig.human.send(&room, "after the first start", &[]).await;
    faulty.release_mailbox_reads();
    rig.first_sync().await;
    let later = rig.human.send(&room, "after the first sync", &[]).await;
    let mail = rig.mail_count(2).await;
    running.stop().await;
    let running = rig.start(&[&configured], |_| {});
    let last = rig.human.send(&room, "after the restart", &[]).await;
    let mail_after = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == last).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_eq!(
        said(&mail),
        vec![
            ("after the first start", between.as_str()),
            ("after the first sync", later.as_str()),
        ]
    );
    let context: Vec<&str> = mail[0].context.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        context,
        vec!["backlog"],
        "the backlog is the first mail's context"
    );
    assert_eq!(
        said(&mail_after),
        vec![
            ("after the first start", between.as_str()),
            ("after the first sync", later.as_str()),
            ("after the restart", last.as_str()),
        ],
        "after a restart, only what was said since is mail"
    );
}

/// A first start whose first answer is never committed (refused, the process stopped), in a
/// room the bot was in before: the next process, started after more was said than a timeline
/// holds (on another device, so that Synapse's two-minute response cache does not answer it
/// with the first process's answers), delivers everything said after the first start's
/// position once — what was said before the first process stopped, and all of what was said
/// while no process ran, paged back to the position — and the backlog stays history. Before,
/// the next process read the room's first answer as history whatever was said since the first
/// start: all of it was lost however long the restart took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_said_in_an_old_room_after_a_first_start_that_never_committed_is_mail() {
    let Some(held) = first_start_held("oldcrash").await else {
        return;
    };
    let first = held
        .rig
        .human
        .send(&held.room, "after the first start", &[]);
    let mut expected = vec![("after the first start".to_owned(), first.await)];
    let (rig, room, configured) = held.stopped_before_its_first_commit().await;
    for n in 0..5 {
        let text = format!("while stopped {n}");
        expected.push((text.clone(), rig.human.send(&room, &text, &[]).await));
    }

    let running = rig.start(&[&configured], |c| {
        c.timeline_limit = 2;
        c.accounts[0].device_id = "MUNINNTEST2".into();
    });
    rig.first_sync().await;
    let text = "after the restart".to_owned();
    expected.push((text.clone(), rig.human.send(&room, &text, &[]).await));
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        let last = &expected[expected.len() - 1].1;
        mail.iter().any(|d| &d.source_id == last).then_some(mail)
    })
    .await;
    running.stop().await;
    let mail: Vec<(String, String)> = (mail.into_iter()).map(|d| (d.text, d.source_id)).collect();
    assert_eq!(mail, expected);
}

/// What a person says in a room the bot was in before its first start, after that start's
/// position, and then the bot kicked, all before the first sync answers: it was said to a Mind
/// already listening, and is mail, once. A first answer holds no room left, so before, the
/// room was never read and the message was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_said_in_an_old_room_after_the_first_start_before_a_kick_is_mail() {
    let Some(held) = first_start_held("oldkick").await else {
        return;
    };
    let Held {
        rig,
        room,
        faulty,
        running,
        ..
    } = held;
    let before = rig.human.send(&room, "before the kick", &[]).await;
    rig.human.kick(&room, &rig.bot_user.user_id).await;
    faulty.release_mailbox_reads();
    // Committed with the first answer: what it read is in the store.
    rig.first_sync().await;
    let mail = rig.mail().await;
    running.stop().await;
    assert_eq!(said(&mail), vec![("before the kick", before.as_str())]);
    let context: Vec<&str> = mail[0].context.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(context, vec!["backlog"], "the backlog is its context");
}

/// A room the bot was in before its first start, said to after that start's position; the first
/// answer refused, the process stopped, the bot kicked while none ran and the room joined again
/// by the next process's open (on another device, so that Synapse's two-minute response cache
/// does not answer it with the first process's answers, from before the kick). Synapse now
/// answers the room as joined since the position (the account's membership changed), yet the
/// bot was in it at the position: what was said before the kick is mail, what was said while
/// it was out is not, and what follows its return is. Before, the room was read as one joined at
/// the first start, from the new join: what was said before the kick was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_after_a_first_start_that_never_committed_and_the_rejoin_keep_the_mail_before_it() {
    let Some(held) = first_start_held("oldkickrejoin").await else {
        return;
    };
    let before = held
        .rig
        .human
        .send(&held.room, "before the kick", &[])
        .await;
    let (rig, room, configured) = held.stopped_before_its_first_commit().await;
    rig.human.kick(&room, &rig.bot).await;
    rig.human.send(&room, "while the bot is out", &[]).await;

    let running = rig.start(&[&configured], |c| {
        c.accounts[0].device_id = "MUNINNTEST2".into();
    });
    rig.bot_joined(&room).await;
    let after = rig.human.send(&room, "after it is back", &[]).await;
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == after).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_eq!(
        said(&mail),
        vec![
            ("after it is back", after.as_str()),
            ("before the kick", before.as_str()),
        ],
        "mail while the bot was in the room, once"
    );
}

/// Synapse keeps each `/sync` answer a while (two minutes by default; here, on the testkit's
/// homeserver with a short cache, `SHORT_SYNC_CACHE`), per account and device, keyed on the
/// question. A first answer is followed by the questions about the first start (the rooms joined
/// since its position, what was said since it): when those were asked a while after the first
/// answer (here `SLOW`, a store slow to answer between them) and the answer refused, a process
/// on the same device asking again after the first answer left the cache but before the others
/// did gets a new first answer and old answers about it, from before what was said since. What
/// was said after the first start, before the first answer and after the others, is mail all
/// the same, once. Before, the old answer of what was said since the position did not reach the
/// new first answer's last message, and the room's whole first answer was read as history:
/// both messages were lost. (The cache's length changes only how long the test waits: with
/// Synapse's default two minutes it took 2½ minutes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_answer_newer_than_the_cached_answers_about_the_first_start_loses_nothing() {
    const CACHED: Duration = synapse::SHORT_SYNC_CACHE;
    const SLOW: Duration = Duration::from_secs(20);
    let Some(synapse) = synapse::short_sync_cache() else {
        return;
    };
    let rig = rig_on(synapse, "cacherace").await;
    let name = alias("cacherace");
    let room = rig.human.create_room(Some(&name), &[], false).await;
    rig.bot_user.join(&room).await;
    rig.human.send(&room, "backlog", &[]).await;
    let configured = format!("#{name}");
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.hold_mailbox_reads();
    faulty.fail_batches(u32::MAX);
    let running = rig.start_on(faulty.clone(), &[&configured], |_| {});
    eventually("the first sync held", Duration::from_secs(30), || async {
        (faulty.held_mailbox_reads() > 0).then_some(())
    })
    .await;
    // Said after the position: the answers about it are not empty, and Synapse keeps them
    // (it does not keep an answer whose `next_batch` is its `since`).
    let before = rig.human.send(&room, "before the first answer", &[]).await;
    // The first answer is asked, then the first start's position read, slowly, before the
    // questions about it.
    faulty.hold_cursor_reads(FIRST_START_CURSOR);
    faulty.release_mailbox_reads();
    eventually("the first answer read", Duration::from_secs(30), || async {
        (faulty.held_cursor_reads() > 0).then_some(())
    })
    .await;
    let first_answer_at = Instant::now();
    tokio::time::sleep(SLOW).await;
    faulty.release_cursor_reads();
    eventually(
        "the first answer refused",
        Duration::from_secs(30),
        || async { (faulty.refused() > 0).then_some(()) },
    )
    .await;
    running.stop().await;
    let later = rig.human.send(&room, "after the first start", &[]).await;

    // The first answer has left Synapse's cache; the answers about the first start have not.
    tokio::time::sleep(
        (first_answer_at + CACHED + SLOW / 4).saturating_duration_since(Instant::now()),
    )
    .await;
    assert!(
        first_answer_at.elapsed() < CACHED + SLOW * 3 / 4,
        "the test ran too slowly to race"
    );
    let running = rig.start(&[&configured], |_| {});
    rig.first_sync().await;
    let last = rig.human.send(&room, "after the first sync", &[]).await;
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == last).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_eq!(
        said(&mail),
        vec![
            ("after the first start", later.as_str()),
            ("after the first sync", last.as_str()),
            ("before the first answer", before.as_str()),
        ]
    );
}
