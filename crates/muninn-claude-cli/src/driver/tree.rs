//! Killing a child together with every process it started.
//!
//! The CLI runs each Bash tool call in a shell of its own process group (node's `detached`), so
//! SIGKILL of the CLI, or of its process group, does not reach them: a `tail -f` or a build a
//! Self run started would run on, orphaned, after every timed-out or killed run. So before the
//! driver kills a child it stops it (SIGSTOP: it starts nothing new and reaps nothing, so the
//! pids listed stay its descendants), lists its descendants from `/proc`, and kills them; the
//! caller then kills the child itself. A graceful stop (stdin closed, SIGTERM) leaves the
//! CLI's own clean-up to it.

use rustix::process::{Pid, Signal, kill_process};
use std::collections::HashMap;

/// Stops `root` and kills every process descended from it (not `root` itself, which the caller
/// kills and reaps through its `Child`). Returns how many descendants were signalled.
pub(super) fn kill_descendants(root: Option<u32>) -> usize {
    let Some(root) = root else { return 0 };
    signal(root, Signal::STOP);
    let found = descendants(root);
    for pid in &found {
        signal(*pid, Signal::KILL);
    }
    if !found.is_empty() {
        tracing::warn!(pid = root, killed = ?found, "claude-cli: killed the processes the child started");
    }
    found.len()
}

/// Every process below `root` in the process tree, parents before their children.
fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // A process that ended since the listing has no `stat`: it needs no killing.
        if let Some(ppid) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| parent_of(&stat))
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(pid) = next.pop() {
        for child in children.remove(&pid).unwrap_or_default() {
            found.push(child);
            next.push(child);
        }
    }
    found
}

/// The parent pid in a `/proc/<pid>/stat` line: the second field after the command, which is
/// in parentheses and may itself hold spaces and parentheses.
fn parent_of(stat: &str) -> Option<u32> {
    let after_command = &stat[stat.rfind(')')? + 1..];
    after_command.split_whitespace().nth(1)?.parse().ok()
}

fn signal(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // A process gone since the listing is what killing it would have made it.
        let _gone = kill_process(pid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_command_with_spaces_and_parentheses() {
        assert_eq!(parent_of("42 (tail) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_of("42 (a b) (c)) R 9 1 1"), Some(9));
        assert_eq!(parent_of("42 (truncated"), None);
    }
}
