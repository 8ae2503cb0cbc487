//! A PostgreSQL server that falls silent without closing the connection (a partition, a frozen
//! machine), played by a [`SilentProxy`] between the store and the real server: every store
//! call ends at its client-side deadline, retryable, and the connections it was waiting on are
//! closed rather than handed back to the pool, so the store works again as soon as a new
//! connection gets through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muninn_store::{FencingToken, PostgresStore, Role, Store, StoreError};
use muninn_testkit::SilentProxy;
use muninn_testkit::peers::FreshDatabase;
use sqlx::Connection;

use crate::{item, mind};

/// As many reads as the pool has connections (8) and a write, each in the middle of its
/// statement (held by a lock elsewhere) when the server falls silent: each ends within its 2 s
/// deadline as `Unavailable`, as does a call begun while silent. Then the old connections stay
/// silent for good and new ones get through: the store answers again without reopening, on new
/// connections — the ones cut mid-statement were closed, not parked in the pool waiting for an
/// answer that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_silent_server_ends_each_call_at_its_deadline_and_the_pool_recovers() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_silent", "a silent server") else {
        return;
    };
    let proxy = SilentProxy::start(FreshDatabase::SERVER.parse().unwrap())
        .await
        .unwrap();
    let url = format!("{}?call_timeout=2s", db.url_through(proxy.addr()));
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let token = crate::leased_mind(store.as_ref(), 600_000, 1).await;
    store
        .append_transcript("m", token, &[item(1)])
        .await
        .unwrap();

    // Straight to the server: holds every statement on the transcript where it is.
    let mut locker = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE transcript IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    let mut calls = a_write_and_eight_reads(&store, token);
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.freeze();
    let begun_while_silent = tokio::spawn({
        let store = store.clone();
        async move {
            let started = Instant::now();
            (store.lease("m").await.map(drop), started.elapsed())
        }
    });
    calls.push(begun_while_silent);
    each_ends_unavailable_at_its_deadline(calls).await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();

    // The old connections never answer again; new ones get through.
    the_store_answers_again_on_new_connections(store.as_ref(), &proxy, token).await;
    // Closing waits for every pooled connection: one cut mid-statement and handed back would
    // wait there for an answer that never comes.
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("closing the store waited 10 s for a connection handed back to the pool");
}

/// A call's answer (its value dropped) and how long it took.
type TimedCall = tokio::task::JoinHandle<(Result<(), StoreError>, Duration)>;

/// A write and eight reads of the transcript, each in a task of its own, timed.
fn a_write_and_eight_reads(store: &Arc<dyn Store>, token: FencingToken) -> Vec<TimedCall> {
    (0..9)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let answer = match n {
                    0 => store
                        .append_transcript("m", token, &[item(2)])
                        .await
                        .map(drop),
                    _ => store
                        .transcript_tail("m", Role::Persona, 10)
                        .await
                        .map(drop),
                };
                (answer, started.elapsed())
            })
        })
        .collect()
}

/// Each call ends, well within 30 s, as `Unavailable` and within its deadline's reach (6 s).
async fn each_ends_unavailable_at_its_deadline(calls: Vec<TimedCall>) {
    for call in calls {
        let (answer, took) = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("a store call waited 30 s on a silent server: it must end at its deadline")
            .unwrap();
        let error = answer.expect_err("nothing answers");
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
        assert!(took < Duration::from_secs(6), "{took:?}: {error}");
    }
}

/// Once the proxy abandons the old connections and lets new ones through, reads answer (what
/// was written before the silence, nothing of the write cut short) and then writes do.
async fn the_store_answers_again_on_new_connections(
    store: &dyn Store,
    proxy: &SilentProxy,
    token: FencingToken,
) {
    let opened_before = proxy.accepted();
    proxy.abandon();
    let started = Instant::now();
    let tail = loop {
        match store.transcript_tail("m", Role::Persona, 10).await {
            Ok(tail) => break tail,
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the store still fails 30 s after new connections get through: {e}"
                );
            }
        }
    };
    let seqs: Vec<i64> = tail.iter().map(|t| t.seq).collect();
    assert_eq!(seqs, vec![1], "the write cut short wrote nothing");
    assert!(proxy.accepted() > opened_before);
    let read_again = started.elapsed();
    // The write cut short still holds the lease row on the server, in a session that will never
    // hear from its client again, until the server's idle-in-transaction timeout (30 s) ends
    // it; meanwhile writes fail retryable.
    loop {
        match store.append_transcript("m", token, &[item(3)]).await {
            Ok(_) => break,
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "writes still fail 60 s after new connections get through: {e}"
                );
            }
        }
    }
    eprintln!(
        "read again after {read_again:?}, written after {:?}; {} connections opened in all",
        started.elapsed(),
        proxy.accepted()
    );
}

/// Reads run back to back on every pooled connection when the server falls silent. Between two
/// reads sqlx hands each connection back to the pool by pinging it, in a task of its own and
/// without a deadline; a connection caught in that ping waits as long as TCP does, and the
/// pool's `close` waits for every connection. `Store::close` still ends within the store's
/// deadline: a host's shutdown (or `muninn doctor`) on a silent network ends instead of
/// hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_closing_on_a_silent_server_ends_within_the_deadline() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_silent_close", "closing while silent")
    else {
        return;
    };
    let proxy = SilentProxy::start(FreshDatabase::SERVER.parse().unwrap())
        .await
        .unwrap();
    let url = format!("{}?call_timeout=1s", db.url_through(proxy.addr()));
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    store.create_mind(&mind("m")).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..8 {
        let (store, stop) = (store.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = store.lease("m").await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.freeze();
    // Every reader's call in flight ends at its deadline (1 s); then they stop.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("a read outlived its deadline")
            .unwrap();
    }
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), store.close())
        .await
        .expect("closing the store on a silent server waited 20 s");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "closing took {took:?}");
}

/// The wake-up listener's connection falls silent for good (a flow lost in the network while
/// the server is fine: the proxy abandons it, new connections get through). A listener that
/// heard nothing for a call deadline (1 s here) asks its connection to answer within another;
/// this one does not, so it is replaced: `recv` answers `Ok(None)` (wake-ups may have been
/// missed: the caller looks at every Mind once) instead of waiting for ever, and wake-ups
/// announced after that arrive on the new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_silent_wake_listener_is_noticed_and_listens_again() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_silentlisten", "a silent listener") else {
        return;
    };
    let proxy = SilentProxy::start(FreshDatabase::SERVER.parse().unwrap())
        .await
        .unwrap();
    let url = format!("{}?call_timeout=1s", db.url_through(proxy.addr()));
    let store = PostgresStore::connect(&url).await.unwrap();
    let direct = PostgresStore::connect(&db.url()).await.unwrap();
    let mut listener = store
        .listen_wakes()
        .await
        .unwrap()
        .expect("postgres listens");
    direct.announce_wake("m", "other").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await;
    assert!(matches!(heard, Ok(Ok(Some(_)))), "{heard:?}");

    proxy.abandon();
    let started = Instant::now();
    let noticed = tokio::time::timeout(Duration::from_secs(20), listener.recv())
        .await
        .expect("a silent listener waited 20 s without noticing");
    assert_eq!(
        noticed.unwrap(),
        None,
        "a wake-up through a silent connection"
    );
    eprintln!("a silent listener noticed after {:?}", started.elapsed());
    direct.announce_wake("m", "other").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("no wake-up on the new connection within 5 s")
        .unwrap();
    assert_eq!(
        heard,
        Some(muninn_store::Wake {
            mind: "m".into(),
            from: "other".into()
        })
    );
    drop(listener);
    store.close().await;
    direct.close().await;
}

/// The wake-up listener's connection closes (its backend terminated) while new connections
/// cannot get through yet, late in a stretch of quiet, so the reconnect outlives the listener's
/// wait for a notification; the network heals before the check that follows gives up. The
/// wake-ups announced while no connection listened are gone, so `recv` must say so —
/// `Ok(None)`, every Mind looks once — instead of carrying on on the new connection as if
/// nothing had been missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_wake_listener_reconnecting_past_its_wait_still_says_it_reconnected() {
    let Some(db) = FreshDatabase::for_test("muninn_pgf_relisten", "a slow relisten") else {
        return;
    };
    let proxy = SilentProxy::start(FreshDatabase::SERVER.parse().unwrap())
        .await
        .unwrap();
    let url = format!("{}?call_timeout=2s", db.url_through(proxy.addr()));
    let store = PostgresStore::connect(&url).await.unwrap();
    let direct = PostgresStore::connect(&db.url()).await.unwrap();
    let mut admin = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    let mut listener = store
        .listen_wakes()
        .await
        .unwrap()
        .expect("postgres listens");
    let receiving = tokio::spawn(async move {
        loop {
            match listener.recv().await {
                Ok(received) => return (listener, received),
                // No connection could listen yet: the host's loop calls again later too.
                Err(e) => {
                    eprintln!("recv: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    // Within the listener's first 2 s wait: its connection closes, and reconnecting hangs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.hold_new();
    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(terminated, vec![true], "the listener's backend");
    // Past that wait (the check that follows it waits up to 2 s more), the network heals.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    proxy.thaw();
    let (mut listener, received) = tokio::time::timeout(Duration::from_secs(15), receiving)
        .await
        .expect("the listener reconnected without saying so: wake-ups were lost unnoticed")
        .unwrap();
    assert_eq!(received, None, "a wake-up though none was announced");
    direct.announce_wake("m", "other").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("no wake-up on the new connection within 10 s")
        .unwrap()
        .expect("a wake-up");
    assert_eq!(heard.mind, "m");
    drop(listener);
    admin.close().await.unwrap();
    store.close().await;
    direct.close().await;
}
