//! A configured room the account cannot join yet, through the real `muninn serve`: named in
//! `muninn status` and `GET /v1/minds/{mind}` (`transport.rooms_not_joined`) while `/readyz`
//! stays ready (a mark, not a failure), and joined once it exists, without a restart.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_room_not_joined_yet_is_named_in_status_until_it_is_joined() {
    let Some(synapse) = synapse::shared() else {
        return;
    };
    let (human, bot) = accounts(synapse, "later").await;
    let later = unique("later");
    let mut host = Host::new(&synapse.url(), &bot, &[format!("#{later}")]);
    host.start(None);
    let prefix = format!("vala: matrix has not joined #{later} yet (failing since ");
    let line = wait_for(
        "status naming the room",
        Duration::from_secs(60),
        || async {
            host.muninn(&["status"])
                .lines()
                .find(|l| l.starts_with(&prefix))
                .map(str::to_owned)
        },
    )
    .await;
    assert!(line.contains("M_NOT_FOUND"), "{line}");
    let json: serde_json::Value =
        serde_json::from_str(&host.muninn(&["status", "--format", "json"])).unwrap();
    let transport = &json["minds"][0]["transport"];
    assert_eq!(transport["state"], "open", "{json}");
    assert_eq!(
        transport["rooms_not_joined"][0]["room"],
        format!("#{later}"),
        "{json}"
    );
    let (code, body) = host.get("/readyz");
    assert_eq!(code, 200, "not a failure: {body}");
    // The room is created: joined while the host runs, and the line goes.
    let room = human.create_room(Some(&later), &[], false).await;
    wait_for("the bot in the room", Duration::from_secs(60), || async {
        human
            .joined_members(&room)
            .await
            .contains(&bot)
            .then_some(())
    })
    .await;
    wait_for(
        "status without the line",
        Duration::from_secs(30),
        || async { (!host.muninn(&["status"]).contains("has not joined")).then_some(()) },
    )
    .await;
    host.stop();
}
