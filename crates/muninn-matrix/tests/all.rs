//! muninn-matrix's one integration-test binary: the connector against a real Synapse
//! (`muninn_testkit::synapse`, one homeserver for the whole binary, and a second whose `/sync`
//! response cache is short for the test of that cache), with a SQLite store and
//! the test itself standing in for the Mind (reading the mailbox, writing the outbox, acking).
//! The Mind's runtime and the real binary are exercised by the `muninn` crate's tests
//! (`matrix.rs` there: a conversation, `kill -9` at each crash point, a homeserver restart).
//!
//! Each test registers its own person and bot (cheap: the test homeserver hashes with 4 bcrypt
//! rounds) and its own rooms, so tests run in parallel without seeing each other's mail. Rooms
//! are read with `/messages`: Synapse's two-minute `/sync` cache would show a second `/sync`
//! with the same token a stale answer.
//!
//! Without Synapse (`scripts/install-synapse.sh`) every test fails (prints SKIP only
//! under `MUNINN_SKIP_PEERS=1`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_backend::clock::SystemClock;
use muninn_matrix::config::{FIRST_START_CURSOR, SYNC_CURSOR};
use muninn_matrix::{
    Account, AccountHealth, Connector, ConnectorConfig, Credential, GapsCut, RoomNotJoined, Secret,
    Stats, StatsSnapshot,
};
use muninn_store::{Delivery, FencingToken, Mind, NewOutboxMessage, SqliteStore, Store};
use muninn_testkit::synapse::{self, MatrixUser, Synapse};
use pretty_assertions::assert_eq;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

mod faults;
mod first_start;
mod gaps;
mod lifecycle;
mod upgrades;

const MIND: &str = "vala";
const PASSWORD: &str = "muninn-test-password";

/// One test's world: a person, a bot account, a store with the Mind, and the connector's knobs.
struct Rig {
    synapse: &'static Synapse,
    human: MatrixUser,
    bot: String,
    /// The bot's account as a client of its own (another device), for what its owner does.
    bot_user: MatrixUser,
    store: Arc<dyn Store>,
    token: FencingToken,
    _dir: tempfile::TempDir,
}

/// A running connector.
struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<Stats>,
    outbox: watch::Sender<u64>,
    /// Every health report, in order.
    health: Arc<Mutex<Vec<AccountHealth>>>,
    /// Every report of the configured rooms not joined yet, in order.
    not_joined: Arc<Mutex<Vec<Vec<RoomNotJoined>>>>,
}

impl Running {
    async fn stop(self) -> StatsSnapshot {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the connector stops within 10 s")
            .unwrap();
        self.stats.snapshot()
    }

    fn outbox_changed(&self) {
        self.outbox.send_modify(|n| *n += 1);
    }
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures this thread's log lines up to `level` while the returned guards live (a test
    /// on one thread: the connector's tasks run on it).
    fn capture(
        level: tracing::Level,
    ) -> (Logs, (tracing::Dispatch, tracing::subscriber::DefaultGuard)) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(level)
            .with_ansi(false)
            .finish();
        // Tracing caches each callsite's interest process-wide; a second, inert dispatcher kept
        // alive makes registration ask this thread's subscriber too.
        let anchor = tracing::Dispatch::new(tracing_subscriber::registry());
        let guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        (logs, (anchor, guard))
    }

    /// What was logged so far.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// How many lines logged so far hold `what`.
    fn count(&self, what: &str) -> usize {
        self.text().lines().filter(|l| l.contains(what)).count()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static USERS: AtomicU64 = AtomicU64::new(0);

async fn rig(test: &str) -> Option<Rig> {
    Some(rig_on(synapse::shared()?, test).await)
}

/// A [`rig`] on `synapse` (one of the testkit's kept homeservers).
async fn rig_on(synapse: &'static Synapse, test: &str) -> Rig {
    let n = USERS.fetch_add(1, Ordering::Relaxed);
    let human = synapse.register(&format!("ann-{test}-{n}"), PASSWORD).await;
    let bot_user = synapse
        .register(&format!("vala-{test}-{n}"), PASSWORD)
        .await;
    let bot = bot_user.user_id.clone();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_in(dir.path()).await.unwrap());
    store
        .create_mind(&Mind {
            id: MIND.into(),
            display_name: "Vala".into(),
            config: serde_json::json!({}),
            created_at_ms: 0,
        })
        .await
        .unwrap();
    let token = store
        .acquire_lease(MIND, "test", 3_600_000, 0)
        .await
        .unwrap()
        .unwrap()
        .token;
    Rig {
        synapse,
        human,
        bot,
        bot_user,
        store,
        token,
        _dir: dir,
    }
}

impl Rig {
    /// Starts a connector for the bot in `rooms`, its configuration adjusted by `tweak`.
    fn start(&self, rooms: &[&str], tweak: impl FnOnce(&mut ConnectorConfig)) -> Running {
        self.start_on(self.store.clone(), rooms, tweak)
    }

    /// Starts a connector as [`Rig::start`] does, over `store` (the rig's, wrapped).
    fn start_on(
        &self,
        store: Arc<dyn Store>,
        rooms: &[&str],
        tweak: impl FnOnce(&mut ConnectorConfig),
    ) -> Running {
        let mut config = ConnectorConfig::new(self.synapse.url());
        config.sync_timeout = Duration::from_secs(5);
        config.accounts.push(Account {
            mind: MIND.into(),
            user_id: self.bot.clone(),
            device_id: "MUNINNTEST".into(),
            credential: Credential::Password(Secret::new(PASSWORD)),
            rooms: rooms.iter().map(|r| r.to_string()).collect(),
            accept_dm_invites: true,
            reread: None,
        });
        tweak(&mut config);
        let (outbox, outbox_rx) = watch::channel(0);
        let health = Arc::new(Mutex::new(Vec::new()));
        let reports = health.clone();
        let not_joined = Arc::new(Mutex::new(Vec::new()));
        let rooms_reports = not_joined.clone();
        let connector = Connector::new(config, store, Arc::new(SystemClock))
            .outbox_changed(outbox_rx)
            .on_health(Arc::new(move |_, report| {
                reports.lock().unwrap().push(report);
            }))
            .on_rooms_not_joined(Arc::new(move |_, rooms| {
                rooms_reports.lock().unwrap().push(rooms.to_vec());
            }));
        let stats = connector.stats();
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(connector.run(stopped));
        Running {
            stop,
            task,
            stats,
            outbox,
            health,
            not_joined,
        }
    }

    /// Waits until the connector has committed its first sync (the sync cursor is stored).
    async fn first_sync(&self) {
        eventually("the first sync", Duration::from_secs(30), || async {
            let cursor = self.store.cursor(MIND, SYNC_CURSOR).await.unwrap();
            cursor.map(|_| ())
        })
        .await;
    }

    async fn mail(&self) -> Vec<Delivery> {
        self.store
            .pending_deliveries(MIND, 0, 10_000)
            .await
            .unwrap()
    }

    /// Waits until the mailbox holds `n` deliveries.
    async fn mail_count(&self, n: usize) -> Vec<Delivery> {
        eventually(
            &format!("{n} deliveries"),
            Duration::from_secs(30),
            || async {
                let mail = self.mail().await;
                (mail.len() >= n).then_some(mail)
            },
        )
        .await
    }

    /// Records outbox messages as the Mind's turn would.
    async fn say(&self, messages: &[(&str, &str, &str)]) {
        let now = now_ms();
        let rows: Vec<NewOutboxMessage> = messages
            .iter()
            .map(|(id, room, text)| NewOutboxMessage {
                request_id: id.to_string(),
                room: room.to_string(),
                text: text.to_string(),
                created_at_ms: now,
            })
            .collect();
        self.store
            .enqueue_outbox(MIND, self.token, &rows)
            .await
            .unwrap();
    }

    /// The human's room, public with an alias, the bot invited.
    /// Waits until the bot is among `room`'s joined members.
    async fn bot_joined(&self, room: &str) {
        eventually("the bot joined", Duration::from_secs(30), || async {
            let members = self.human.joined_members(room).await;
            members.contains(&self.bot).then_some(())
        })
        .await;
    }

    async fn public_room(&self, alias: &str) -> String {
        self.human
            .create_room(Some(alias), &[&self.bot], false)
            .await
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls `check` every 50 ms until it gives a value, failing after `within`.
async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A first start held just before its first sync, after the account joined its configured
/// public room: said there before the join, "before the join"; a room the bot was in before it
/// ever ran, with its "backlog" (both configured); a direct chat it is invited to, with "while
/// invited"; and, once the first sync is held, "after the join" (the event ids of the last two).
struct HeldAfterJoin {
    rig: Rig,
    room: String,
    /// The public room's `#alias`, configured.
    public: String,
    /// The earlier room's `#alias`, configured.
    earlier: String,
    dm: String,
    invited: String,
    between: String,
    faulty: Arc<muninn_testkit::FaultyStore>,
    running: Running,
}

/// [`HeldAfterJoin`] for `test` (`None` without Synapse, as [`rig`]).
async fn a_first_start_held_after_its_join(test: &str) -> Option<HeldAfterJoin> {
    let rig = rig(test).await?;
    let name = alias(test);
    let room = rig.public_room(&name).await;
    rig.human.send(&room, "before the join", &[]).await;
    // A room the bot was in before it ever ran: its backlog is history, never answered.
    let earlier = alias(&format!("{test}-earlier"));
    let before = rig.human.create_room(Some(&earlier), &[], false).await;
    rig.bot_user.join(&before).await;
    rig.human.send(&before, "backlog", &[]).await;
    let earlier = format!("#{earlier}");
    let dm = rig.human.create_room(None, &[&rig.bot], true).await;
    let invited = rig.human.send(&dm, "while invited", &[]).await;
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    faulty.hold_mailbox_reads();
    let public = format!("#{name}");
    let running = rig.start_on(faulty.clone(), &[&public, &earlier], |_| {});
    rig.bot_joined(&room).await;
    eventually("the first sync held", Duration::from_secs(30), || async {
        (faulty.held_mailbox_reads() > 0).then_some(())
    })
    .await;
    let between = rig.human.send(&room, "after the join", &[]).await;
    Some(HeldAfterJoin {
        rig,
        room,
        public,
        earlier,
        dm,
        invited,
        between,
        faulty,
        running,
    })
}

/// A unique alias localpart.
fn alias(test: &str) -> String {
    format!(
        "{test}-{}-{}",
        std::process::id(),
        USERS.fetch_add(1, Ordering::Relaxed)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_sync_is_history_then_each_message_is_mail_once_with_its_context() {
    let Some(rig) = rig("first").await else {
        return;
    };
    let name = alias("first");
    let room = rig.public_room(&name).await;
    for text in ["old one", "old two", "old three"] {
        rig.human.send(&room, text, &[]).await;
    }
    // `#alias` without a server: the account's own.
    let running = rig.start(&[&format!("#{name}")], |_| {});
    rig.bot_joined(&room).await;
    // The first sync is history: what is said before it ends is context, never mail.
    rig.first_sync().await;
    let first = rig.human.send(&room, "new one", &[]).await;
    let second = rig.human.send(&room, "new two, vala?", &[&rig.bot]).await;
    let mail = rig.mail_count(2).await;
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        vec![first.as_str(), second.as_str()],
        "the history before was not mail"
    );
    assert_eq!(
        mail[0].room,
        format!("#{name}"),
        "named as the Mind names it"
    );
    assert!(!mail[0].is_direct && !mail[0].to_you && mail[1].to_you);
    let texts = |d: &Delivery| d.context.iter().map(|l| l.text.clone()).collect::<Vec<_>>();
    assert_eq!(texts(&mail[0]), vec!["old one", "old two", "old three"]);
    assert_eq!(
        texts(&mail[1]),
        vec!["old one", "old two", "old three", "new one"]
    );
    assert!(
        mail[1].context.iter().all(|l| l.id.is_some()),
        "every line has its event id"
    );
    // The Mind answers; its own message is never mail.
    rig.say(&[("vala-1-2-0", &format!("#{name}"), "an answer")])
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
    let stats = running.stop().await;
    assert_eq!(
        stats.context_fetches, 0,
        "the first sync's history was enough"
    );
    assert_eq!(stats.sent, 1);

    // After a restart the position is the stored one: only what is new is mail, and the
    // history the process never saw is fetched once.
    let third = rig.human.send(&room, "new three", &[]).await;
    let running = rig.start(&[&format!("#{name}")], |_| {});
    let mail = rig.mail_count(3).await;
    let stats = running.stop().await;
    assert_eq!(mail.len(), 3, "nothing delivered twice: {mail:#?}");
    assert_eq!(mail[2].source_id, third);
    let context = texts(&mail[2]);
    assert_eq!(
        context[context.len() - 3..],
        ["new one", "new two, vala?", "an answer"],
        "the Mind's own words are context (no segment of its holds them)"
    );
    assert_eq!(stats.context_fetches, 1);
    assert_eq!(stats.delivered, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_chat_is_accepted_and_what_was_sent_while_invited_is_mail() {
    let Some(rig) = rig("dm").await else { return };
    // The person opens a direct chat and writes before the bot has joined (before its
    // connector even runs).
    let room = rig.human.create_room(None, &[&rig.bot], true).await;
    let early = rig.human.send(&room, "are you there?", &[]).await;
    let running = rig.start(&[], |_| {});
    let mail = rig.mail_count(1).await;
    assert_eq!(mail[0].source_id, early);
    assert!(mail[0].is_direct);
    assert_eq!(mail[0].room, room, "a direct chat is named by its room id");
    let late = rig.human.send(&room, "hello?", &[]).await;
    let mail = rig.mail_count(2).await;
    assert_eq!(mail[1].source_id, late);
    assert_eq!(
        mail[1]
            .context
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>(),
        vec!["are you there?"]
    );
    // The reply goes to the DM by its room id, or by the person's user id (m.direct).
    rig.say(&[
        ("vala-1-1-0", &room, "yes, by room"),
        ("vala-2-2-0", &rig.human.user_id, "yes, by person"),
    ])
    .await;
    running.outbox_changed();
    let seen = eventually("both answers", Duration::from_secs(30), || async {
        let bodies: Vec<String> = rig
            .human
            .messages(&room)
            .await
            .into_iter()
            .filter(|m| m.sender == rig.bot)
            .map(|m| m.body)
            .collect();
        (bodies.len() >= 2).then_some(bodies)
    })
    .await;
    assert_eq!(seen, vec!["yes, by room", "yes, by person"]);
    running.stop().await;
}

/// More said in a direct chat while the bot was invited than a timeline holds: the answer with
/// the join has the join but not the invite, which is still where the mail starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_chat_written_to_at_length_while_invited_is_all_mail() {
    let Some(rig) = rig("dmlong").await else {
        return;
    };
    let room = rig.human.create_room(None, &[&rig.bot], true).await;
    let mut said = Vec::new();
    for n in 0..4 {
        said.push(
            rig.human
                .send(&room, &format!("while invited {n}"), &[])
                .await,
        );
    }
    let running = rig.start(&[], |c| c.timeline_limit = 2);
    // The first answer holds the invite (accepted while it is read), the second the join.
    eventually("the join committed", Duration::from_secs(30), || async {
        (running.stats.snapshot().syncs >= 2).then_some(())
    })
    .await;
    let mail = rig.mail().await;
    running.stop().await;
    assert_eq!(
        mail.iter()
            .map(|d| d.source_id.as_str())
            .collect::<Vec<_>>(),
        said.iter().map(String::as_str).collect::<Vec<_>>(),
        "what was sent while invited is mail: {:?}",
        mail.iter().map(|d| d.text.as_str()).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_is_paged_back_and_delivered_whole_in_order() {
    let Some(rig) = rig("burst").await else {
        return;
    };
    let name = alias("burst");
    let room = rig.public_room(&name).await;
    let small = |c: &mut ConnectorConfig| {
        c.timeline_limit = 10;
        c.max_pending = 1_000;
    };
    let running = rig.start(&[&format!("#{name}")], small);
    rig.first_sync().await;
    running.stop().await;
    // 200 messages while the connector is down: the next sync's timeline is `limited`.
    let senders: Vec<_> = (0..4)
        .map(|lane| {
            let human = rig.human.clone();
            let room = room.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    human.send(&room, &format!("burst {lane}-{i}"), &[]).await;
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }
    let running = rig.start(&[&format!("#{name}")], small);
    let mail = rig.mail_count(200).await;
    let stats = running.stop().await;
    let in_room: Vec<String> = rig
        .human
        .messages(&room)
        .await
        .into_iter()
        .map(|m| m.event_id)
        .collect();
    let delivered: Vec<String> = mail.iter().map(|d| d.source_id.clone()).collect();
    assert_eq!(
        delivered, in_room,
        "every message, once, in the room's order"
    );
    assert!(stats.pages >= 2, "the gap was paged back: {stats:?}");
    assert_eq!(stats.delivered, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_max_pending_the_sync_position_stays_until_the_mind_catches_up() {
    let Some(rig) = rig("pending").await else {
        return;
    };
    let name = alias("pending");
    let room = rig.public_room(&name).await;
    // Over a store that counts whole-delivery reads: the hold counts with the store's COUNT.
    let faulty = muninn_testkit::FaultyStore::new(rig.store.clone());
    let running = rig.start_on(faulty.clone(), &[&format!("#{name}")], |c| {
        c.max_pending = 3
    });
    rig.first_sync().await;
    for i in 0..3 {
        rig.human.send(&room, &format!("first {i}"), &[]).await;
    }
    rig.mail_count(3).await;
    let held_at = rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap().unwrap();
    for i in 0..2 {
        rig.human.send(&room, &format!("second {i}"), &[]).await;
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        rig.mail().await.len(),
        3,
        "nothing read while the Mind is behind"
    );
    assert_eq!(
        rig.store.cursor(MIND, SYNC_CURSOR).await.unwrap().unwrap(),
        held_at,
        "the position stayed"
    );
    // The Mind answers the three: the account reads on.
    rig.store.ack_through(MIND, rig.token, 3).await.unwrap();
    let mail = rig.mail_count(5).await;
    assert_eq!(mail[4].text, "second 1");
    let health = running.health.lock().unwrap().clone();
    let stats = running.stop().await;
    assert!(stats.holds >= 1, "{stats:?}");
    assert!(
        health.contains(&AccountHealth::Held { pending: 3 }),
        "held with the three unanswered: {health:?}"
    );
    assert_eq!(
        faulty.pending_reads(),
        0,
        "the hold counts without reading whole deliveries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_wait_out_rate_limits_keep_their_order_and_refusals_are_recorded() {
    let Some(rig) = rig("send").await else { return };
    let admin = rig
        .synapse
        .register_admin(&format!("admin-{}", alias("send")), PASSWORD)
        .await;
    admin.override_ratelimit(&rig.bot, 1, 1).await;
    let name = alias("send");
    let room = rig.public_room(&name).await;
    let public = format!("#{name}");
    let running = rig.start(&[&public], |_| {});
    rig.bot_joined(&room).await;
    let big = "x".repeat(70_000);
    rig.say(&[
        ("vala-1-1-0", &public, "one"),
        ("vala-1-1-1", &public, "two"),
        ("vala-1-1-2", "#nowhere", "lost?"),
        ("vala-1-1-3", &public, &big),
        ("vala-1-1-4", &public, "three"),
        ("vala-1-1-5", &public, "four"),
    ])
    .await;
    running.outbox_changed();
    let bodies = eventually("four messages", Duration::from_secs(60), || async {
        let bodies: Vec<String> = rig
            .human
            .messages(&room)
            .await
            .into_iter()
            .filter(|m| m.sender == rig.bot)
            .map(|m| m.body)
            .collect();
        (bodies.len() >= 4).then_some(bodies)
    })
    .await;
    assert_eq!(
        bodies,
        vec!["one", "two", "three", "four"],
        "once each, in order"
    );
    let stats = running.stop().await;
    assert!(stats.rate_limited >= 1, "the limit was hit: {stats:?}");
    assert_eq!((stats.sent, stats.failed), (4, 2));
    let failed = rig.store.failed_outbox(MIND, 10).await.unwrap();
    let mut reasons: Vec<(String, String)> = failed
        .iter()
        .map(|m| (m.request_id.clone(), m.failure.clone().unwrap_or_default()))
        .collect();
    reasons.sort();
    assert_eq!(reasons[0].0, "vala-1-1-2");
    assert!(
        reasons[0].1.contains("#nowhere is not a room"),
        "{reasons:?}"
    );
    assert_eq!(reasons[1].0, "vala-1-1-3");
    assert!(reasons[1].1.contains("M_TOO_LARGE"), "{reasons:?}");
    assert_eq!(rig.store.unacked_outbox(MIND, 10).await.unwrap(), vec![]);
    let acked = rig
        .store
        .ack_outbox(MIND, "vala-1-1-0", None, 0)
        .await
        .unwrap();
    assert!(acked.remote_id.is_some_and(|id| id.starts_with('$')));
}

/// The login body carries the password on the wire and nowhere else: its `Debug` (what a
/// `?request` in a log line or an error would print) leaves it out.
#[test]
fn a_login_body_prints_without_its_password() {
    use muninn_matrix::wire::{LoginRequest, UserIdentifier};
    let request = LoginRequest {
        kind: "m.login.password",
        identifier: UserIdentifier {
            kind: "m.id.user",
            user: "@vala:localhost",
        },
        password: "canary-hunter2",
        device_id: "MUNINN",
        initial_device_display_name: "muninn",
    };
    let printed = format!("{request:?} {request:#?}");
    assert!(!printed.contains("canary-hunter2"), "{printed}");
    assert!(printed.contains("@vala:localhost"), "{printed}");
    let body = serde_json::to_value(&request).unwrap();
    assert_eq!(body["password"], "canary-hunter2", "the wire still has it");
}
