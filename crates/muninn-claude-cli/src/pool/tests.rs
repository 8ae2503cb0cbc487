//! [`Registry::room_for`] without processes or clocks: a session with no pid counts at the
//! configured estimate while its driver's sender lives, so each phase can be set by hand.

use super::*;
use Phase::{Down, Idle, Parking};

/// A registry of `sessions` as (key, phase, last used this many seconds after `base`), every
/// driver alive through `tx`.
fn registry(
    base: Instant,
    sessions: &[(&str, Phase, u64)],
    tx: &mpsc::Sender<Command>,
) -> Registry {
    let mut reg = Registry::default();
    for (key, phase, secs) in sessions {
        let mut e = Entry::new(base + Duration::from_secs(*secs));
        e.commands = Some(tx.downgrade());
        e.phase = *phase;
        reg.sessions.insert(key.to_string(), e);
    }
    reg
}

fn parks(room: &Room) -> Option<(&str, &ParkReason)> {
    match room {
        Room::Park(key, reason) => Some((key, reason)),
        Room::Fits | Room::Wait => None,
    }
}

#[test]
fn a_session_being_parked_is_room_being_made_not_a_live_one() {
    let (tx, _rx) = mpsc::channel(1);
    let base = Instant::now();
    let two = PoolConfig {
        max_processes: 2,
        ..PoolConfig::default()
    };
    // Nothing under way: c's room is made by parking a, the least recently used idle session.
    let mut reg = registry(
        base,
        &[("a", Idle, 0), ("b", Idle, 10), ("c", Down, 20)],
        &tx,
    );
    assert_eq!(
        parks(&reg.room_for("c", &two)),
        Some(("a", &ParkReason::ProcessBudget))
    );
    // a is still stopping: that is c's room, so c waits for it and b is left alone.
    let mut reg = registry(
        base,
        &[("a", Parking, 0), ("b", Idle, 10), ("c", Down, 20)],
        &tx,
    );
    assert!(matches!(reg.room_for("c", &two), Room::Wait));
    // a stopped: c fits.
    let mut reg = registry(
        base,
        &[("a", Down, 0), ("b", Idle, 10), ("c", Down, 20)],
        &tx,
    );
    assert!(matches!(reg.room_for("c", &two), Room::Fits));
    // Under a budget of one, a park under way is not enough while b stays: b is parked too.
    let one = PoolConfig {
        max_processes: 1,
        ..PoolConfig::default()
    };
    let mut reg = registry(
        base,
        &[("a", Parking, 0), ("b", Idle, 10), ("c", Down, 20)],
        &tx,
    );
    assert_eq!(
        parks(&reg.room_for("c", &one)),
        Some(("b", &ParkReason::ProcessBudget))
    );
}

#[test]
fn memory_being_freed_by_a_park_is_waited_for() {
    let (tx, _rx) = mpsc::channel(1);
    let base = Instant::now();
    // Room for two children at the 300 MiB estimate.
    let config = PoolConfig {
        max_processes: 8,
        memory_budget_mib: 600,
        per_process_mib: 300,
        ..PoolConfig::default()
    };
    let mut reg = registry(
        base,
        &[("a", Parking, 0), ("b", Idle, 10), ("c", Down, 20)],
        &tx,
    );
    assert!(matches!(reg.room_for("c", &config), Room::Wait));
    let mut reg = registry(
        base,
        &[("a", Idle, 0), ("b", Idle, 10), ("c", Down, 20)],
        &tx,
    );
    assert_eq!(
        parks(&reg.room_for("c", &config)),
        Some(("a", &ParkReason::MemoryBudget))
    );
}
