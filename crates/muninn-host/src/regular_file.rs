//! Opening a file the host reads as data — a configuration file, a file the configuration
//! names, a workspace file a Self tool reads — without ever waiting on it.
//!
//! A path may name something that is not a file: a named pipe, a device, a socket. Opening a
//! named pipe for reading waits for a writer, for ever; whatever opened it hung with it (at
//! load, `muninn serve` and `muninn doctor`; at a turn, the Mind's step on a runtime thread, and
//! the host's shutdown, which waits for the step). So every such file is opened non-blocking
//! (which makes that open return at once) and without becoming the process's controlling
//! terminal (a path naming a terminal), then checked on the open descriptor — not on the path,
//! which could be swapped between a check and the open — and anything but a regular file is
//! refused. For a regular file, `O_NONBLOCK` changes nothing: its reads never wait on a writer.

use std::fs::File;
use std::io;
use std::path::Path;

/// `path` opened for reading, if it is a regular file (symlinks followed). A directory is an
/// [`io::ErrorKind::IsADirectory`] error; a pipe, socket or device an
/// [`io::ErrorKind::InvalidInput`] one saying it is not a regular file.
pub fn open(path: &Path) -> io::Result<File> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "a directory, not a file",
        ));
    }
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a pipe, socket or device): not read",
        ));
    }
    Ok(file)
}
