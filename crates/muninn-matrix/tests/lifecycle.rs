//! What a long-lived homeserver account goes through: its device logged out mid-conversation
//! (a password account logs in again on it; an access token account says to configure a new
//! token), a configured room that cannot be joined yet, a room upgraded under it, and its first
//! start (a person speaking between its first join and its first sync).

use super::*;
use pretty_assertions::assert_eq;

/// The bot's fixed device, as `Rig::start` configures it.
const DEVICE: &str = "MUNINNTEST";

/// The Mind answers every delivery not yet answered, each with `answer <its text>`, in order.
async fn answer_all(rig: &Rig, running: &Running, room: &str, answered: &mut usize) {
    let mail = rig.mail().await;
    for delivery in &mail[*answered..] {
        let id = format!("vala-{}-{}-0", delivery.seq, delivery.seq);
        rig.say(&[(&id, room, &format!("answer {}", delivery.text))])
            .await;
    }
    *answered = mail.len();
    running.outbox_changed();
}

/// The bot's messages in `room` once there are `n` of them.
async fn bot_said(rig: &Rig, room: &str, n: usize) -> Vec<String> {
    eventually(&format!("{n} answers"), Duration::from_secs(60), || async {
        let bodies: Vec<String> = rig
            .human
            .messages(room)
            .await
            .into_iter()
            .filter(|m| m.sender == rig.bot)
            .map(|m| m.body)
            .collect();
        (bodies.len() >= n).then_some(bodies)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_logged_out_mid_conversation_logs_in_again_and_loses_and_repeats_nothing() {
    let Some(rig) = rig("logout").await else {
        return;
    };
    let name = alias("logout");
    let room = rig.public_room(&name).await;
    let public = format!("#{name}");
    let running = rig.start(&[&public], |_| {});
    rig.bot_joined(&room).await;
    // The first sync is history: what is said before it ends is context, never mail.
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "one", &[]).await];
    rig.mail_count(1).await;
    let mut answered = 0;
    answer_all(&rig, &running, &public, &mut answered).await;
    bot_said(&rig, &room, 1).await;

    // The operator logs the bot's device out (Synapse deletes it: every token of it is
    // refused), while the person keeps talking and the Mind keeps answering.
    rig.synapse
        .login(&rig.bot, PASSWORD, DEVICE)
        .await
        .logout()
        .await;
    said.push(rig.human.send(&room, "two", &[]).await);
    said.push(rig.human.send(&room, "three", &[]).await);
    rig.mail_count(3).await;
    answer_all(&rig, &running, &public, &mut answered).await;
    let answers = bot_said(&rig, &room, 3).await;
    said.push(rig.human.send(&room, "four", &[]).await);
    rig.mail_count(4).await;
    answer_all(&rig, &running, &public, &mut answered).await;
    bot_said(&rig, &room, 4).await;
    // Time for a repeat to show up, had there been one.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mail = rig.mail().await;
    let answers_then = bot_said(&rig, &room, 4).await;
    let health = running.health.lock().unwrap().clone();
    let stats = running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        said.iter().map(String::as_str).collect::<Vec<_>>(),
        "every message delivered once"
    );
    assert_eq!(
        answers_then,
        vec!["answer one", "answer two", "answer three", "answer four"],
        "every answer sent once ({answers:?} after the logout)"
    );
    assert_eq!(stats.sent, 4);
    assert!(
        health.iter().any(|h| matches!(h,
            AccountHealth::Failing { stage: "sync", error } if error.contains("M_UNKNOWN_TOKEN"))),
        "the refusal was reported: {health:?}"
    );
    assert_eq!(health.last(), Some(&AccountHealth::Open), "{health:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_token_refused_mid_run_says_to_configure_a_new_one() {
    let Some(rig) = rig("tokenout").await else {
        return;
    };
    let name = alias("tokenout");
    let room = rig.public_room(&name).await;
    let device = rig.synapse.login(&rig.bot, PASSWORD, DEVICE).await;
    let token = device.access_token().to_owned();
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.accounts[0].credential = Credential::AccessToken(Secret::new(&token));
    });
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    device.logout().await;
    let error = eventually(
        "the account failing on the refused token",
        Duration::from_secs(30),
        || async {
            let health = running.health.lock().unwrap().clone();
            health.into_iter().find_map(|h| match h {
                AccountHealth::Failing {
                    stage: "login",
                    error,
                } => Some(error),
                _ => None,
            })
        },
    )
    .await;
    running.stop().await;
    assert!(
        error.starts_with("the homeserver refused the access token (M_UNKNOWN_TOKEN: ")
            && error.ends_with(
                "configure a new one (a token file is read again every 30 s; a variable, \
                 when muninn restarts)"
            ),
        "{error}"
    );
    assert!(!error.contains(&token), "no credential in the error");
}

/// An access token read from a file, refused mid-run (its device logged out); its owner logs
/// in again on the same device and writes the new token to the file. The connector reads the
/// file again at the refusal (or at the next try, 30 s later, if it got there first) and carries
/// on with the new token: the next message is mail and the account is open, with no restart.
/// Before, the token was read once, at the start, and the account failed until a restart.
/// No line of the run, at any level, holds either token (the file read again, the new token
/// checked with `whoami` and put in use).
// On one thread: the subscriber below is this thread's, and the connector's tasks run on it.
#[tokio::test(flavor = "current_thread")]
async fn a_new_access_token_in_its_file_is_taken_without_a_restart() {
    let Some(rig) = rig("tokenfile").await else {
        return;
    };
    let (logs, _capture) = Logs::capture(tracing::Level::TRACE);
    let name = alias("tokenfile");
    let room = rig.public_room(&name).await;
    let device = rig.synapse.login(&rig.bot, PASSWORD, DEVICE).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{}\n", device.access_token())).unwrap();
    let reread = file.clone();
    let running = rig.start(&[&format!("#{name}")], |c| {
        let account = &mut c.accounts[0];
        account.credential = Credential::AccessToken(Secret::new(device.access_token()));
        account.reread = Some(muninn_matrix::Reread::new(move || {
            let text = std::fs::read_to_string(&reread).map_err(|e| e.to_string())?;
            Ok(Secret::new(&text))
        }));
    });
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    device.logout().await;
    let again = rig.synapse.login(&rig.bot, PASSWORD, DEVICE).await;
    std::fs::write(&file, again.access_token()).unwrap();
    let said = rig.human.send(&room, "after the new token", &[]).await;
    let mail = eventually("the message", Duration::from_secs(45), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == said).then_some(mail)
    })
    .await;
    eventually("the account open", Duration::from_secs(10), || async {
        let health = running.health.lock().unwrap().clone();
        (health.last() == Some(&AccountHealth::Open)).then_some(())
    })
    .await;
    running.stop().await;
    assert_eq!(mail.len(), 1, "{mail:?}");
    no_line_holds(&logs, &[device.access_token(), again.access_token()]);
}

/// Fails if a line of `logs` holds one of `secrets` or a `syt_` token; and if none says the
/// token was refused (the paths looked at did log).
fn no_line_holds(logs: &Logs, secrets: &[&str]) {
    let text = logs.text();
    for secret in secrets.iter().chain(&["syt_"]) {
        assert!(!text.contains(secret), "a log line carries {secret:?}");
    }
    assert!(
        text.contains("refused the access token"),
        "the refusal is logged"
    );
}

/// An access token read from a file and refused at the start (its device logged out before
/// muninn started): the account fails at `login`, and its error says a token file is read
/// again every 30 s. The owner logs in again on the same device and writes the new token to
/// the file: the next try of the open reads it, and the account opens with no restart, its
/// room joined and the next message mail. Before, the open's tries used the token read at load.
/// No line of the run, at any level, holds either token.
// On one thread: the subscriber below is this thread's, and the connector's tasks run on it.
#[tokio::test(flavor = "current_thread")]
async fn a_token_refused_at_the_start_is_read_again_from_its_file() {
    let Some(rig) = rig("tokenstart").await else {
        return;
    };
    let (logs, _capture) = Logs::capture(tracing::Level::TRACE);
    let name = alias("tokenstart");
    let room = rig.public_room(&name).await;
    let device = rig.synapse.login(&rig.bot, PASSWORD, DEVICE).await;
    let stale = device.access_token().to_owned();
    device.logout().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{stale}\n")).unwrap();
    let reread = file.clone();
    let running = rig.start(&[&format!("#{name}")], |c| {
        let account = &mut c.accounts[0];
        account.credential = Credential::AccessToken(Secret::new(&stale));
        account.reread = Some(muninn_matrix::Reread::new(move || {
            let text = std::fs::read_to_string(&reread).map_err(|e| e.to_string())?;
            Ok(Secret::new(text.trim()))
        }));
    });
    let error = eventually("the open refused", Duration::from_secs(30), || async {
        let health = running.health.lock().unwrap().clone();
        health.into_iter().find_map(|h| match h {
            AccountHealth::Failing {
                stage: "login",
                error,
            } => Some(error),
            _ => None,
        })
    })
    .await;
    assert!(error.contains("a token file is read again"), "{error}");
    let again = rig.synapse.login(&rig.bot, PASSWORD, DEVICE).await;
    std::fs::write(&file, again.access_token()).unwrap();
    // The open's next try is at most 30 s after the refusal.
    eventually("the account open", Duration::from_secs(45), || async {
        let health = running.health.lock().unwrap().clone();
        (health.last() == Some(&AccountHealth::Open)).then_some(())
    })
    .await;
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let said = rig.human.send(&room, "after the new token", &[]).await;
    let mail = rig.mail_count(1).await;
    running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        vec![said.as_str()]
    );
    no_line_holds(&logs, &[&stale, again.access_token()]);
}

/// A password read from a file, changed by its owner from another device (which logs the
/// connector's device out), the new one written to the file: the connector's new login reads
/// the file again and uses it, with no restart; the next message is mail and the account open.
/// Before, the password was read once, at the start, and every new login was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_password_in_its_file_is_taken_without_a_restart() {
    let Some(rig) = rig("passfile").await else {
        return;
    };
    let name = alias("passfile");
    let room = rig.public_room(&name).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, PASSWORD).unwrap();
    let reread = file.clone();
    let running = rig.start(&[&format!("#{name}")], |c| {
        c.accounts[0].reread = Some(muninn_matrix::Reread::new(move || {
            let text = std::fs::read_to_string(&reread).map_err(|e| e.to_string())?;
            Ok(Secret::new(&text))
        }));
    });
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let changed = "a-new-password";
    std::fs::write(&file, format!("{changed}\n")).unwrap();
    rig.bot_user.change_password(PASSWORD, changed, true).await;
    let said = rig.human.send(&room, "after the new password", &[]).await;
    let mail = eventually("the message", Duration::from_secs(45), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == said).then_some(mail)
    })
    .await;
    eventually("the account open", Duration::from_secs(10), || async {
        let health = running.health.lock().unwrap().clone();
        (health.last() == Some(&AccountHealth::Open)).then_some(())
    })
    .await;
    running.stop().await;
    assert_eq!(mail.len(), 1, "{mail:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_rooms_out_of_reach_at_the_start_are_joined_when_they_can_be() {
    let Some(rig) = rig("later").await else {
        return;
    };
    // One room not created yet (its alias resolves to nothing), one private room the bot is
    // not invited to yet; and one room it can join, so the account opens and reads meanwhile.
    let (later, now) = (alias("later"), alias("now"));
    let now_room = rig.public_room(&now).await;
    let private = rig.human.create_room(None, &[], false).await;
    let (later_name, now_name) = (format!("#{later}"), format!("#{now}"));
    let running = rig.start(&[&later_name, &private, &now_name], |_| {});
    rig.bot_joined(&now_room).await;
    let first = eventually("a report", Duration::from_secs(30), || async {
        running.not_joined.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(
        first.iter().map(|r| r.room.as_str()).collect::<Vec<_>>(),
        vec![later_name.as_str(), private.as_str()],
        "both named: {first:?}"
    );
    assert!(first[0].error.contains("M_NOT_FOUND"), "{first:?}");
    assert!(first[1].error.contains("M_FORBIDDEN"), "{first:?}");

    // The room is created, the invite sent: both are joined while the account runs, and what
    // is said in them from then on is mail.
    let later_room = rig.human.create_room(Some(&later), &[], false).await;
    rig.human.invite(&private, &rig.bot).await;
    rig.bot_joined(&later_room).await;
    rig.bot_joined(&private).await;
    let said = [
        rig.human.send(&later_room, "in the later room", &[]).await,
        rig.human.send(&private, "in the private room", &[]).await,
    ];
    let mail = rig.mail_count(2).await;
    let reports = running.not_joined.lock().unwrap().clone();
    running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| (d.source_id.as_str(), d.room.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (said[0].as_str(), later_name.as_str()),
            (said[1].as_str(), private.as_str())
        ],
        "named as configured"
    );
    assert_eq!(reports.last(), Some(&Vec::new()), "all joined: {reports:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_room_is_followed_and_what_was_said_before_the_join_is_mail() {
    let Some(rig) = rig("upgrade").await else {
        return;
    };
    let name = alias("upgrade");
    let room = rig.public_room(&name).await;
    let public = format!("#{name}");
    let running = rig.start(&[&public], |_| {});
    rig.bot_joined(&room).await;
    // The first sync is history: what is said before it ends is context, never mail.
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "before the upgrade", &[]).await];
    rig.mail_count(1).await;
    // The creator upgrades the room and talks on in the replacement at once: before the bot
    // can have joined it.
    let replacement = rig.human.upgrade_room(&room, "11").await;
    said.push(rig.human.send(&replacement, "right after", &[]).await);
    said.push(rig.human.send(&replacement, "and again", &[]).await);
    rig.bot_joined(&replacement).await;
    said.push(rig.human.send(&replacement, "after the join", &[]).await);
    let mail = rig.mail_count(4).await;
    // The Mind answers in the room as it names it: the reply goes to the replacement.
    rig.say(&[("vala-4-4-0", &public, "still here")]).await;
    running.outbox_changed();
    eventually(
        "the answer in the replacement",
        Duration::from_secs(30),
        || async {
            let messages = rig.human.messages(&replacement).await;
            messages.iter().any(|m| m.sender == rig.bot).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = rig.mail().await;
    let stats = running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| (d.source_id.as_str(), d.room.as_str()))
            .collect::<Vec<_>>(),
        said.iter()
            .map(|id| (id.as_str(), public.as_str()))
            .collect::<Vec<_>>(),
        "every message once, named as configured: {:?}",
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>()
    );
    assert_eq!(again.len(), 4, "nothing more");
    assert_eq!((stats.sent, stats.failed), (1, 0));
}

/// The upgrade while the connector is stopped, the room configured by its id (which the
/// upgrade does not move, as it moves an alias): the tombstone is read at the next start and
/// the replacement joined then, well after people talked in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_upgraded_while_stopped_is_followed_and_read_from_its_start() {
    let Some(rig) = rig("upgraded").await else {
        return;
    };
    let room = rig.public_room(&alias("upgraded")).await;
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&room).await;
    // Said after the first sync, which is history: said before it, the message was context.
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "before the upgrade", &[]).await];
    rig.mail_count(1).await;
    running.stop().await;
    let replacement = rig.human.upgrade_room(&room, "11").await;
    said.push(
        rig.human
            .send(&replacement, "while you were away", &[])
            .await,
    );
    said.push(rig.human.send(&replacement, "still away?", &[]).await);
    let running = rig.start(&[&room], |_| {});
    rig.bot_joined(&replacement).await;
    said.push(rig.human.send(&replacement, "welcome back", &[]).await);
    let mail = rig.mail_count(4).await;
    rig.say(&[("vala-4-4-0", &room, "here")]).await;
    running.outbox_changed();
    eventually(
        "the answer in the replacement",
        Duration::from_secs(30),
        || async {
            let messages = rig.human.messages(&replacement).await;
            messages.iter().any(|m| m.sender == rig.bot).then_some(())
        },
    )
    .await;
    let stats = running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| (d.source_id.as_str(), d.room.as_str()))
            .collect::<Vec<_>>(),
        said.iter()
            .map(|id| (id.as_str(), room.as_str()))
            .collect::<Vec<_>>(),
        "every message once, named as configured: {:?}",
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>()
    );
    assert_eq!((stats.sent, stats.failed), (1, 0));
}

/// The password changed under a running account (its owner, from another device, logging the
/// others out): the account's token is refused and its new login with the configured password
/// is refused too. The failure is loud (stage `login`, the homeserver's reason), retried on the
/// longest backoff step rather than in a hot loop, recovers once the password is the configured
/// one again, and no log line at any level carries the password or a token.
// On one thread: the subscriber below is this thread's, and the connector's tasks run on it.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_login_is_loud_bounded_and_recovers_and_no_line_carries_a_secret() {
    let Some(rig) = rig("newpass").await else {
        return;
    };
    let (logs, _capture) = Logs::capture(tracing::Level::TRACE);
    let name = alias("newpass");
    let room = rig.public_room(&name).await;
    let running = rig.start(&[&format!("#{name}")], |_| {});
    rig.bot_joined(&room).await;
    rig.first_sync().await;
    let mut said = vec![rig.human.send(&room, "one", &[]).await];
    rig.mail_count(1).await;
    const CHANGED: &str = "a-password-muninn-was-not-given";
    rig.bot_user.change_password(PASSWORD, CHANGED, true).await;
    let failing = eventually("the login failing", Duration::from_secs(30), || async {
        let health = running.health.lock().unwrap().clone();
        health.into_iter().find_map(|h| match h {
            AccountHealth::Failing {
                stage: "login",
                error,
            } => Some(error),
            _ => None,
        })
    })
    .await;
    // A few seconds of failing: at most one more try (the longest step is 30 s).
    let logins_before = logs.count("matrix: sync failed");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let logins_during = logs.count("matrix: sync failed") - logins_before;
    rig.bot_user.change_password(CHANGED, PASSWORD, false).await;
    said.push(rig.human.send(&room, "two", &[]).await);
    let mail = eventually("the account back", Duration::from_secs(60), || async {
        let mail = rig.mail().await;
        (mail.len() >= 2).then_some(mail)
    })
    .await;
    // The sync that brings the mail is reported open only after its batch is committed: wait
    // for that report rather than read the health the moment the mail shows.
    eventually(
        "the account open again",
        Duration::from_secs(30),
        || async {
            let health = running.health.lock().unwrap().clone();
            (health.last() == Some(&AccountHealth::Open)).then_some(())
        },
    )
    .await;
    running.stop().await;
    assert!(failing.contains("M_FORBIDDEN"), "{failing}");
    assert!(logins_during <= 1, "{logins_during} tries in 3 s");
    assert!(logs.count("matrix: sync failed") >= 1, "each try is logged");
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        said.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let text = logs.text();
    for secret in [PASSWORD, CHANGED, "syt_", rig.bot_user.access_token()] {
        assert!(!text.contains(secret), "a log line carries {secret:?}");
    }
    assert!(text.contains("M_FORBIDDEN"), "the refusal is logged");
}

/// The first start: the account joins its configured room, and the person speaks before the
/// first sync is asked (the sync is held there, at the mailbox read before it). What follows the
/// join is mail, once; what was said before it, while the bot was only invited, is history, and
/// so is what was said in a room the bot was in before it ever ran (its backlog). A
/// direct chat the bot was invited to before it ever ran, accepted in the first answer, has its
/// mail from the invite on, as before. Before, the first sync read the room's whole timeline as
/// history and the message said after the join was never delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_said_after_the_first_join_and_before_the_first_sync_is_mail_once() {
    let Some(HeldAfterJoin {
        rig,
        room,
        public,
        earlier,
        dm: _,
        invited,
        between,
        faulty,
        running,
    }) = a_first_start_held_after_its_join("between").await
    else {
        return;
    };
    faulty.release_mailbox_reads();
    rig.first_sync().await;
    let after = rig.human.send(&room, "after the first sync", &[]).await;
    // Each message once, by its event id (the rooms' mail comes in no fixed order).
    let ids = |mail: &[Delivery]| {
        let mut ids: Vec<(String, String)> = (mail.iter())
            .map(|d| (d.text.clone(), d.source_id.clone()))
            .collect();
        ids.sort();
        ids
    };
    let mut expected = vec![
        ("after the first sync".to_owned(), after.clone()),
        ("after the join".to_owned(), between.clone()),
        ("while invited".to_owned(), invited),
    ];
    // The last said is mail in any case; once it is, everything said before it was read (the
    // direct chat's join, made while the first answer was read, is older than it).
    let mail = eventually("the last message", Duration::from_secs(30), || async {
        let mail = rig.mail().await;
        mail.iter().any(|d| d.source_id == after).then_some(mail)
    })
    .await;
    running.stop().await;
    assert_eq!(ids(&mail), expected);
    let delivery = mail.iter().find(|d| d.source_id == between).unwrap();
    let context: Vec<&str> = delivery.context.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(context, vec!["before the join"], "the backlog is context");

    // A restart reads on from the stored position: nothing is mail twice.
    let running = rig.start(&[&public, &earlier], |_| {});
    let later = rig.human.send(&room, "after a restart", &[]).await;
    let mail = rig.mail_count(4).await;
    running.stop().await;
    expected.insert(0, ("after a restart".to_owned(), later));
    assert_eq!(ids(&mail), expected);
}

/// The first start again, with more said between the join and the first sync than a timeline
/// holds: the first answer's timeline does not reach the join, and the room is paged back to it.
/// Everything after the join is mail, in order, once; nothing before it is, and what was said
/// before it is context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_said_after_the_first_join_than_a_timeline_holds_is_paged_back_to_the_join() {
    let Some(rig) = rig("betweenlong").await else {
        return;
    };
    let name = alias("betweenlong");
    let room = rig.public_room(&name).await;
    rig.human.send(&room, "before the join", &[]).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.hold_mailbox_reads();
    let public = format!("#{name}");
    let running = rig.start_on(faulty.clone(), &[&public], |c| c.timeline_limit = 2);
    rig.bot_joined(&room).await;
    eventually("the first sync held", Duration::from_secs(30), || async {
        (faulty.held_mailbox_reads() > 0).then_some(())
    })
    .await;
    let mut said = Vec::new();
    for n in 0..4 {
        said.push(
            rig.human
                .send(&room, &format!("after the join {n}"), &[])
                .await,
        );
    }
    faulty.release_mailbox_reads();
    rig.first_sync().await;
    let mail = rig.mail().await;
    let stats = running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| (d.text.as_str(), d.source_id.as_str()))
            .collect::<Vec<_>>(),
        (0..4)
            .map(|n| [
                "after the join 0",
                "after the join 1",
                "after the join 2",
                "after the join 3"
            ][n])
            .zip(said.iter().map(String::as_str))
            .collect::<Vec<_>>()
    );
    assert!(stats.pages > 0, "the join was paged back to: {stats:?}");
    // What came just before the join, in the page that held it, is the first mail's context.
    // Before, paging stopped at the join and returned the token past the whole page: the
    // page's older events were dropped, and the context asked from that token began before
    // them.
    let context: Vec<&str> = mail[0].context.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(context, vec!["before the join"], "the first mail's context");
}

/// Two hosts whose different Minds are configured with the same account (one host refuses it
/// at load; two cannot see each other's configuration), on the same fixed device, over one
/// store: each Mind has its own sync position and reads every message of the room once —
/// nothing is lost, and both Minds are told everything (each will answer). A login on the
/// device by one host leaves the other's token valid (Synapse keeps a device's tokens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_minds_on_one_account_each_read_every_message_once() {
    let Some(rig) = rig("twominds").await else {
        return;
    };
    const OTHER: &str = "odin";
    rig.store
        .create_mind(&Mind {
            id: OTHER.into(),
            display_name: "Odin".into(),
            config: serde_json::json!({}),
            created_at_ms: 0,
        })
        .await
        .unwrap();
    let name = alias("twominds");
    let room = rig.public_room(&name).await;
    let configured = format!("#{name}");
    let vala = rig.start(&[&configured], |_| {});
    let odin = rig.start(&[&configured], |c| c.accounts[0].mind = OTHER.into());
    for mind in [MIND, OTHER] {
        eventually("both first syncs", Duration::from_secs(30), || async {
            let cursor = rig.store.cursor(mind, SYNC_CURSOR).await.unwrap();
            cursor.map(|_| ())
        })
        .await;
    }
    let mut said = Vec::new();
    for n in 0..3 {
        let text = format!("m{n}");
        said.push((text.clone(), rig.human.send(&room, &text, &[]).await));
    }
    let mut mail = Vec::new();
    for mind in [MIND, OTHER] {
        let read = eventually("every message", Duration::from_secs(30), || async {
            let mail = rig.store.pending_deliveries(mind, 0, 100).await.unwrap();
            (mail.len() >= said.len()).then_some(mail)
        })
        .await;
        mail.push(read);
    }
    // A sync more each, so that a message read twice would be in the mailbox by now.
    let last = rig.human.send(&room, "m3", &[]).await;
    said.push(("m3".to_owned(), last));
    for (mind, read) in [MIND, OTHER].into_iter().zip(mail.iter_mut()) {
        *read = eventually("the last message", Duration::from_secs(30), || async {
            let mail = rig.store.pending_deliveries(mind, 0, 100).await.unwrap();
            (mail.len() >= said.len()).then_some(mail)
        })
        .await;
    }
    vala.stop().await;
    odin.stop().await;
    for read in mail {
        let read: Vec<(String, String)> =
            (read.into_iter()).map(|d| (d.text, d.source_id)).collect();
        assert_eq!(read, said);
    }
}
