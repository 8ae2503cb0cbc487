//! A full disk: writes fail loudly, and the store writes again once there is room.

use super::*;
use std::process::Command;

use muninn_store::{SqliteStore, Store};
use pretty_assertions::assert_eq;

/// A small filesystem of its own (tmpfs), unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// A `bytes`-sized tmpfs; `None` after `missing_peer` where mounting is not allowed (not
    /// root), which fails the test unless `MUNINN_SKIP_PEERS=1`.
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            muninn_testkit::peers::missing_peer("a tmpfs mount (the test runs as root on CI)");
            return None;
        }
        Some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A commit that fails on a full disk does not poison the store: once there is room again the
/// very same store writes, without a restart (it used to refuse every later write with
/// "attempted to call begin_with at non-zero transaction depth").
#[tokio::test]
async fn a_store_writes_again_once_a_full_disk_has_room() {
    let Some(disk) = SmallDisk::mount(3 * 1024 * 1024) else {
        return;
    };
    let store = SqliteStore::open(disk.dir.path().join("muninn.db"))
        .await
        .unwrap();
    store.create_mind(&mind("vala")).await.unwrap();
    // Fill the disk, leaving a little room.
    let filler = disk.dir.path().join("filler");
    std::fs::write(&filler, vec![0u8; 1_536 * 1024]).unwrap();
    let delivery = |i: usize| muninn_store::NewDelivery {
        room: "#swarm".into(),
        sender: "ari".into(),
        is_direct: false,
        to_you: false,
        text: format!("{i} {}", "words to fill the disk ".repeat(4_000)),
        source_id: format!("fill-{i}"),
        received_at_ms: i as i64,
        context: Vec::new(),
    };
    let mut failed = None;
    for i in 0..200 {
        if let Err(e) = store.post_delivery("vala", &delivery(i)).await {
            failed = Some((i, e));
            break;
        }
    }
    let (at, error) = failed.expect("the disk filled up");
    eprintln!("the disk was full at delivery {at}: {error}");
    // A full disk passes: the error says to retry (the host holds an answer whose commit
    // met it, instead of giving it up and asking the provider again).
    assert!(
        matches!(error, StoreError::Unavailable(_)),
        "a full disk is not retryable: {error:?}"
    );
    // Room again: the same store writes, reads back, and issues the next seq.
    std::fs::remove_file(&filler).unwrap();
    let posted = store.post_delivery("vala", &delivery(1_000)).await.unwrap();
    assert!(posted.created);
    assert_eq!(posted.seq, at as i64 + 1, "no seq lost or reissued");
    let lease = store
        .acquire_lease("vala", "host-a", 30_000, 1)
        .await
        .unwrap()
        .unwrap();
    store
        .append_transcript("vala", lease.token, &[item(1)])
        .await
        .unwrap();
    // Closed, not dropped: a dropped pool closes its connections later, and the tmpfs could
    // not be unmounted while they (or the store's lock file) are open.
    store.close().await;
    drop(store);
    drop(disk);
}
