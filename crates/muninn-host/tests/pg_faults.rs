//! A running Mind on a real PostgreSQL that misbehaves, each case in a database of its own
//! (created and dropped by the case): the host's connections terminated by the server at random
//! points of its turns, and a lock held elsewhere on a table a turn needs. The host recovers by
//! itself, every delivery is answered exactly once with one ledger row per request, and while
//! the store fails the Mind's status says so.

use crate::runtime::{World, mind, runner};
use muninn_host::Host;
use muninn_host::cluster;
use muninn_host::config::Config;
use muninn_host::runtime::run_mind;
use muninn_sim::SimClock;
use muninn_sim::sim::{SimConfig, Simulator};
use muninn_store::{LedgerQuery, NewDelivery, Store};
use muninn_testkit::SilentProxy;
use muninn_testkit::peers::{FreshDatabase, postgres_admin};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A world whose host runs on the PostgreSQL database `db`.
async fn world_on_postgres(db: &FreshDatabase) -> World {
    world_on_postgres_at(&db.url()).await
}

/// A world whose host runs on the PostgreSQL store at `url`.
pub(crate) async fn world_on_postgres_at(url: &str) -> World {
    let store = muninn_store::open(url).await.unwrap();
    let sim = Arc::new(Simulator::new(SimConfig {
        frozen_at_ms: Some(crate::runtime::T0),
        ..SimConfig::default()
    }));
    let config: Config = toml::from_str("").unwrap();
    let host = Host::new(store, config, Arc::new(SimClock(sim.clone())));
    World {
        host,
        sim,
        _dir: tempfile::tempdir().unwrap(),
    }
}

/// Posts delivery `n` to `#swarm` (retried with the same source id while the store fails:
/// idempotent) and wakes the runner.
async fn post_until_accepted(w: &World, n: usize) {
    let delivery = NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("message {n}: still there?"),
        source_id: format!("pgf-{n}"),
        received_at_ms: w.sim.now_ms(),
        context: Vec::new(),
    };
    let started = Instant::now();
    while let Err(e) = w.host.store.post_delivery("vala", &delivery).await {
        assert!(e.is_retryable(), "delivery {n}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "delivery {n}: {e}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.host.signals.wake("vala");
}

/// The Mind's failing mark, once shown; fails the test if it is not within `limit_s` seconds of
/// `since` (`what` names the fault, as in "<what> 30 s and the Mind is not shown failing").
async fn shown_failing(
    w: &World,
    since: Instant,
    limit_s: u64,
    what: &str,
) -> muninn_host::telemetry::Failing {
    loop {
        if let Some(failing) = w.host.telemetry.mind("vala").failing {
            return failing;
        }
        assert!(
            since.elapsed() < Duration::from_secs(limit_s),
            "{what} {limit_s} s and the Mind is not shown failing: {:?}",
            w.host.telemetry.mind("vala")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ack position, read until a read succeeds.
pub(crate) async fn acked(store: &Arc<dyn Store>) -> i64 {
    loop {
        if let Ok(ack) = store.ack_position("vala").await {
            return ack;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every delivery 1..=`seqs` answered exactly once: one outbox message per batch, the batches
/// partition the seqs, one Persona ledger row per batch, and one ledger row per request the
/// provider answered (none doubled; none lost but for at most `orphans`).
///
/// `orphans` is how many answers may have been given up by design: a runner whose lease was
/// taken over while it waited on the provider (or held the answer uncommitted) cannot commit
/// it under its fenced token, and abandons it loudly (`pending.rs`: "as a crash would lose
/// it"; the spend cap still counts it), and the new holder answers the batch again. Each
/// change of the lease's token orphans at most the one request its previous holder had in
/// flight, so a test with takeovers passes the number of token changes; one without, zero.
pub(crate) async fn answered_once(w: &World, seqs: i64, orphans: usize) {
    let store = &w.host.store;
    let outbox = store.unacked_outbox("vala", 10_000).await.unwrap();
    let ids: Vec<&str> = outbox.iter().map(|m| m.request_id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "a request id twice: {ids:?}");
    let mut batches: Vec<(i64, i64)> = ids
        .iter()
        .map(|id| {
            // `vala-<first>-<last>-<index>`; the simulator answers one room with one message.
            let parts: Vec<&str> = id.rsplitn(4, '-').collect();
            assert_eq!(parts[0], "0", "more than one message for a batch: {ids:?}");
            (parts[2].parse().unwrap(), parts[1].parse().unwrap())
        })
        .collect();
    batches.sort();
    let mut next = 1;
    for (first, last) in &batches {
        assert_eq!(
            *first, next,
            "batches do not partition 1..={seqs}: {batches:?}"
        );
        next = last + 1;
    }
    assert_eq!(next, seqs + 1, "not every delivery answered: {batches:?}");
    let rows = store
        .ledger(&LedgerQuery {
            mind: Some("vala".into()),
            ..LedgerQuery::default()
        })
        .await
        .unwrap();
    let asked = w
        .sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages") && r.status == 200)
        .count();
    eprintln!(
        "{} ledger rows for {asked} requests the provider answered (at most {orphans} orphaned)",
        rows.len()
    );
    assert!(
        rows.len() <= asked && asked - rows.len() <= orphans,
        "ledger rows vs requests the provider answered: {} vs {asked} \
         (at most {orphans} orphaned by a takeover)",
        rows.len()
    );
    let turns = rows
        .iter()
        .filter(|e| e.row.role == "persona" && !e.row.decision.starts_with("ping"))
        .count();
    assert_eq!(
        turns,
        batches.len(),
        "Persona turn rows vs batches answered"
    );
}

/// A small xorshift, seeded from the clock and printed: where the kills land.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A seed for a kill schedule from the clock (odd: xorshift stays at 0 from 0), printed so a
/// failing schedule can be told apart.
fn kill_schedule_seed() -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill schedule seed {seed}");
    seed
}

/// The server ends every connection of the host's database at random moments (5–60 ms apart)
/// while a Persona answers 25 deliveries one after another. The host replaces its connections
/// by itself; every delivery is answered once, the ledger has one row per request; the Mind is
/// shown failing when a step met a dead connection and not once the kills stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_killed_at_random_points_lose_and_double_nothing() {
    const DELIVERIES: usize = 25;
    let Some(db) = FreshDatabase::for_test("muninn_host_pgkill", "connections killed") else {
        return;
    };
    let Some(admin) = postgres_admin("connections killed").await else {
        return;
    };
    let w = world_on_postgres(&db).await;
    let r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_mind(r, stopped));

    let killing = Arc::new(AtomicBool::new(true));
    let kills = Arc::new(AtomicU64::new(0));
    let seed = kill_schedule_seed();
    let pauses = paced((5, 55), &db).await;
    let progress = Arc::new(AtomicU64::new(0));
    let killer = spawn_killer(
        admin,
        &db,
        pauses,
        seed,
        (killing.clone(), kills.clone(), Some(progress.clone())),
    );

    let mut seen_failing = None;
    for n in 1..=DELIVERIES {
        // A bound per delivery, as in `answer`.
        let started = Instant::now();
        post_until_accepted(&w, n).await;
        while acked(&w.host.store).await < n as i64 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "delivery {n} not answered: {:?}",
                w.host.telemetry.mind("vala")
            );
            if let Some(failing) = w.host.telemetry.mind("vala").failing {
                seen_failing = Some(failing);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        progress.store(n as u64, Ordering::Relaxed);
    }
    killing.store(false, Ordering::Relaxed);
    killer.await.unwrap();
    // The failing mark clears with the next step that succeeds.
    post_until_accepted(&w, DELIVERIES + 1).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked(&w.host.store).await < DELIVERIES as i64 + 1
        || w.host.telemetry.mind("vala").failing.is_some()
    {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            w.host.telemetry.mind("vala")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    let live = w.host.telemetry.mind("vala");
    eprintln!(
        "{} connections killed; store failures {:?}; last shown failing {seen_failing:?}",
        kills.load(Ordering::Relaxed),
        live.step_failures
    );
    if let Some(failing) = &seen_failing {
        assert_eq!(failing.cause, "store", "{failing:?}");
    }
    answered_once(&w, DELIVERIES as i64 + 1, 0).await;
    w.host.store.close().await;
}

/// A lock held elsewhere on the transcript (a frozen client mid-transaction, an operator's
/// `LOCK TABLE`) while a delivery waits: the turn's store call ends at the statement timeout,
/// the Mind is shown failing on the store (not silently running for ever), and once the lock
/// goes the delivery is answered once and the mark clears — without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lock_held_elsewhere_shows_in_status_and_recovers() {
    let Some(db) = FreshDatabase::for_test("muninn_host_pglock", "a lock held elsewhere") else {
        return;
    };
    let w = world_on_postgres(&db).await;
    let r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_mind(r, stopped));
    post_until_accepted(&w, 1).await;
    while acked(&w.host.store).await < 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut locker = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE transcript IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    post_until_accepted(&w, 2).await;
    let started = Instant::now();
    let failing = shown_failing(&w, started, 40, "a turn blocked on a lock for").await;
    assert_eq!(failing.cause, "store", "{failing:?}");
    eprintln!(
        "shown failing after {:?}: {}",
        started.elapsed(),
        failing.last_error
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    while acked(&w.host.store).await < 2 || w.host.telemetry.mind("vala").failing.is_some() {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            w.host.telemetry.mind("vala")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    answered_once(&w, 2, 0).await;
    w.host.store.close().await;
}

use sqlx::Connection;

/// The kill pauses `pauses` (ms), stretched to this machine's speed now: at least one turn's
/// commit between two kills, and up to ten. A turn's commit is a dozen round trips to the
/// server on a fresh connection; measured here as a dozen `SELECT 1`, the median of five. On an
/// idle machine that is a few milliseconds and `pauses` stands; on a loaded one (two cores
/// shared with compiles and other tests) it was 16 ms, 32 ms with three busy loops more, and
/// fixed kills every 5–60 ms then land in most commits: delivery 1 went unanswered for 120 s
/// in one such run, the host retrying as it should, no commit fitting between two kills.
async fn paced(pauses: (u64, u64), db: &FreshDatabase) -> (u64, u64) {
    let mut bursts = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
        for _ in 0..12 {
            sqlx::raw_sql("SELECT 1").execute(&mut conn).await.unwrap();
        }
        bursts.push(started.elapsed().as_millis() as u64);
    }
    bursts.sort_unstable();
    let commit_ms = bursts[2];
    let paced = (pauses.0.max(commit_ms), pauses.1.max(10 * commit_ms));
    eprintln!("a turn's commit takes about {commit_ms} ms here: kills {paced:?} ms apart");
    paced
}

/// Ends every session on `db` but the caller's, repeatedly (`pauses` ms apart: its least plus
/// a random part below its span, from `seed`) until `killing` turns false; counts the sessions
/// ended in `kills`.
///
/// With `progress` (a count the test raises as the host gets work done), the pauses double for
/// every `STALL` without progress, up to `MAX_STRETCH` times, and shrink back once it moves:
/// kills paced for an idle machine can otherwise land faster than a loaded one finishes a
/// turn's commit, and then no turn can ever commit (seen at a load average of 10–13 on two
/// cores). The kills still land at random points of every step; only their rate follows the
/// machine.
fn spawn_killer(
    admin: sqlx::PgPool,
    db: &FreshDatabase,
    pauses: (u64, u64),
    mut seed: u64,
    (killing, kills, progress): (Arc<AtomicBool>, Arc<AtomicU64>, Option<Arc<AtomicU64>>),
) -> tokio::task::JoinHandle<()> {
    const STALL: Duration = Duration::from_secs(2);
    const MAX_STRETCH: u64 = 64;
    let name = db.name().to_owned();
    tokio::spawn(async move {
        let mut stretch = 1;
        let mut last = (0, Instant::now());
        while killing.load(Ordering::Relaxed) {
            if let Some(progress) = &progress {
                let now = progress.load(Ordering::Relaxed);
                if now != last.0 {
                    last = (now, Instant::now());
                    stretch = 1;
                } else if last.1.elapsed() >= STALL && stretch < MAX_STRETCH {
                    last.1 = Instant::now();
                    stretch *= 2;
                    eprintln!("no progress for {STALL:?}: kills now {stretch}x further apart");
                }
            }
            let pause = stretch * (pauses.0 + next_random(&mut seed) % pauses.1);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let ended = sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&name)
            .execute(&admin)
            .await
            .unwrap()
            .rows_affected();
            kills.fetch_add(ended, Ordering::Relaxed);
        }
    })
}

/// Two hosts on one database, each holding its presence lock, their sessions ended at random
/// moments (20–300 ms apart) throughout: host A answers deliveries, then dies mid-run (its task
/// dropped, its store closed, no release); host B, seeing A's presence gone, takes the Mind over
/// and answers the rest. A killed presence session makes its host look gone until it re-locks,
/// so the Mind may change hands meanwhile too: fencing keeps one writer. Every delivery is
/// answered once across both, one ledger row per request, and A's token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_hosts_with_sessions_killed_during_a_takeover_keep_one_writer() {
    const BEFORE: usize = 8;
    const AFTER: usize = 8;
    let Some(db) = FreshDatabase::for_test("muninn_host_pgtake", "a takeover under kills") else {
        return;
    };
    let Some(admin) = postgres_admin("a takeover under kills").await else {
        return;
    };
    let w = world_on_postgres(&db).await;
    let (w_b, store_b) = second_host(&w, &db).await;
    let a = runner(&w, mind(""), "host-a");
    a.register().await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (stop_a, stopped_a) = tokio::sync::watch::channel(false);
    cluster::spawn(&w.host, "host-a", stopped_a.clone()).await;
    cluster::spawn(&w_b.host, "host-b", stopped.clone()).await;
    let running_a = tokio::spawn(run_mind(a, stopped_a));
    let running_b = tokio::spawn(run_mind(runner(&w_b, mind(""), "host-b"), stopped));

    let seed = kill_schedule_seed();
    let (killing, kills) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicU64::new(0)));
    // Paced to the machine and stretched without progress, as the other kill test's: kills
    // paced for an idle machine landed faster than a loaded one (load 10–12) commits a turn.
    let pauses = paced((20, 280), &db).await;
    let progress = Arc::new(AtomicU64::new(0));
    let killer = spawn_killer(
        admin,
        &db,
        pauses,
        seed,
        (killing.clone(), kills.clone(), Some(progress.clone())),
    );
    answer(&w, 1, BEFORE, Some(&progress)).await;
    // Most likely A's; B's if A's presence session was just killed.
    let before = acked_lease(&store_b).await;

    // A dies: its task is dropped wherever it was, its sessions end with its store.
    running_a.abort();
    let _ = running_a.await;
    let _ = stop_a.send(true);
    w.host.store.close().await;
    answer(&w_b, BEFORE + 1, BEFORE + AFTER, Some(&progress)).await;
    killing.store(false, Ordering::Relaxed);
    killer.await.unwrap();

    let lease_b = acked_lease(&store_b).await;
    assert_eq!(lease_b.holder, "host-b");
    if before.holder == "host-a" {
        assert!(lease_b.token > before.token);
        let stale = store_b.append_transcript("vala", before.token, &[]).await;
        assert!(
            matches!(stale, Err(muninn_store::StoreError::Fenced { .. })),
            "{stale:?}"
        );
    }
    stop.send(true).unwrap();
    running_b.await.unwrap().unwrap();
    let (live_a, live_b) = (
        w.host.telemetry.mind("vala"),
        w_b.host.telemetry.mind("vala"),
    );
    eprintln!(
        "{} sessions killed; host A: store failures {:?}, lease changes {:?}; host B: {:?}, {:?}",
        kills.load(Ordering::Relaxed),
        live_a.step_failures,
        live_a.lease_changes,
        live_b.step_failures,
        live_b.lease_changes,
    );
    // Every token after the first came with a takeover (the simulator's clock stands still, so
    // no lease expires).
    let token_changes = (lease_b.token.0 - 1) as usize;
    answered_once(&w_b, (BEFORE + AFTER) as i64, token_changes).await;
    store_b.close().await;
}

/// A second host on `w`'s database and simulator clock, with its own store: its world, and
/// that store.
async fn second_host(w: &World, db: &FreshDatabase) -> (World, Arc<dyn muninn_store::Store>) {
    let store_b = muninn_store::open(&db.url()).await.unwrap();
    let host_b = Host::new(
        store_b.clone(),
        toml::from_str("").unwrap(),
        w.host.clock.clone(),
    );
    let w_b = World {
        host: host_b,
        sim: w.sim.clone(),
        _dir: tempfile::tempdir().unwrap(),
    };
    (w_b, store_b)
}

/// Posts deliveries `from..=to` one after another through `w`'s host, each answered before the
/// next, each within 120 s of its post (a bound per delivery, not for the lot: on a loaded
/// machine a commit meets a kill more often, and eight deliveries took 2 minutes in all).
/// Each one answered is counted in `progress`, which a killer reads to pace itself.
async fn answer(w: &World, from: usize, to: usize, progress: Option<&AtomicU64>) {
    for n in from..=to {
        let started = Instant::now();
        post_until_accepted(w, n).await;
        while acked(&w.host.store).await < n as i64 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "delivery {n}: {:?}",
                w.host.telemetry.mind("vala")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(progress) = progress {
            progress.store(n as u64, Ordering::Relaxed);
        }
    }
}

/// The Mind's lease, read until a read succeeds.
async fn acked_lease(store: &Arc<dyn Store>) -> muninn_store::Lease {
    loop {
        if let Ok(Some(lease)) = store.lease("vala").await {
            return lease;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts delivery `n` straight to the server through `direct` (another host's store) and wakes
/// the runner.
async fn post_directly(direct: &Arc<dyn Store>, w: &World, n: usize) {
    let delivery = NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("message {n}: still there?"),
        source_id: format!("pgf-{n}"),
        received_at_ms: w.sim.now_ms(),
        context: Vec::new(),
    };
    direct.post_delivery("vala", &delivery).await.unwrap();
    w.host.signals.wake("vala");
}

/// The PostgreSQL server falls silent mid-run without closing the host's connections (a network
/// partition, a frozen machine: a [`SilentProxy`] between the host and the server) while the
/// Mind answers a delivery, and stays silent past the lease's end. No store call waits for
/// ever: each ends at the store's deadline (2 s here), so the Mind is shown failing on the
/// store and readiness says so, instead of a step stuck `running` on a lease that ran out.
/// Once the server answers again the Mind recovers by itself: every delivery answered exactly
/// once, one ledger row per request, the mark cleared, the lease this host's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_silent_server_shows_in_status_and_the_mind_recovers() {
    let Some(db) = FreshDatabase::for_test("muninn_host_pgsilent", "a silent server") else {
        return;
    };
    let proxy = SilentProxy::start(FreshDatabase::SERVER.parse().unwrap())
        .await
        .unwrap();
    let w =
        world_on_postgres_at(&format!("{}?call_timeout=2s", db.url_through(proxy.addr()))).await;
    let direct = muninn_store::open(&db.url()).await.unwrap();
    let r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_mind(r, stopped));
    answer(&w, 1, 2, None).await;
    let lease = acked_lease(&direct).await;

    // Delivery 3 comes through another host; the server falls silent as the Mind answers it.
    post_directly(&direct, &w, 3).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    proxy.freeze();
    let frozen_at = Instant::now();
    post_directly(&direct, &w, 4).await;
    let failing = shown_failing(&w, frozen_at, 30, "the server silent for").await;
    assert_eq!(failing.cause, "store", "{failing:?}");
    assert!(
        failing.last_error.contains("no answer from the database"),
        "{failing:?}"
    );
    let ready = muninn_host::telemetry::health::readiness(&w.host).await;
    assert!(!ready.ready, "{ready:?}");
    assert!(ready.reasons[0].starts_with("store: "), "{ready:?}");
    eprintln!(
        "shown failing after {:?}: {}; readiness: {:?}",
        frozen_at.elapsed(),
        failing.last_error,
        ready.reasons
    );

    // The lease runs out while the server is silent: nothing renewed it.
    w.sim
        .advance_clock(muninn_host::runtime::LEASE_TTL_MS + 1_000);
    assert_eq!(acked_lease(&direct).await, lease);
    assert!(lease.expires_at_ms < w.sim.now_ms());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        w.host.telemetry.mind("vala").failing.is_some(),
        "{:?}",
        w.host.telemetry.mind("vala")
    );

    proxy.thaw();
    let thawed_at = Instant::now();
    while acked(&direct).await < 4 || w.host.telemetry.mind("vala").failing.is_some() {
        assert!(
            thawed_at.elapsed() < Duration::from_secs(60),
            "{:?}",
            w.host.telemetry.mind("vala")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("recovered {:?} after the thaw", thawed_at.elapsed());
    let after = acked_lease(&direct).await;
    assert_eq!(after.holder, "host-a");
    assert!(after.expires_at_ms > w.sim.now_ms(), "{after:?}");
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    answered_once(&w, 4, 0).await;
    w.host.store.close().await;
    direct.close().await;
}
