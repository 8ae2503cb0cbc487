//! The process pool: idle sessions parked and resumed with their history, a memory budget,
//! no park in the middle of a turn, turns taking turns under a budget of one process.

use super::*;
use pretty_assertions::assert_eq;

/// A pool clock the test moves by hand (seconds from a base), so least-recently-used order
/// and idle times are exact whatever the machine's speed.
fn test_clock() -> (
    muninn_claude_cli::pool::Clock,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let base = std::time::Instant::now();
    let secs = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = secs.clone();
    let clock = std::sync::Arc::new(move || {
        base + Duration::from_secs(read.load(std::sync::atomic::Ordering::SeqCst))
    });
    (clock, secs)
}

fn live_keys(pool: &SharedPool) -> Vec<String> {
    pool.live().into_iter().map(|s| s.key).collect()
}

/// A backend of `r`'s sim under session `id`, in `pool` as `key`.
fn pooled(r: &Rig, pool: &SharedPool, key: &str, id: &str) -> ClaudeCliBackend {
    let mut b = ClaudeCliBackend::new(CliConfig {
        session_id: id.to_string(),
        ..r.config.clone()
    });
    b.join_pool(pool.clone(), key);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_two_parks_the_idle_session_and_resumes_it_with_its_history() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let (clock, secs) = test_clock();
    let set = |s: u64| secs.store(s, std::sync::atomic::Ordering::SeqCst);
    let pool = SharedPool::with_clock(
        PoolConfig {
            max_processes: 2,
            ..PoolConfig::default()
        },
        clock,
    );
    let ids = [
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a",
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b",
        "c1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5c",
    ];
    // Each backend is owned here, not by the pool, as each Mind's runner owns its own.
    let mut a = pooled(&r, &pool, "a", ids[0]);
    let mut b = pooled(&r, &pool, "b", ids[1]);
    let mut c = pooled(&r, &pool, "c", ids[2]);
    let pids = start_each_with_a_turn([("a", &mut a), ("b", &mut b), ("c", &mut c)], &set).await;
    // Starting c needed a second slot: a, least recently used, was parked and its child ended.
    a_was_parked_and_its_child_ended(&pool, &pids).await;

    // a's next turn resumes it (parking b, now the least recently used), history intact.
    set(40);
    let resumed_at = std::time::Instant::now();
    let o = ok(a.turn(TurnInput::text("pool a two")).await);
    let resumed_turn = resumed_at.elapsed();
    assert!(o.usage.cache_read > 0, "{:?}", o.usage);
    a_resumed_with_its_history_parking_b(&a, &r.sim, &pool, ids[0]);
    wait_dead(pids[1]).await;
    assert_eq!(live_keys(&pool), ["a", "c"]);

    // An idle sweep: c has been idle 20 s with no gaps to go by (a coin flip over the horizon,
    // so parked); a spoke a second ago.
    set(41);
    let swept = pool.sweep(pool.now()).await;
    assert_eq!(live_keys(&pool), ["a"], "{:?}", pool.events());
    assert!(
        matches!(swept.as_slice(), [PoolEvent::Parked { key, reason: ParkReason::Idle(_), .. }] if key == "c"),
        "{swept:?}"
    );
    assert_eq!(pool.events().last(), swept.last());
    // A warm turn on the live child, for comparison with the resumed one.
    set(42);
    let warm_at = std::time::Instant::now();
    ok(a.turn(TurnInput::text("pool a three")).await);
    eprintln!(
        "FIGURE turn on a parked session (resume): {resumed_turn:?}; on a live one: {:?}",
        warm_at.elapsed()
    );
    assert_eq!(pool.take_events().len(), 4);
    assert_eq!(pool.events(), []);
    for backend in [&mut a, &mut b, &mut c] {
        backend.shutdown().await;
    }
    assert_eq!(live_keys(&pool), Vec::<String>::new());
}

/// Starts each backend and has it take a turn, the pool clock at `10 * i` for the start and
/// `10 * i + 1` for the turn of the `i`th; returns their children's pids.
async fn start_each_with_a_turn(
    backends: [(&str, &mut ClaudeCliBackend); 3],
    set: &impl Fn(u64),
) -> Vec<u32> {
    let mut pids = Vec::new();
    for (i, (key, backend)) in backends.into_iter().enumerate() {
        set(10 * i as u64);
        backend.start(spec(key)).await.unwrap();
        pids.push(backend.child_pid().await.unwrap());
        set(10 * i as u64 + 1);
        let o = ok(backend
            .turn(TurnInput::text(format!("pool {key} one")))
            .await);
        assert!(o.text.contains(&format!("pool {key} one")));
    }
    pids
}

/// Only b and c are live, a's child (`pids[0]`) has ended, and the pool's one event is a's
/// park for the process budget.
async fn a_was_parked_and_its_child_ended(pool: &SharedPool, pids: &[u32]) {
    for s in pool.live() {
        eprintln!(
            "FIGURE live session {} pid {:?}: {:.0} MiB resident",
            s.key, s.pid, s.rss_mib
        );
    }
    // Final once c's start returned: the pool gives c its room only when a's park has ended
    // (and parks nothing else meanwhile, however long a's child takes to stop:
    // `a_slow_park_is_waited_for_not_doubled`). Said when it fails: what the pool did, and
    // whether each child's process is still there.
    let live = live_keys(pool);
    assert_eq!(
        live,
        ["b", "c"],
        "events {:?}, processes {:?}",
        pool.events(),
        process_states(pids)
    );
    wait_dead(pids[0]).await;
    assert!(
        matches!(
            pool.events().as_slice(),
            [PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, event: SessionEvent::Parked { pid, .. } }]
                if key == "a" && *pid == pids[0]
        ),
        "{:?}",
        pool.events()
    );
}

/// Each pid with its process state letter from `/proc/<pid>/stat` (`?` when it has gone).
fn process_states(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            format!(
                "{pid}: {}",
                stat.split(") ")
                    .nth(1)
                    .unwrap_or("gone")
                    .chars()
                    .next()
                    .unwrap_or('?')
            )
        })
        .collect()
}

/// a's turn "pool a two" went out with its first turn in it, a reported being parked and
/// unparked under `session_id`, and the pool parked b (least recently used) to resume a.
fn a_resumed_with_its_history_parking_b(
    a: &ClaudeCliBackend,
    sim: &SimHandle,
    pool: &SharedPool,
    session_id: &str,
) {
    let sent = user_messages_sent_with(sim, "pool a two");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[0].contains("pool a one"));
    let report = a.last_report().unwrap();
    assert!(
        matches!(
            report.session_events.as_slice(),
            [SessionEvent::Parked { .. }, SessionEvent::Unparked { session_id: id }] if id == session_id
        ),
        "{:?}",
        report.session_events
    );
    let events = pool.events();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        matches!(&events[1], PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, .. } if key == "b")
    );
    assert_eq!(
        events[2],
        PoolEvent::Resumed {
            key: "a".into(),
            session_id: session_id.into()
        }
    );
}

/// A `claude` that stops slowly: the real CLI behind a shell that, once the CLI has exited,
/// waits `delay_ms` before it exits itself — so a park (stdin closed, the child waited for)
/// takes that long, as stopping a CLI child does on a loaded machine.
fn slow_to_stop(r: &Rig, bin: &std::path::Path, delay_ms: u64) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let wrapper = r.dir.path().join("claude-slow-to-stop");
    let script = format!(
        "#!/bin/sh\n'{}' \"$@\"\nstatus=$?\nsleep {}.{:03}\nexit $status\n",
        bin.display(),
        delay_ms / 1000,
        delay_ms % 1000
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

/// Parking one session is enough room for one more, however long its child takes to stop: the
/// pool waits for that park instead of parking the next idle session too (it did when a stop
/// took longer than the pool's 250 ms re-look, parking b with a when c started and both b and c
/// when a resumed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_park_is_waited_for_not_doubled() {
    let Some(bin) = claude_cli() else { return };
    let mut r = rig(bin.clone(), "a2f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    // Four times the pool's re-look interval.
    r.config.bin = slow_to_stop(&r, &bin, 1_000);
    let (clock, secs) = test_clock();
    let set = |s: u64| secs.store(s, std::sync::atomic::Ordering::SeqCst);
    let pool = SharedPool::with_clock(
        PoolConfig {
            max_processes: 2,
            ..PoolConfig::default()
        },
        clock,
    );
    let mut a = pooled(&r, &pool, "a", "a2f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a");
    let mut b = pooled(&r, &pool, "b", "a2f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b");
    let mut c = pooled(&r, &pool, "c", "a2f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5c");
    // The sessions parked for room, in order.
    let parked = |pool: &SharedPool| -> Vec<String> {
        pool.events()
            .into_iter()
            .filter_map(|e| match e {
                PoolEvent::Parked {
                    key,
                    reason: ParkReason::ProcessBudget,
                    ..
                } => Some(key),
                _ => None,
            })
            .collect()
    };
    set(0);
    a.start(spec("a")).await.unwrap();
    set(10);
    b.start(spec("b")).await.unwrap();
    // c needs a second slot: a, least recently used, is parked, and only a.
    set(20);
    c.start(spec("c")).await.unwrap();
    // Asked through each driver, which takes one command at a time: a park the pool enqueued
    // on a driver, finished or not, comes before this question, so the answers are final.
    assert_eq!(a.child_pid().await, None, "a was parked");
    assert!(
        b.child_pid().await.is_some(),
        "b was parked too: {:?}",
        pool.events()
    );
    assert!(c.child_pid().await.is_some());
    assert_eq!(parked(&pool), ["a"], "{:?}", pool.events());
    assert_eq!(live_keys(&pool), ["b", "c"]);
    // a's turn relaunches it: b, now least recently used, is parked, and only b.
    set(30);
    ok(a.turn(TurnInput::text("slow a one")).await);
    assert_eq!(b.child_pid().await, None, "b was parked");
    assert!(
        c.child_pid().await.is_some(),
        "c was parked too: {:?}",
        pool.events()
    );
    assert_eq!(parked(&pool), ["a", "b"], "{:?}", pool.events());
    assert_eq!(live_keys(&pool), ["a", "c"]);
    for backend in [&mut a, &mut b, &mut c] {
        backend.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_parks_the_least_recently_used_session() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    // Room for one child (~190 MiB measured) but not for a second at the 300 MiB estimate.
    let pool = SharedPool::new(PoolConfig {
        max_processes: 8,
        memory_budget_mib: 400,
        per_process_mib: 300,
        ..PoolConfig::default()
    });
    let ids = [
        "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a",
        "d1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b",
    ];
    // Two Minds, each owning its backend in its own task, one after the other.
    let mut owners = Vec::new();
    for (key, id) in ["a", "b"].into_iter().zip(ids) {
        let mut backend = pooled(&r, &pool, key, id);
        let task = tokio::spawn(async move {
            backend.start(spec(key)).await.unwrap();
            ok(backend.turn(TurnInput::text(format!("mem {key}"))).await);
            backend
        });
        owners.push(task.await.unwrap());
    }
    assert_eq!(live_keys(&pool), ["b"]);
    assert!(
        matches!(
            pool.events().as_slice(),
            [PoolEvent::Parked { key, reason: ParkReason::MemoryBudget, .. }] if key == "a"
        ),
        "{:?}",
        pool.events()
    );
    for mut backend in owners {
        backend.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_a_turn_is_never_parked_to_make_room() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "e1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let pool = SharedPool::new(PoolConfig {
        max_processes: 1,
        ..PoolConfig::default()
    });
    let mut a = pooled(&r, &pool, "a", "e1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a");
    let mut b = pooled(&r, &pool, "b", "e1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5b");
    a.start(spec("a")).await.unwrap();
    ok(a.turn(TurnInput::text("busy a one")).await);
    let pid = a.last_report().unwrap().pid;
    assert!(pid.is_some());
    // a's next request streams slowly; its owner runs it in its own task.
    r.sim.sim.push_faults([Fault {
        kind: FaultKind::Slow {
            first_byte_ms: 0,
            event_ms: 300,
        },
        times: 1,
    }]);
    let a_task = tokio::spawn(async move {
        let o = a.turn(TurnInput::text("busy a two")).await;
        (a, o, std::time::Instant::now())
    });
    // Wait until a's request reached the API: a is mid-turn from here on.
    while !r
        .sim
        .sim
        .requests()
        .iter()
        .any(|q| q.path == "/v1/messages" && q.body.to_string().contains("busy a two"))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        pool.live().iter().map(|s| s.in_turn).collect::<Vec<_>>(),
        [true]
    );
    // b needs the one slot; the only live session is in a turn, so b waits for it to end.
    b.start(spec("b")).await.unwrap();
    let b_started = std::time::Instant::now();
    let (mut a, o, a_ended) = a_task.await.unwrap();
    let o = ok(o);
    assert!(o.text.contains("busy a two"), "{}", o.text);
    assert!(a_ended <= b_started, "b started before a's turn ended");
    let report = a.last_report().unwrap();
    assert_eq!(report.pid, pid, "a's turn ran to its end in the same child");
    assert_eq!(report.session_events, vec![]);
    // Then a, idle, was parked for b.
    assert!(
        matches!(
            pool.events().as_slice(),
            [PoolEvent::Parked { key, reason: ParkReason::ProcessBudget, event: SessionEvent::Parked { pid: p, .. } }]
                if key == "a" && Some(*p) == pid
        ),
        "{:?}",
        pool.events()
    );
    assert_eq!(live_keys(&pool), ["b"]);
    a.shutdown().await;
    b.shutdown().await;
}

/// The processes of one rig: every live process whose environment carries its data directory
/// (a check independent of the pool's own bookkeeping; a zombie's environment is empty).
fn rig_processes(dir: &std::path::Path) -> usize {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&needle))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_under_a_budget_of_one_process_take_turns() {
    let Some(bin) = claude_cli() else { return };
    let r = rig(bin, "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a5a").await;
    let pool = SharedPool::new(PoolConfig {
        max_processes: 1,
        ..PoolConfig::default()
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = count_most_processes(r.dir.path(), done.clone());
    let keys = ["x", "y", "z"];
    let tasks: Vec<_> = keys
        .into_iter()
        .enumerate()
        .map(|(i, key)| {
            let mut b = pooled(
                &r,
                &pool,
                key,
                &format!("f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a6{i}"),
            );
            tokio::spawn(async move {
                b.start(spec(key)).await.unwrap();
                for n in 1..=3 {
                    let text = format!("serial {key} {n}");
                    let o = ok(b.turn(TurnInput::text(&text)).await);
                    assert!(o.text.contains(&text), "{}", o.text);
                }
                b
            })
        })
        .collect();
    // A deadlock would hang here: bound it generously (a dozen launches on a loaded machine).
    let all = tokio::time::timeout(Duration::from_secs(240), async {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    })
    .await
    .expect("the Minds deadlocked under a budget of one process");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let most = monitor.await.unwrap();
    assert_eq!(
        most, 1,
        "at most one CLI child at any time, and one did run"
    );
    for key in keys {
        // Every Mind's last turn carried its whole history, whatever parking went on between.
        let sent = user_messages_sent_with(&r.sim, &format!("serial {key} 3"));
        assert_eq!(sent.len(), 3, "{key}: {sent:?}");
        assert!(sent[0].contains(&format!("serial {key} 1")));
    }
    let events = pool.events();
    let (parks, resumes) = parks_and_resumes(&events);
    eprintln!("FIGURE budget of 1, 3 Minds x 3 turns: {parks} parks, {resumes} resumes");
    // Three Minds shared one slot: at least two had to give it up, and since a live Mind does
    // not jump the line, the first gave it up before its second turn and resumed later.
    assert!(parks >= 2 && resumes >= 1, "{events:?}");
    assert!(live_keys(&pool).len() <= 1);
    for mut b in all {
        b.shutdown().await;
    }
}

/// Counts this rig's CLI children while the Minds run: the most seen at once, until `done`.
fn count_most_processes(
    dir: &std::path::Path,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    let dir = dir.to_path_buf();
    tokio::spawn(async move {
        let mut most = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            most = most.max(rig_processes(&dir));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        most
    })
}

/// How many of `events` are parks for the process budget, and how many are resumes.
fn parks_and_resumes(events: &[PoolEvent]) -> (usize, usize) {
    let parks = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                PoolEvent::Parked {
                    reason: ParkReason::ProcessBudget,
                    ..
                }
            )
        })
        .count();
    let resumes = events
        .iter()
        .filter(|e| matches!(e, PoolEvent::Resumed { .. }))
        .count();
    (parks, resumes)
}
