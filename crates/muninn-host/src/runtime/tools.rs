//! The Self's read-only tools, run by the host against a real directory: `read_file`,
//! `list_dir` and `grep`, confined to the run's workspace.
//!
//! Confinement is by resolved path, not by spelling: a path is joined to the workspace root and
//! canonicalised (so `..` and symlinks are followed to where they really lead), and anything that
//! does not end up under the root's own canonical path is refused. Absolute paths are refused
//! outright. The walks (`list_dir`, `grep`) never follow a symlink.
//!
//! Every input and output is bounded, because a tool result joins the prompt of every later
//! request of the segment: a path's length, a pattern's length, the bytes read of one file, the
//! files one `grep` visits, the entries one `list_dir` shows, and the result's bytes
//! ([`MAX_OUTPUT_BYTES`], cut at a character boundary with a note saying so). Results are
//! deterministic (entries sorted by name), so the same workspace gives the same prompt.
//!
//! A refused or failed call is a tool error (`is_error`), never a run failure: the model reads
//! why and the loop goes on.

use muninn_backend::ToolSpec;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

/// The most bytes one tool result carries.
pub const MAX_OUTPUT_BYTES: usize = 16_384;
/// The most bytes of one file read (by `read_file`, and by `grep` per file).
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The longest path an input may give, bytes.
pub const MAX_PATH_BYTES: usize = 1_024;
/// The longest `grep` pattern, bytes.
pub const MAX_PATTERN_BYTES: usize = 256;
/// The most files one `grep` visits.
pub const MAX_GREP_FILES: usize = 2_000;
/// The most matching lines one `grep` reports.
pub const MAX_GREP_MATCHES: usize = 200;
/// The most entries one `list_dir` shows.
pub const MAX_DIR_ENTRIES: usize = 500;
/// The most lines one `read_file` returns by default (and at most).
pub const MAX_READ_LINES: u64 = 2_000;

/// The result of one call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text.
    pub content: String,
    /// Whether the call was refused or failed.
    pub is_error: bool,
}

impl ToolOutput {
    fn ok(content: String) -> ToolOutput {
        ToolOutput {
            content: bounded(content),
            is_error: false,
        }
    }

    fn error(message: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: bounded(format!("error: {}", message.into())),
            is_error: true,
        }
    }
}

/// The tools over one workspace directory.
#[derive(Debug, Clone)]
pub struct WorkspaceTools {
    /// The workspace's canonical path.
    root: PathBuf,
}

impl WorkspaceTools {
    /// The tools over `root`, which must be an existing directory.
    pub fn new(root: &Path) -> std::io::Result<WorkspaceTools> {
        let root = root.canonicalize()?;
        if !root.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        Ok(WorkspaceTools { root })
    }

    /// The tools as offered to the model (their names, descriptions and input schemas are part
    /// of the session's cached head, so they never change within a configuration).
    pub fn specs() -> Vec<ToolSpec> {
        let path = |what: &str| json!({"type": "string", "maxLength": MAX_PATH_BYTES, "description": what});
        vec![
            ToolSpec {
                name: "read_file".to_string(),
                description: format!(
                    "Read a text file of the workspace, from line `offset` (1-based, default 1), \
                     at most `limit` lines (default and most {MAX_READ_LINES}), each prefixed \
                     with its number. Results over {MAX_OUTPUT_BYTES} bytes are cut."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "path": path("The file, relative to the workspace."),
                        "offset": {"type": "integer", "minimum": 1},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_READ_LINES},
                    },
                    "required": ["path"],
                    "additionalProperties": false,
                }),
            },
            ToolSpec {
                name: "list_dir".to_string(),
                description: format!(
                    "List a directory of the workspace (default its root), sorted by name; \
                     directories end with `/`, symlinks with `@`. At most {MAX_DIR_ENTRIES} \
                     entries."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {"path": path("The directory, relative to the workspace.")},
                    "additionalProperties": false,
                }),
            },
            ToolSpec {
                name: "grep".to_string(),
                description: format!(
                    "Find the lines containing `pattern` (a literal string, case-sensitive) in \
                     the files under `path` (default the whole workspace), as `file:line: text`. \
                     At most {MAX_GREP_MATCHES} lines from {MAX_GREP_FILES} files."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_BYTES},
                        "path": path("A file or directory, relative to the workspace."),
                    },
                    "required": ["pattern"],
                    "additionalProperties": false,
                }),
            },
        ]
    }

    /// Runs one call. Never fails: a refusal or an I/O error is a tool error the model reads.
    pub fn call(&self, name: &str, input: &Value) -> ToolOutput {
        let result = match name {
            "read_file" => self.read_file(input),
            "list_dir" => self.list_dir(input),
            "grep" => self.grep(input),
            other => Err(format!(
                "unknown tool {other:?}; the tools are read_file, list_dir and grep"
            )),
        };
        match result {
            Ok(text) => ToolOutput::ok(text),
            Err(message) => ToolOutput::error(message),
        }
    }

    /// Where `given` (relative to the workspace) really is, if that is inside the workspace.
    fn resolve(&self, given: &str) -> Result<PathBuf, String> {
        if given.len() > MAX_PATH_BYTES {
            return Err(format!(
                "a path of {} bytes (at most {MAX_PATH_BYTES})",
                given.len()
            ));
        }
        let path = Path::new(given);
        if path.is_absolute() || path.components().any(|c| matches!(c, Component::Prefix(_))) {
            return Err(format!(
                "{given:?} is an absolute path; paths are relative to the workspace"
            ));
        }
        let real = self
            .root
            .join(path)
            .canonicalize()
            .map_err(|e| format!("{given:?}: {e}"))?;
        if !real.starts_with(&self.root) {
            return Err(format!(
                "{given:?} is outside the workspace: the tools read only inside it"
            ));
        }
        Ok(real)
    }

    /// `path` relative to the workspace, for results (`.` for the root).
    fn shown(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    fn read_file(&self, input: &Value) -> Result<String, String> {
        let path = self.resolve(string_field(input, "path")?.ok_or("`path` is required")?)?;
        let offset = integer_field(input, "offset")?.unwrap_or(1).max(1);
        let limit = integer_field(input, "limit")?
            .unwrap_or(MAX_READ_LINES)
            .clamp(1, MAX_READ_LINES);
        let (text, truncated) = read_bounded(&path)?;
        let mut out = String::new();
        let mut shown = 0u64;
        for (n, line) in text.lines().enumerate().skip((offset - 1) as usize) {
            if shown == limit || out.len() > MAX_OUTPUT_BYTES {
                break;
            }
            let _ = writeln!(out, "{:>6}\t{line}", n + 1);
            shown += 1;
        }
        if truncated {
            let _ = writeln!(
                out,
                "[only the first {MAX_FILE_BYTES} bytes of the file read]"
            );
        }
        if shown == 0 && !truncated {
            out = format!("[{} has no line {offset}]", self.shown(&path));
        }
        Ok(out)
    }

    fn list_dir(&self, input: &Value) -> Result<String, String> {
        let dir = self.resolve(string_field(input, "path")?.unwrap_or("."))?;
        let entries = sorted_entries(&dir)?;
        let mut out = String::new();
        for (name, kind) in entries.iter().take(MAX_DIR_ENTRIES) {
            let mark = match kind {
                Kind::Dir => "/",
                Kind::Link => "@",
                Kind::File => "",
            };
            let _ = writeln!(out, "{name}{mark}");
        }
        if entries.len() > MAX_DIR_ENTRIES {
            let _ = writeln!(
                out,
                "[{} more entries not shown]",
                entries.len() - MAX_DIR_ENTRIES
            );
        }
        if entries.is_empty() {
            out = format!("[{} is empty]", self.shown(&dir));
        }
        Ok(out)
    }

    fn grep(&self, input: &Value) -> Result<String, String> {
        let pattern = string_field(input, "pattern")?.ok_or("`pattern` is required")?;
        if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "a pattern of {} bytes (1 to {MAX_PATTERN_BYTES})",
                pattern.len()
            ));
        }
        let start = self.resolve(string_field(input, "path")?.unwrap_or("."))?;
        let mut files = Vec::new();
        collect_files(&start, &mut files)?;
        let mut out = String::new();
        let mut matches = 0usize;
        for file in &files {
            // A file that cannot be read as text (binary, unreadable) has no lines to match.
            let Ok((text, _)) = read_bounded(file) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                if line.contains(pattern) {
                    matches += 1;
                    if matches <= MAX_GREP_MATCHES {
                        let _ = writeln!(out, "{}:{}: {line}", self.shown(file), n + 1);
                    }
                }
            }
        }
        if matches > MAX_GREP_MATCHES {
            let _ = writeln!(
                out,
                "[{} more matches not shown]",
                matches - MAX_GREP_MATCHES
            );
        }
        if files.len() == MAX_GREP_FILES {
            let _ = writeln!(out, "[stopped after {MAX_GREP_FILES} files]");
        }
        if matches == 0 {
            let _ = write!(out, "[no line contains {pattern:?}]");
        }
        Ok(out)
    }
}

/// A string field of the input, if present.
fn string_field<'a>(input: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

/// A positive integer field of the input, if present.
fn integer_field(input: &Value, key: &str) -> Result<Option<u64>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a positive integer")),
    }
}

/// At most [`MAX_FILE_BYTES`] of a file as text, and whether there was more. A file that is not
/// UTF-8 text (within what was read) is refused, and so is anything but a regular file.
///
/// The file is opened by [`muninn_fs::open_regular`] (non-blocking, then checked on the
/// open descriptor): a named pipe (or a device) in the
/// workspace used to be opened and read like a file, and opening a FIFO for reading waits for
/// a writer — for ever. The call held a blocking thread, the Self run and its runner's step
/// (the Mind `RUNNING`, nothing logged), and the host's shutdown, which waits for the step. A
/// `grep` over the workspace opened every such entry it walked past.
fn read_bounded(path: &Path) -> Result<(String, bool), String> {
    let (bytes, truncated) =
        muninn_fs::read_prefix(path, MAX_FILE_BYTES).map_err(|e| match e.kind() {
            std::io::ErrorKind::IsADirectory => {
                "a directory, not a file (list it with list_dir)".to_string()
            }
            _ => e.to_string(),
        })?;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        // Cut inside a character by the bound: keep what is whole.
        Err(e) if truncated && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|_| "not a text file".to_string())?
        }
        Err(_) => return Err("not a text file".to_string()),
    };
    Ok((text, truncated))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Link,
}

/// A directory's entries by name, with what each is (a symlink is not followed).
fn sorted_entries(dir: &Path) -> Result<Vec<(String, Kind)>, String> {
    let read = std::fs::read_dir(dir).map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| e.to_string())?;
        let kind = match entry.file_type() {
            Ok(t) if t.is_symlink() => Kind::Link,
            Ok(t) if t.is_dir() => Kind::Dir,
            _ => Kind::File,
        };
        entries.push((entry.file_name().to_string_lossy().into_owned(), kind));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// The regular files at or under `start`, depth first in name order, at most
/// [`MAX_GREP_FILES`]; symlinks are not followed.
fn collect_files(start: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    if start.is_file() {
        files.push(start.to_path_buf());
        return Ok(());
    }
    for (name, kind) in sorted_entries(start)? {
        if files.len() >= MAX_GREP_FILES {
            break;
        }
        let path = start.join(&name);
        match kind {
            Kind::File => files.push(path),
            // An unreadable subdirectory is skipped, not fatal.
            Kind::Dir => {
                let _ = collect_files(&path, files);
            }
            Kind::Link => {}
        }
    }
    files.truncate(MAX_GREP_FILES);
    Ok(())
}

/// `text` cut to [`MAX_OUTPUT_BYTES`] at a character boundary, with a note when cut.
fn bounded(mut text: String) -> String {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut cut = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("\n[cut at {MAX_OUTPUT_BYTES} bytes]"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, WorkspaceTools) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "fn a() {}\n// needle one\n").unwrap();
        std::fs::write(dir.path().join("src/deep/b.rs"), "needle two\nnot here\n").unwrap();
        std::fs::write(dir.path().join("big.txt"), "é".repeat(MAX_OUTPUT_BYTES)).unwrap();
        let tools = WorkspaceTools::new(dir.path()).unwrap();
        (dir, tools)
    }

    #[test]
    fn reads_lists_and_greps_inside_the_workspace() {
        let (_dir, tools) = workspace();
        let read = tools.call("read_file", &json!({"path": "src/a.rs", "offset": 2}));
        assert_eq!(read, ToolOutput::ok("     2\t// needle one\n".to_string()));
        let list = tools.call("list_dir", &json!({}));
        assert_eq!(list.content, "big.txt\nsrc/\n");
        let grep = tools.call("grep", &json!({"pattern": "needle"}));
        assert_eq!(
            grep.content,
            "src/a.rs:2: // needle one\nsrc/deep/b.rs:1: needle two\n"
        );
        // `..` that stays inside is fine.
        let inside = tools.call(
            "read_file",
            &json!({"path": "src/deep/../a.rs", "limit": 1}),
        );
        assert_eq!(inside.content, "     1\tfn a() {}\n");
    }

    #[test]
    fn paths_that_leave_the_workspace_are_refused() {
        let (dir, tools) = workspace();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("src/escape")).unwrap();
        for path in [
            "../secret".to_string(),
            "src/../../secret".to_string(),
            outside.path().join("secret").display().to_string(),
            "src/escape/secret".to_string(),
        ] {
            let out = tools.call("read_file", &json!({ "path": path }));
            assert!(out.is_error, "{path}: {out:?}");
            assert!(!out.content.contains("s3cret"), "{path}: {out:?}");
        }
        let out = tools.call("read_file", &json!({"path": "src/escape/secret"}));
        assert!(out.content.contains("outside the workspace"), "{out:?}");
        // A walk does not follow the symlink either.
        let grep = tools.call("grep", &json!({"pattern": "s3cret"}));
        assert!(
            !grep.is_error && grep.content.starts_with("[no line"),
            "{grep:?}"
        );
    }

    /// A named pipe in the workspace is refused at once by `read_file` and skipped by `grep`.
    /// Both opened it and waited for a writer that never came: the call never returned.
    #[test]
    fn a_named_pipe_is_refused_not_waited_on() {
        let (dir, tools) = workspace();
        let fifo = dir.path().join("src/pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let read = tools.call("read_file", &json!({"path": "src/pipe"}));
            let grep = tools.call("grep", &json!({"pattern": "needle"}));
            let _ = tx.send((read, grep));
        });
        let (read, grep) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the tools still waiting on the FIFO after 10 s");
        assert!(read.is_error, "{read:?}");
        assert!(
            read.content.contains("a pipe, socket or device"),
            "{read:?}"
        );
        assert_eq!(
            grep,
            ToolOutput::ok("src/a.rs:2: // needle one\nsrc/deep/b.rs:1: needle two\n".to_string())
        );
    }

    #[test]
    fn inputs_and_outputs_are_bounded() {
        let (_dir, tools) = workspace();
        let big = tools.call("read_file", &json!({"path": "big.txt"}));
        assert!(!big.is_error);
        assert!(
            big.content.len() <= MAX_OUTPUT_BYTES + 40,
            "{}",
            big.content.len()
        );
        assert!(
            big.content
                .ends_with(&format!("[cut at {MAX_OUTPUT_BYTES} bytes]"))
        );
        let long = "a".repeat(MAX_PATH_BYTES + 1);
        assert!(tools.call("list_dir", &json!({ "path": long })).is_error);
        let pattern = "p".repeat(MAX_PATTERN_BYTES + 1);
        assert!(tools.call("grep", &json!({ "pattern": pattern })).is_error);
        assert!(tools.call("read_file", &json!({"path": 7})).is_error);
        assert!(tools.call("write_file", &json!({"path": "x"})).is_error);
        assert!(tools.call("read_file", &json!({"path": "src"})).is_error);
    }
}
