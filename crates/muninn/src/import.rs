//! `muninn import`: transcripts in, muninn's stored trace format out.

use crate::InputArgs;
use crate::output::outln;
use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `muninn import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Where muninn keeps its data; traces go to `<data-dir>/traces/`.
    #[arg(long, env = "MUNINN_DATA_DIR", default_value = "muninn-data")]
    data_dir: PathBuf,
}

/// Imports and writes one stored file per session, named after the session, so that importing
/// the same transcripts twice replaces rather than duplicates them.
pub fn run(args: ImportArgs) -> anyhow::Result<()> {
    let import = args.input.import()?;
    let dir = args.data_dir.join("traces");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut by_session: std::collections::BTreeMap<&str, Vec<&muninn_core::trace::Trace>> =
        Default::default();
    for trace in &import.traces {
        by_session.entry(&trace.session).or_default().push(trace);
    }
    for (session, traces) in &by_session {
        let name = stored_name(session);
        let path = dir.join(format!("{name}.jsonl"));
        // Write to a temporary name and rename, so a crash never leaves a torn stored file.
        let tmp = dir.join(format!(".{name}.jsonl.tmp"));
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
        );
        muninn_import::write_traces(&mut file, traces.iter().copied())?;
        file.flush()?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    }
    // Named only when there are some, so the usual summary reads as before.
    let unreadable = match import.stats.files_unreadable {
        0 => String::new(),
        n => format!(" ({n} unreadable files skipped)"),
    };
    outln!(
        "imported {} requests in {} traces from {} files{unreadable} into {} ({} sessions); {} warnings, {} duplicates and {} synthetic rows dropped",
        import.stats.requests,
        import.traces.len(),
        import.stats.files,
        dir.display(),
        by_session.len(),
        import.warnings.len(),
        import.stats.duplicates_dropped,
        import.stats.synthetic_dropped,
    )?;
    Ok(())
}

/// The stored file name of a session: its id with every byte outside `[A-Za-z0-9-]` written as
/// `_xx` (so `a/b`, `a_b` and `a:b` stay three files, not one), and a long id cut with a digest
/// of the whole appended (file names are limited to 255 bytes).
fn stored_name(session: &str) -> String {
    const KEPT: usize = 120;
    let mut name = String::with_capacity(session.len());
    for b in session.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            name.push(b as char);
        } else {
            name.push_str(&format!("_{b:02x}"));
        }
    }
    if name.len() > KEPT {
        let digest = muninn_core::cache::hash_bytes(session.as_bytes());
        name.truncate(KEPT);
        name.push_str(&format!("_{digest:016x}"));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::stored_name;

    #[test]
    fn distinct_sessions_get_distinct_names() {
        let ids = ["a/b", "a_b", "a:b", "a b", "a%2fb", "ab", "A-b", "é"];
        let names: std::collections::BTreeSet<String> =
            ids.iter().map(|s| stored_name(s)).collect();
        assert_eq!(names.len(), ids.len(), "{names:?}");
        assert_eq!(stored_name("a_b"), "a_5fb");
        assert!(names.iter().all(|n| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        }));
        let long = "x/".repeat(400);
        let other = format!("{}y", "x/".repeat(400));
        assert!(stored_name(&long).len() < 200);
        assert_ne!(stored_name(&long), stored_name(&other));
    }
}
