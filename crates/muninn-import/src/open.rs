//! Opening a file to import: without blocking, and only if what was opened is a regular file.
//!
//! The walk decides from a path's metadata (`stat`) whether to read it, but the path can change
//! between that look and the `open`: a file replaced by a named pipe (whose `open` blocks for
//! ever with no writer), or by a link to a device (`/dev/zero` reads for ever). So the open never
//! blocks (`O_NONBLOCK`), and the opened file's own metadata (`fstat`, which no rename can
//! change) decides whether it is read. Its length then is the most that is read of it: a file
//! appended to while it is read (a live session) is read as it was when opened, so a writer
//! faster than the import cannot keep it reading.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// A regular file, opened for reading, and its length when opened.
#[derive(Debug)]
pub struct Opened {
    /// The file.
    pub file: File,
    /// Its length when opened: the most that should be read of it.
    pub len: u64,
}

/// Opens `path` for reading if it is a regular file (a link to one included), without blocking
/// whatever it turns out to be; anything else is refused with [`not_a_file`]. Exported for the
/// readers of transcripts outside this crate (`muninn replay --vs-ccusage`).
pub fn open_regular(path: &Path) -> io::Result<Opened> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Opening a pipe with no writer returns at once instead of blocking; on a regular file
        // the flag changes nothing (its reads never wait).
        options.custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits());
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    // Said apart from the rest: a reader outside the walk (a file the host's configuration names,
    // a Self tool's read) may be given a directory, which is no pipe, socket or device.
    if meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "a directory, not a file",
        ));
    }
    if !meta.is_file() {
        return Err(not_a_file());
    }
    Ok(Opened {
        len: meta.len(),
        file,
    })
}

/// Why a path that is neither a file nor a folder is not read.
pub(crate) fn not_a_file() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a file nor a folder (a pipe, socket or device)",
    )
}
