//! stdout, the CLI's protocol channel: every command prints its results through [`outln!`] and
//! [`out!`], which return an error instead of panicking when stdout is gone. A reader that stops
//! early (`muninn ledger vala | head -1`) closes the pipe; the next write fails with
//! `BrokenPipe`, the command unwinds with that error, and `main` exits quietly
//! ([`is_broken_pipe`]). (`println!` panics there, because Rust ignores SIGPIPE.) Diagnostics
//! go to stderr with `eprintln!`.

use std::io::Write;

/// Writes to stdout, returning the I/O error (a closed pipe) rather than panicking. Control
/// characters are escaped on the way ([`crate::terminal::sanitize`]): much of what is printed
/// was written by someone else.
pub fn write(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let text = std::fmt::format(args);
    let mut out = std::io::stdout().lock();
    out.write_all(crate::terminal::sanitize(&text).as_bytes())?;
    out.flush()
}

/// `println!` that returns `Err` on a closed stdout: use with `?`.
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns `Err` on a closed stdout: use with `?`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};

/// Whether `error` is, somewhere in its chain, a write to a closed pipe.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// One value as pretty JSON on stdout.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}
