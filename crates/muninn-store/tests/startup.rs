//! Start-up refusal of broken SQLite storage, and ids that are never issued twice.
//!
//! Each case uses a data directory that held a store (its `store.id` says so), breaks it the
//! way a disk, an operator or a crash does — deleted, emptied, truncated, a corrupt page, an
//! older copy (lost commits) — and checks the open is refused naming the file, and that the
//! operator's explicit overrides continue with seqs above every one issued before.

use std::path::{Path, PathBuf};

use muninn_store::{NewDelivery, SqliteStore, StartOptions, Store, StoreError};

use crate::mind;

fn delivery(i: i64) -> NewDelivery {
    NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("message {i}"),
        source_id: format!("src-{i}"),
        received_at_ms: i,
        context: Vec::new(),
    }
}

/// A used data directory: a Mind with `n` deliveries, closed cleanly. Returns the db path.
async fn used_store(dir: &Path, n: i64) -> PathBuf {
    let db = dir.join("muninn.db");
    let store = SqliteStore::open(&db).await.unwrap();
    store.create_mind(&mind("vala")).await.unwrap();
    for i in 1..=n {
        assert_eq!(
            store.post_delivery("vala", &delivery(i)).await.unwrap().seq,
            i
        );
    }
    store.close().await;
    assert!(
        dir.join("store.id").exists(),
        "the identity file is written"
    );
    db
}

/// The open is refused, the error names the database file and says what to do.
async fn assert_refused(db: &Path, problem: &str) {
    match SqliteStore::open(db).await {
        Err(StoreError::Refused {
            path,
            problem: found,
            remedy,
        }) => {
            assert_eq!(path, db.display().to_string());
            assert!(
                found.contains(problem),
                "problem {found:?} lacks {problem:?}"
            );
            assert!(remedy.contains("--fresh-store"), "remedy: {remedy}");
        }
        Err(other) => panic!("expected a refusal ({problem}), got {other}"),
        Ok(_) => panic!("a broken store ({problem}) was opened"),
    }
}

/// With `--fresh-store`, the old files are moved aside (kept) and the next seq is above `old`.
async fn fresh_store_continues_above(db: &Path, old: i64, moved_aside: bool) {
    let store = SqliteStore::open_with(
        db,
        StartOptions {
            fresh_store: true,
            ..StartOptions::default()
        },
    )
    .await
    .unwrap();
    let aside = std::fs::read_dir(db.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("muninn.db.aside-")
        })
        .count();
    assert_eq!(
        aside,
        usize::from(moved_aside),
        "the old database is moved aside, not deleted"
    );
    store.create_mind(&mind("vala")).await.unwrap();
    let seq = store
        .post_delivery("vala", &delivery(500))
        .await
        .unwrap()
        .seq;
    assert!(
        seq > old,
        "a fresh store reissued seq {seq} (old store reached {old})"
    );
    store.close().await;
}

#[tokio::test]
async fn a_deleted_database_is_refused_and_a_fresh_store_continues_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 3).await;
    std::fs::remove_file(&db).unwrap();
    assert_refused(&db, "the database file is missing").await;
    assert!(!db.exists(), "a refused open creates nothing");
    fresh_store_continues_above(&db, 3, false).await;
}

#[tokio::test]
async fn a_zero_length_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 2).await;
    std::fs::File::create(&db).unwrap();
    assert_refused(&db, "empty (0 bytes)").await;
    fresh_store_continues_above(&db, 2, true).await;
}

#[tokio::test]
async fn a_truncated_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 20).await;
    let len = std::fs::metadata(&db).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    assert_refused(&db, "").await;
}

#[tokio::test]
async fn a_corrupt_page_is_refused_by_the_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 20).await;
    // Page 2 onward hold the tables' b-trees: scribble over the middle of pages 2..4, keeping
    // the file's length and its header (page 1) intact.
    let mut bytes = std::fs::read(&db).unwrap();
    for b in &mut bytes[4096 + 8..4 * 4096] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    assert_refused(&db, "").await;
}

#[tokio::test]
async fn lost_commits_after_a_clean_stop_are_refused_unless_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 2).await;
    // An older copy of the database (as a restored backup or a lost WAL leaves it) ...
    let older = std::fs::read(&db).unwrap();
    let store = SqliteStore::open(&db).await.unwrap();
    for i in 3..=5 {
        store.post_delivery("vala", &delivery(i)).await.unwrap();
    }
    store.close().await;
    std::fs::write(&db, older).unwrap();
    // ... is refused: its counters are below the identity file's exact ones.
    assert_refused(&db, "committed writes were lost").await;
    // Accepted explicitly, it continues above every seq issued (5), not from 3.
    let store = SqliteStore::open_with(
        &db,
        StartOptions {
            accept_rollback: true,
            ..StartOptions::default()
        },
    )
    .await
    .unwrap();
    let seq = store.post_delivery("vala", &delivery(6)).await.unwrap().seq;
    assert_eq!(seq, 6, "seqs 3..=5 were answered before the rollback");
    store.close().await;
    // A clean restart after that is not a rollback.
    let store = SqliteStore::open(&db).await.unwrap();
    assert_eq!(
        store.post_delivery("vala", &delivery(7)).await.unwrap().seq,
        7
    );
    store.close().await;
}

#[tokio::test]
async fn a_clean_restart_keeps_seqs_gap_free_and_a_crash_skips_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 2).await;
    let store = SqliteStore::open(&db).await.unwrap();
    assert_eq!(
        store.post_delivery("vala", &delivery(3)).await.unwrap().seq,
        3
    );
    // No clean close (a crash): the identity file only bounds what was issued.
    drop(store);
    let store = SqliteStore::open(&db).await.unwrap();
    let seq = store.post_delivery("vala", &delivery(4)).await.unwrap().seq;
    assert!(
        seq > 3,
        "after a crash the next seq ({seq}) is above every issued one"
    );
    store.close().await;
}

#[tokio::test]
async fn a_commit_that_cannot_reserve_ids_is_refused_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let db = used_store(dir.path(), 1).await;
    let store = SqliteStore::open(&db).await.unwrap();
    // The identity file cannot be replaced (a directory stands where its temporary file goes):
    // the first commit needing a new reservation fails, and writes nothing.
    let tmp = dir.path().join("store.id.tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut failed = None;
    for i in 2..200 {
        match store.post_delivery("vala", &delivery(i)).await {
            Ok(_) => {}
            Err(e) => {
                failed = Some((i, e));
                break;
            }
        }
    }
    let (at, error) = failed.expect("a commit beyond the reservation fails");
    assert!(error.to_string().contains("store.id"), "{error}");
    std::fs::remove_dir(&tmp).unwrap();
    // Fault cleared: the same store reserves and writes, and the failed seq was not kept.
    let posted = store.post_delivery("vala", &delivery(at)).await.unwrap();
    assert_eq!(posted.seq, at);
    store.close().await;
}

/// The identity file replaced by a named pipe: the open read it, waiting for a writer for
/// ever (`muninn serve` hung at start, saying nothing); replaced by a 100 MB file: the open
/// read it whole. Both are refused now, naming the file (and the limit).
#[test]
fn an_identity_file_that_is_a_pipe_or_huge_is_refused_not_waited_on() {
    use muninn_testkit::hostile_files::{fifo, huge, within_10s};
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(used_store(dir.path(), 1));
    let marker = dir.path().join("store.id");
    let open = |db: PathBuf| {
        within_10s(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            let opened = runtime.block_on(SqliteStore::open(&db));
            opened.map(drop).map_err(|e| e.to_string())
        })
    };
    std::fs::remove_file(&marker).unwrap();
    fifo(dir.path(), "store.id");
    let refused = open(db.clone()).unwrap_err();
    assert!(
        refused.contains(&format!(
            "reading {}: not a file nor a folder (a pipe, socket or device)",
            marker.display()
        )),
        "{refused}"
    );
    std::fs::remove_file(&marker).unwrap();
    huge(dir.path(), "store.id");
    let refused = open(db).unwrap_err();
    assert!(
        refused.contains(&format!(
            "reading {}: larger than the limit of 16777216 bytes for the store's identity file",
            marker.display()
        )),
        "{refused}"
    );
}

/// Issue 13: the check before each commit compares only the counters the transaction bumped
/// with the identity file, however many Minds the store holds (it once read every counter of
/// every Mind under the write lock, and 500 Minds ran at a quarter of 50's throughput). Counted,
/// not timed: with the old full scan the second count would be 1 + 40 Minds' counters.
#[tokio::test]
async fn a_commit_checks_only_the_counters_it_bumped_and_reserves_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("muninn.db");
    let store = SqliteStore::open(&db).await.unwrap();
    for m in 0..40 {
        let id = format!("m{m}");
        store.create_mind(&mind(&id)).await.unwrap();
        store.post_delivery(&id, &delivery(m)).await.unwrap();
    }
    let lease = store
        .acquire_lease("m7", "h", 60_000, 0)
        .await
        .unwrap()
        .unwrap();
    let before = store.id_guard_stats();
    store.post_delivery("m7", &delivery(100)).await.unwrap();
    let after = store.id_guard_stats();
    assert_eq!(after.counters_checked - before.counters_checked, 1);
    // Three transcript items bump one counter; the new counter needs a reservation.
    let items: Vec<_> = (1..=3).map(crate::item).collect();
    store
        .append_transcript("m7", lease.token, &items)
        .await
        .unwrap();
    let last = store.id_guard_stats();
    assert_eq!(last.counters_checked - after.counters_checked, 1);
    assert_eq!(last.reservations - after.reservations, 1);
    // The identity file covers every counter the database holds.
    let marker = muninn_store::marker::StoreMarker::read(&dir.path().join("store.id"))
        .unwrap()
        .unwrap();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(&db))
        .await
        .unwrap();
    let counters: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT mind_id, name, value FROM counters")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        counters.len(),
        41,
        "40 delivery counters and one transcript"
    );
    for (mind, name, value) in counters {
        assert!(
            marker.get(&mind, &name) >= value,
            "{mind} {name} = {value} is not reserved in store.id ({})",
            marker.get(&mind, &name)
        );
    }
    pool.close().await;
    store.close().await;
}

/// A database file emptied under an open store (the moment between `truncate` and `write` when
/// it is rewritten whole): a connection the pool opens then sees a database of zero pages, so
/// SQLite deletes the WAL beside it and its `PRAGMA journal_mode = WAL` tries to turn the empty
/// file into a WAL database, which needs the file's exclusive lock; the store's live WAL
/// connections hold shared locks, so that connection waits in the busy handler, and while it
/// waits it holds the pending lock that keeps every other new connection from reading. Every
/// call must still end soon, with an error that says a lock was in the way — not wait out the
/// pool (10 s) and come back as "pool timed out".
#[tokio::test]
async fn a_database_emptied_under_an_open_store_fails_each_call_soon_naming_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("muninn.db");
    let store = SqliteStore::open(&db).await.unwrap();
    store.create_mind(&mind("vala")).await.unwrap();
    store.post_delivery("vala", &delivery(1)).await.unwrap();
    let bytes = std::fs::read(&db).unwrap();
    std::fs::File::create(&db).unwrap();
    // Four calls at once: the first takes the pool's one open connection, the others make the
    // pool open new ones, on the empty file.
    let started = std::time::Instant::now();
    let (a, b, c, d) = tokio::join!(
        store.schema_version(),
        store.schema_version(),
        store.schema_version(),
        store.schema_version()
    );
    let calls = [a, b, c, d];
    let took = started.elapsed();
    std::fs::write(&db, &bytes).unwrap();
    let errors: Vec<String> = calls
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    eprintln!("took {took:?}: {errors:?}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "the calls took {took:?}: {errors:?}"
    );
    assert!(
        errors.iter().all(|e| !e.contains("pool timed out")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("database is locked")),
        "{errors:?}"
    );
}
