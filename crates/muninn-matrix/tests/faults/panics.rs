//! An account whose task panics: reported with the panic's message and opened again.

use crate::*;
use pretty_assertions::assert_eq;

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
