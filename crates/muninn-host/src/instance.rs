//! This host's identity in its data directory, and the proof a restart needs.
//!
//! A host restarted on its own data directory after a crash (`kill -9`, a power cut) finds its
//! Minds' leases still live under its previous process's holder name; without a proof that
//! process is gone it would wait the whole lease TTL (25–28 s were measured) before running
//! them again. The proof is two facts together:
//!
//! - a stable **instance id**, created once and kept in `<data_dir>/host-instance`, is part of
//!   every holder name this data directory's hosts use: `<hostname>-<instance>-<pid>`;
//! - an exclusive **lock** (`flock`) on `<data_dir>/host.lock`, held for the life of the
//!   process. The kernel lets go of it when the process dies, however it dies.
//!
//! So a host holding the lock, finding a lease held by `<hostname>-<instance>-<other pid>`,
//! knows that holder was a process of its own instance, which must have held the lock while it
//! ran, and is therefore dead. It may take that lease over at once (fencing still guards).
//!
//! Two hosts sharing one data directory (allowed; the second only shares the API token) do not
//! both get the lock: the second runs under a fresh, unshared instance id and proves nothing
//! about anyone — it takes Minds over by presence (PostgreSQL) or when leases expire.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::Path;

/// The file holding the instance id.
const ID_FILE: &str = "host-instance";
/// The largest instance id file read, bytes: an id is 16 hex digits and a newline; a larger
/// file is not ours, and is refused rather than read whole.
const ID_FILE_MAX_BYTES: u64 = 4096;
/// The file locked while a host of this instance runs.
const LOCK_FILE: &str = "host.lock";

/// Why the identity could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The data directory's id or lock file could not be read, written or locked.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// This process's identity: its holder name, and whether it owns its data directory's
/// instance (so can prove earlier processes of that instance dead).
#[derive(Debug)]
pub struct Instance {
    /// The lease holder name: `<hostname>-<instance>-<pid>`.
    pub holder: String,
    /// `<hostname>-<instance>-` when this process holds the data directory's lock: any other
    /// holder name with this prefix was an earlier, now dead, process of this instance.
    earlier_self_prefix: Option<String>,
    /// Held open (so locked) for the life of the process.
    _lock: Option<File>,
}

impl Instance {
    /// Claims `data_dir`'s instance for this process (`hostname`, `pid`): the stable id and the
    /// lock when free; a fresh unshared id when another live process holds the lock.
    pub fn claim(data_dir: &Path, hostname: &str, pid: u32) -> Result<Instance, InstanceError> {
        let io = |what, path: &Path| {
            let path = path.display().to_string();
            move |source| InstanceError::Io { what, path, source }
        };
        std::fs::create_dir_all(data_dir).map_err(io("creating", data_dir))?;
        let lock_path = data_dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("opening", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {
                let id_path = data_dir.join(ID_FILE);
                let id = stable_id(&id_path).map_err(io("keeping the instance id in", &id_path))?;
                let prefix = format!("{hostname}-{id}-");
                Ok(Instance {
                    holder: format!("{prefix}{pid}"),
                    earlier_self_prefix: Some(prefix),
                    _lock: Some(lock),
                })
            }
            Err(TryLockError::WouldBlock) => {
                tracing::info!(
                    data_dir = %data_dir.display(),
                    "another host runs on this data directory: running under a fresh instance id"
                );
                Ok(Instance::unshared(hostname, pid))
            }
            Err(TryLockError::Error(e)) => Err(io("locking", &lock_path)(e)),
        }
    }

    /// An identity that proves nothing about earlier processes (a fresh id, no lock).
    pub fn unshared(hostname: &str, pid: u32) -> Instance {
        Instance {
            holder: format!("{hostname}-{}-{pid}", fresh_id()),
            earlier_self_prefix: None,
            _lock: None,
        }
    }

    /// Whether `holder` was an earlier process of this instance (so is dead): never this
    /// process itself, never anything when this process does not own the instance.
    pub fn is_earlier_self(&self, holder: &str) -> bool {
        self.earlier_self_prefix
            .as_deref()
            .is_some_and(|prefix| holder.starts_with(prefix) && holder != self.holder)
    }
}

/// The instance id kept at `path`, created on first use. Called only under the lock, so two
/// first starts cannot write two ids. Only a regular file of at most [`ID_FILE_MAX_BYTES`] is
/// read: a named pipe there was waited on for a writer, for ever, hanging the host's start.
fn stable_id(path: &Path) -> std::io::Result<String> {
    match muninn_fs::read_text_limited(path, ID_FILE_MAX_BYTES, "an instance id file") {
        Ok(text) if is_id(text.trim()) => return Ok(text.trim().to_owned()),
        Ok(_) => tracing::warn!(path = %path.display(), "malformed instance id: replacing it"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = fresh_id();
    let mut file = File::create(path)?;
    file.write_all(format!("{id}\n").as_bytes())?;
    file.sync_all()?;
    Ok(id)
}

fn is_id(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// 16 hex digits from the kernel's random source; a hash of the time and pid where that cannot
/// be read (the id only has to differ from other instances', not be secret).
fn fresh_id() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/random/uuid").ok();
    let hex: String = kernel
        .iter()
        .flat_map(|uuid| uuid.chars())
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    if hex.len() == 16 {
        return hex;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_owner_keeps_its_id_and_knows_its_earlier_processes() {
        let dir = tempfile::tempdir().unwrap();
        let first = Instance::claim(dir.path(), "box", 10).unwrap();
        let id = std::fs::read_to_string(dir.path().join(ID_FILE)).unwrap();
        assert!(is_id(id.trim()), "{id:?}");
        assert_eq!(first.holder, format!("box-{}-10", id.trim()));
        // While it runs, a second host on the directory gets a fresh id and proves nothing.
        let second = Instance::claim(dir.path(), "box", 11).unwrap();
        assert!(!second.holder.contains(id.trim()), "{}", second.holder);
        assert!(!second.is_earlier_self(&first.holder));
        assert!(!first.is_earlier_self(&first.holder), "not itself");
        assert!(!first.is_earlier_self(&second.holder), "not a stranger");
        drop(second);
        // The first process dies (its lock goes); the restart keeps the id and may take over.
        let old = first.holder.clone();
        drop(first);
        let restarted = Instance::claim(dir.path(), "box", 12).unwrap();
        assert_eq!(restarted.holder, format!("box-{}-12", id.trim()));
        assert!(restarted.is_earlier_self(&old));
        assert!(!restarted.is_earlier_self("other-box-0123456789abcdef-10"));
    }

    /// A named pipe where the instance id is kept was waited on for a writer, for ever:
    /// `muninn serve` hung at start, saying nothing. A 100 MB file there was read whole. Both
    /// are refused now, naming the file (and the limit).
    #[test]
    fn an_id_file_that_is_a_pipe_or_huge_is_refused_not_waited_on() {
        use muninn_testkit::hostile_files::{fifo, huge, within_10s};
        let dir = tempfile::tempdir().unwrap();
        let pipe = fifo(dir.path(), ID_FILE);
        let data_dir = dir.path().to_owned();
        let refused = within_10s(move || Instance::claim(&data_dir, "box", 10).map(drop));
        let refused = refused.unwrap_err().to_string();
        let not_a_file = "not a file nor a folder (a pipe, socket or device)";
        assert!(
            refused.contains(&pipe.display().to_string()) && refused.contains(not_a_file),
            "{refused}"
        );
        std::fs::remove_file(&pipe).unwrap();
        let large = huge(dir.path(), ID_FILE);
        let refused = Instance::claim(dir.path(), "box", 10)
            .map(drop)
            .unwrap_err();
        let refused = refused.to_string();
        assert!(
            refused.contains(&large.display().to_string())
                && refused.contains("larger than the limit of 4096 bytes"),
            "{refused}"
        );
    }

    #[test]
    fn an_unshared_identity_proves_nothing() {
        let me = Instance::unshared("box", 7);
        assert!(me.holder.starts_with("box-") && me.holder.ends_with("-7"));
        assert!(!me.is_earlier_self("box-0123456789abcdef-6"));
    }
}
