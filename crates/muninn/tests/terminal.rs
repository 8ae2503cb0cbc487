//! Text someone else wrote reaches the operator's terminal escaped: `muninn tail` and `status`
//! print a room, a reply and a failure reason carrying a title change, a screen clear, an OSC 52
//! clipboard write and C1 controls as visible `\uXXXX` text, never as the bytes themselves.

use crate::host_cli::{served, stdout};
use muninn_store::NewOutboxMessage;

const T0: i64 = 1_750_000_000_000;
/// Title, clear screen, clipboard write (ended by BEL), a C1 CSI, a carriage return.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}]52;c;ZWNobyBoaQ==\u{7}\u{9b}31m\rfake";
const SHOWN: &str =
    "\\u001b]0;owned\\u0007\\u001b[2J\\u001b]52;c;ZWNobyBoaQ==\\u0007\\u009b31m\\u000dfake";

/// No byte a terminal acts on but newline (C0 but `\n`, DEL, and C1 as UTF-8).
fn assert_inert(out: &str) {
    for c in out.chars() {
        assert!(
            c == '\n' || !(c.is_control()),
            "a control character {c:?} reached the terminal:\n{out:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_and_status_escape_what_others_wrote() {
    let served = served().await;
    let store = &served.host.store;
    let lease = store
        .acquire_lease("vala", "h", 60_000, T0)
        .await
        .unwrap()
        .unwrap();
    let room = format!("#r{HOSTILE}");
    store
        .enqueue_outbox(
            "vala",
            lease.token,
            &[NewOutboxMessage {
                request_id: "b1-0".into(),
                room: room.clone(),
                text: HOSTILE.into(),
                created_at_ms: T0,
            }],
        )
        .await
        .unwrap();
    let out = stdout(&served.muninn(&["tail", "vala"]).await);
    assert_inert(&out);
    assert!(
        out.contains(&format!("outbox b1-0 → #r{SHOWN}: {SHOWN}")),
        "{out}"
    );
    // JSON output stays valid and decodes to the very text.
    let out = stdout(&served.muninn(&["tail", "vala", "--format", "json"]).await);
    assert_inert(&out);
    let line: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(line["outbox"]["text"], HOSTILE);

    store
        .fail_outbox("vala", "b1-0", HOSTILE, T0)
        .await
        .unwrap();
    let out = stdout(&served.muninn(&["status"]).await);
    assert_inert(&out);
    assert!(out.contains(SHOWN), "{out}");
}
