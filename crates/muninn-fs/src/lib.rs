//! # muninn-fs
//!
//! Reading a file that a user or another process could have put anything at: a named pipe, a
//! device, a link to either, a log grown to gigabytes. Every file muninn reads that it did not
//! just write itself is read through here: the importers' transcripts, the host's configuration
//! and the files it names, the Self tools' reads, the API token, the host file clients find a
//! host by, the store's identity file, the host's instance id and its session-binding key, and
//! the Claude Code CLI's session files (the part a turn added, which the CLI driver checks
//! before it takes a failed turn back out).
//!
//! A reader decides from a path's metadata (`stat`) whether to read it, but the path can change
//! between that look and the `open`: a file replaced by a named pipe (whose `open` blocks for
//! ever with no writer), or by a link to a device (`/dev/zero` reads for ever). So the open never
//! blocks (`O_NONBLOCK`), and the opened file's own metadata (`fstat`, which no rename can
//! change) decides whether it is read ([`open_regular`]). Its length then is the most an
//! importer reads of it: a file appended to while it is read (a live session) is read as it was
//! when opened, so a writer faster than the import cannot keep it reading. A small file is read
//! whole but never past its bound ([`read_limited`], [`read_prefix`]), and so is a part of a
//! file from an offset on ([`read_rest_limited`]): one byte more than the bound is read, to tell
//! a file at the limit from a larger one, and no more.
//!
//! It lives below every crate that reads such a file (the API's, the store's, the importers',
//! the host's), so there is one copy of it; `muninn-core` does no I/O.

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
/// whatever it turns out to be; a directory is refused with [`io::ErrorKind::IsADirectory`],
/// anything else with [`not_a_file`].
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
pub fn not_a_file() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a file nor a folder (a pipe, socket or device)",
    )
}

/// At most `limit` bytes of the regular file `path` (opened by [`open_regular`]), and whether
/// it holds more: the Self tools show a long file's beginning.
pub fn read_prefix(path: &Path, limit: u64) -> io::Result<(Vec<u8>, bool)> {
    use io::Read as _;
    let mut bytes = Vec::new();
    open_regular(path)?
        .file
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    let more = bytes.len() as u64 > limit;
    if more {
        bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok((bytes, more))
}

/// The whole of the regular file `path`, which must hold at most `limit` bytes; a larger one is
/// refused with [`io::ErrorKind::InvalidData`], "larger than the limit of `limit` bytes for
/// `what`" (`what`: "a configuration file", "the API token file"). The caller names the path.
pub fn read_limited(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let (bytes, more) = read_prefix(path, limit)?;
    if more {
        return Err(over_limit(limit, what));
    }
    Ok(bytes)
}

/// The rest of `reader` from where it stands — a part of a file (opened by [`open_regular`] and
/// moved to the part's start) that must hold at most `limit` bytes; a longer rest is refused as
/// [`read_limited`] refuses a file (no more than `limit + 1` bytes are read to tell).
pub fn read_rest_limited(reader: impl io::Read, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    use io::Read as _;
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(over_limit(limit, what));
    }
    Ok(bytes)
}

/// The refusal of a file, or a part of one, larger than `limit` bytes for `what`.
fn over_limit(limit: u64, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than the limit of {limit} bytes for {what}"),
    )
}

/// [`read_limited`], as UTF-8 text; other bytes are refused with [`io::ErrorKind::InvalidData`].
pub fn read_text_limited(path: &Path, limit: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read_limited(path, limit, what)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_up_to_its_bound_and_refused_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "0123456789").unwrap();
        assert_eq!(
            read_text_limited(&path, 10, "a test").unwrap(),
            "0123456789"
        );
        assert_eq!(read_prefix(&path, 4).unwrap(), (b"0123".to_vec(), true));
        assert_eq!(
            read_prefix(&path, 10).unwrap(),
            (b"0123456789".to_vec(), false)
        );
        let over = read_limited(&path, 9, "a test file").unwrap_err();
        assert_eq!(over.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            over.to_string(),
            "larger than the limit of 9 bytes for a test file"
        );
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_text_limited(&path, 10, "a test")
                .unwrap_err()
                .to_string(),
            "not UTF-8 text"
        );
        let dir_err = read_limited(dir.path(), 10, "a test").unwrap_err();
        assert_eq!(dir_err.kind(), io::ErrorKind::IsADirectory);
    }

    #[test]
    fn the_rest_of_a_file_is_read_up_to_its_bound_and_refused_past_it() {
        use io::{Seek, SeekFrom};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "0123456789").unwrap();
        let mut file = open_regular(&path).unwrap().file;
        file.seek(SeekFrom::Start(4)).unwrap();
        assert_eq!(
            read_rest_limited(&mut file, 6, "a part").unwrap(),
            b"456789"
        );
        file.seek(SeekFrom::Start(3)).unwrap();
        let over = read_rest_limited(&mut file, 6, "a part").unwrap_err();
        assert_eq!(over.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            over.to_string(),
            "larger than the limit of 6 bytes for a part"
        );
    }
}
