//! Conversation files are private: the data directory is 0700 and what holds conversations in it
//! (the database and its `-wal`/`-shm`, imported traces, the claude-cli children's session
//! directories, the API token) is readable by its owner only.
//!
//! The commands that write there (`serve`, `import`) set the process umask to 0077 first, so
//! everything they — and the children they start, which inherit it — create is 0600 / 0700
//! whatever the caller's umask; SQLite gives its `-wal` and `-shm` the database file's mode.
//! A data directory or database made before (or by another tool) is tightened at start, with a
//! warning naming what was loosened, since another local user may already have read it.

use nix::sys::stat::{Mode, umask};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Sets the umask to 0077 for this process and its children.
pub fn set_private_umask() {
    umask(Mode::from_bits_truncate(0o077));
}

/// Makes `path` (if it exists) `mode` when it grants group or others anything.
fn tighten(path: &Path, mode: u32) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let before = meta.permissions().mode() & 0o777;
    if before & 0o077 == 0 {
        return;
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        Ok(()) => tracing::warn!(
            path = %path.display(),
            before = format!("{before:o}"),
            after = format!("{mode:o}"),
            "tightened permissions: group or others could read conversation data"
        ),
        Err(error) => tracing::warn!(
            path = %path.display(),
            before = format!("{before:o}"),
            %error,
            "cannot tighten permissions of conversation data"
        ),
    }
}

/// Tightens the data directory (0700) and its top-level entries (files 0600, directories
/// 0700), and a SQLite `database` outside it with its `-wal` and `-shm` (0600).
pub fn tighten_data_dir(data_dir: &Path, database: &str) {
    tighten(data_dir, 0o700);
    if let Ok(entries) = std::fs::read_dir(data_dir) {
        for entry in entries.flatten() {
            let dir = entry.file_type().is_ok_and(|t| t.is_dir());
            tighten(&entry.path(), if dir { 0o700 } else { 0o600 });
        }
    }
    if !database.contains("://") {
        for suffix in ["", "-wal", "-shm"] {
            tighten(Path::new(&format!("{database}{suffix}")), 0o600);
        }
    }
}
