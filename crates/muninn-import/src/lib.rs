//! Streaming importers: real transcripts in, normalised [`Trace`]s out.
//!
//! [`import_paths`] takes files and directories, detects each file's format from its first
//! non-empty lines (or takes the one [`ImportOptions::format`] names), and turns every API
//! request it finds into a [`TraceRequest`] of the [`Trace`] for its (session, thread, model).
//! Seven formats are read ([`InputFormat`]):
//!
//! - **Claude Code transcripts** (`~/.claude/projects/**/*.jsonl`, sub-agents included);
//! - **Codex CLI rollouts** (`~/.codex/sessions/**/rollout-*.jsonl`);
//! - **muninn ledger exports** (JSON Lines of [`muninn_core::ledger::LedgerRow`]);
//! - **muninn's stored trace format** (what `muninn import` writes), see [`write_trace`];
//! - **`claude -p --output-format stream-json` output** (one run or several concatenated);
//! - **Messages API request/response logs** (JSON Lines of `{request, response}`, as logging
//!   proxies write them);
//! - **TraceLab per-round CSV** (`session_id,round_idx,prefix_len,input_len,output_len,
//!   tool_wait_after_ms`).
//!
//! # Invariants
//!
//! - A malformed line is never fatal: it becomes a [`Warning`] with its file and line and is
//!   skipped. Nor is one unreadable file (permission denied, an I/O error) in a directory: it is
//!   skipped with a warning naming it and the cause, and counted in
//!   [`ImportStats::files_unreadable`]. Only a path given that does not exist and "nothing
//!   importable" are errors.
//! - Every input has a limit: a line's length (`lines`), the bytes and lines detection reads
//!   (`format`), and a request's token counts and times (`limits`); what passes one is skipped
//!   with a warning naming its line.
//! - Only regular files are read, each as it was when opened (`muninn_fs::open_regular`): an
//!   open never blocks, a pipe or device swapped in for a file is refused, and what is appended
//!   while a file is read waits for the next import.
//! - Memory is bounded by the output, not the input: files are read line by line into one reused
//!   buffer, only the fields needed are decoded (content and tool outputs are skipped without being
//!   allocated), and cross-file de-duplication keeps a 64-bit hash per request id, not the id.
//! - The result is deterministic: files are read in sorted path order, traces come out sorted by
//!   (session, kind, thread, model) and each trace's requests by time. Files whose own folder
//!   is a `subagents` folder are read after every other file: Claude Code (2.1.8x on) writes a session's
//!   sub-agents to `<session>/subagents/agent-<id>.jsonl`, and some of them — the side question
//!   (`agent-aside_question-*`) and the compaction agent (`agent-acompact-*`) — begin with a copy
//!   of the main conversation, the same responses with the same ids, marked `isSidechain`. In
//!   plain path order the folder `<session>/` sorts before `<session>.jsonl`, so the copy won
//!   the de-duplication and the main thread's responses were imported as the sub-agent's (on the
//!   public `omarchy-backup` transcripts, 21 of a session's first main-thread requests).
//!
//! # Layout
//!
//! - `lines`: the line reader and the per-file warning sink;
//! - `limits`: what one request may claim (tokens, times);
//! - `api_request`: a Messages API request body, decoded a block at a time (for `api_log`);
//! - `json`: borrowed strings, content-block counting, timestamps;
//! - `sink`: the traces under construction;
//! - `claude`, `codex`, `ledger`, `stored`, `stream_json`, `api_log`, `tracelab`: one reader per
//!   format; each module's docs describe its format as far as the importer reads it and how it
//!   maps onto [`Trace`].

use muninn_core::trace::{Trace, TraceRequest};
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};

mod api_log;
mod api_request;
mod claude;
mod codex;
mod conversations;
mod format;
mod json;
mod ledger;
mod limits;
mod lines;
mod sink;
mod stored;
mod stream_json;
mod tracelab;

pub use format::InputFormat;

pub use ledger::{LedgerTrace, ledger_traces};
pub use limits::usage_problem;
pub use stored::write_trace;

use lines::{Line, LineReader};

/// What to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// Import Claude Code sub-agent and compaction threads (`isSidechain: true`), not only the
    /// main threads. Default `true`.
    pub include_subagents: bool,
    /// Read every file in this format instead of detecting it: its lines are read, and reported,
    /// as this format's, with a warning on a file whose first lines look like another format.
    /// Default `None` (detect each file's format).
    pub format: Option<InputFormat>,
    /// The model of requests whose format records none (TraceLab CSV). Default `None`: such
    /// traces are on the model `unknown`.
    pub model: Option<String>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            include_subagents: true,
            format: None,
            model: None,
        }
    }
}

/// A diagnostic about one line (or, with `line == 0`, a whole file) that was skipped or read
/// with a fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line, or 0 for the whole file.
    pub line: u64,
    /// What was wrong and what was done about it.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
    }
}

/// Counters of one import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Files read in a recognised format.
    pub files: u64,
    /// Files skipped: empty, or in no recognised format.
    pub files_skipped: u64,
    /// Files that could not be opened, listed or read to their end (permission denied, an I/O
    /// error), each named in a warning with the cause. One that failed part-way is counted in
    /// `files` too: what it held before the failure is imported.
    pub files_unreadable: u64,
    /// Physical lines read (blank ones included).
    pub lines: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Requests in the result.
    pub requests: u64,
    /// Requests dropped because an earlier file already had the same id (resumed sessions).
    pub duplicates_dropped: u64,
    /// Claude Code `model: "<synthetic>"` responses dropped (client-side placeholders).
    pub synthetic_dropped: u64,
}

/// The result of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The traces, sorted by (session, kind, thread, model); each trace's requests by time.
    pub traces: Vec<Trace>,
    /// Lines and files that were skipped, with why.
    pub warnings: Vec<Warning>,
    /// Counters.
    pub stats: ImportStats,
}

/// Why an import failed as a whole. Neither is worth retrying unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A path given could not be looked up (from [`import_paths`]: it does not exist, most
    /// likely), or the file could not be read (from [`read_trace_file`]).
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The paths held no file in a recognised format (from [`import_paths`]), and why the first
    /// file skipped with a warning was skipped: a file given alone that detection gave up on
    /// failed with no word of why.
    #[error("no importable file found in {}{}", paths_list(.paths), why_skipped(.first_skipped))]
    NoImportableFile {
        /// The paths given.
        paths: Vec<PathBuf>,
        /// The first file skipped with a warning, and the warning (`None`: every file was
        /// empty, or none was found).
        first_skipped: Option<(PathBuf, String)>,
    },
    /// No file could be imported, and some could not even be read (from [`import_paths`]):
    /// how many, and the first of them with its cause. Worth retrying once the files are
    /// readable.
    #[error(
        "no importable file: {unreadable} could not be read, the first {}: {source}",
        path.display()
    )]
    Unreadable {
        /// How many files (or directories) could not be read.
        unreadable: u64,
        /// The first of them.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: io::Error,
    },
}

fn why_skipped(first: &Option<(PathBuf, String)>) -> String {
    first
        .as_ref()
        .map(|(path, why)| format!(" ({}: {why})", path.display()))
        .unwrap_or_default()
}

fn paths_list(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// Progress is reported at most once per this many bytes (and at the end of every file).
const PROGRESS_STEP: u64 = 1 << 20;

/// Imports every file under `paths` (files, or directories searched recursively for `*.jsonl`
/// and `*.csv`).
///
/// `progress(done, total)` is called as bytes are read; `total` is the size of all files found.
/// Files explicitly named are read whatever their extension. A file or directory that cannot be
/// read is skipped with a warning (see [`ImportStats::files_unreadable`]). Errors:
/// [`ImportError::Io`] if a path given does not exist (or cannot be looked up),
/// [`ImportError::Unreadable`] if no file was importable and some could not be read,
/// [`ImportError::NoImportableFile`] if no file was in a recognised format.
pub fn import_paths(
    paths: &[PathBuf],
    opts: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Import, ImportError> {
    let mut importer = Importer::new(opts);
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| io_error(path, source))?;
        collect_files((path, meta), true, &mut files, &mut importer);
    }
    // Sorted, so de-duplication (first file wins) and the output are deterministic; files of a
    // `subagents` folder after every other, so that a session's own file wins (see the module
    // docs).
    files.sort_by(|a, b| (under_subagents(&a.0), &a.0).cmp(&(under_subagents(&b.0), &b.0)));
    files.dedup_by(|a, b| a.0 == b.0);
    let total = files.iter().map(|(_, len)| len).sum();

    let mut done = 0;
    for (file, _) in &files {
        let choice = opts.format.map_or(Choice::Detect, Choice::Force);
        let read = importer.import_file(file, choice, &mut |bytes| progress(done + bytes, total));
        match read {
            Ok(read) => done += read,
            Err(failed) => importer.unreadable(file, failed),
        }
        progress(done, total);
    }
    if importer.stats.files == 0 {
        return Err(match importer.first_unreadable.take() {
            Some((path, source)) => ImportError::Unreadable {
                unreadable: importer.stats.files_unreadable,
                path,
                source,
            },
            None => ImportError::NoImportableFile {
                paths: paths.to_vec(),
                first_skipped: importer
                    .warnings
                    .iter()
                    .find(|w| w.line == 0)
                    .map(|w| (w.path.clone(), w.message.clone())),
            },
        });
    }
    Ok(importer.finish())
}

/// Reads one file in muninn's stored trace format (see [`write_trace`]). A file in another
/// format gives no traces and one warning.
pub fn read_trace_file(path: &Path) -> Result<Import, ImportError> {
    let opts = ImportOptions::default();
    let mut importer = Importer::new(&opts);
    let read = importer.import_file(path, Choice::Expect(InputFormat::Stored), &mut |_| {});
    read.map_err(|failed| io_error(path, failed.source))?;
    Ok(importer.finish())
}

fn io_error(path: &Path, source: io::Error) -> ImportError {
    ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a file's format is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// Detected from its first lines.
    Detect,
    /// This one, whatever detection finds (`ImportOptions::format`): a user who names the format
    /// knows better than detection (a file opening with lines of a newer version, say).
    Force(InputFormat),
    /// This one, if detection finds it; else the file is skipped ([`read_trace_file`]).
    Expect(InputFormat),
}

/// The format to read a file in. `None` skips the file, with a warning unless it is blank to
/// its end (a file whose blank lines outlast detection's bound may hold good lines after them: it
/// is warned of). A forced format is read even where detection finds another, with a warning
/// naming both, so that the lines' errors that follow are not a mystery.
fn chosen_format(
    reader: &mut BufReader<File>,
    choice: Choice,
    diag: &mut lines::Diagnostics<'_>,
) -> io::Result<Option<InputFormat>> {
    let sniffed = format::sniff(reader)?;
    Ok(match (choice, sniffed.format) {
        (Choice::Force(forced), found) => {
            if let Some(found) = found.filter(|&found| found != forced) {
                diag.warn(
                    0,
                    format!("read as {forced} as asked, though it looks like {found}"),
                );
            }
            Some(forced)
        }
        (Choice::Expect(expected), Some(found)) if expected == found => Some(found),
        (Choice::Expect(expected), found) => {
            let judged = match found {
                Some(found) => format!("it looks like {}", found.name()),
                None => format!("judged on {}", sniffed.judged_on()),
            };
            diag.warn(
                0,
                format!("not in the {} format ({judged}), skipped", expected.name()),
            );
            None
        }
        (Choice::Detect, Some(found)) => Some(found),
        (Choice::Detect, None) => {
            if sniffed.non_blank > 0 || sniffed.cut_short.is_some() {
                let judged_on = sniffed.judged_on();
                diag.warn(
                    0,
                    format!("no recognised format in {judged_on}, file skipped"),
                );
            }
            None
        }
    })
}

/// Feeds every line of a file to its format's reader. `seen` is the import's set of Claude
/// message ids, through which the formats that carry them de-duplicate across files.
fn read_lines(
    (path, format): (&Path, InputFormat),
    opts: &ImportOptions,
    seen: &mut HashSet<u64>,
    lines: &mut LineReader<io::Take<BufReader<File>>>,
    cx: &mut LineContext<'_, '_>,
    progress: &mut dyn FnMut(u64),
) -> io::Result<()> {
    match format {
        InputFormat::ClaudeCode => {
            let r = claude::ClaudeReader::new(path, opts, seen);
            drive(lines, r, cx, progress)
        }
        InputFormat::StreamJson => {
            let r = stream_json::StreamJsonReader::new(path, opts, seen);
            drive(lines, r, cx, progress)
        }
        InputFormat::ApiLog => drive(lines, api_log::ApiLogReader::new(path, seen), cx, progress),
        InputFormat::TraceLab => {
            let r = tracelab::TraceLabReader::new(opts.model.as_deref());
            drive(lines, r, cx, progress)
        }
        InputFormat::Codex => drive(lines, codex::CodexReader::new(path), cx, progress),
        InputFormat::Ledger => drive(lines, ledger::LedgerReader::default(), cx, progress),
        InputFormat::Stored => drive(lines, stored::StoredReader::default(), cx, progress),
    }
}

/// Adds `path` (if a file) or the `*.jsonl` and `*.csv` files under it (if a directory) to `out`, each with
/// its size (for progress; the walk has the metadata anyway). Symlinked directories below the top
/// are not followed, so a link cycle cannot make the walk endless. A directory that cannot be
/// listed, or an entry whose type cannot be read, is skipped with a warning in `importer`: one
/// unreadable folder does not lose the rest.
fn collect_files(
    (path, meta): (&Path, std::fs::Metadata),
    top: bool,
    out: &mut Vec<(PathBuf, u64)>,
    importer: &mut Importer<'_>,
) {
    if meta.is_file() {
        if top || walked_extension(path) {
            out.push((path.to_path_buf(), meta.len()));
        }
        return;
    }
    if !meta.is_dir() {
        // A pipe, socket or device given by name (`<(zcat …)` gives a pipe) is not opened:
        // opening a pipe with no writer blocks, and detection must rewind what it reads.
        if top {
            importer.unreadable(path, not_a_file());
        }
        return;
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(source) => return importer.unreadable(path, FileError::whole(source)),
    };
    for entry in entries {
        // An error listing a directory ends its listing: what was listed is kept.
        let entry = match entry {
            Ok(entry) => entry,
            Err(source) => return importer.unreadable(path, FileError::whole(source)),
        };
        let child = entry.path();
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(source) => {
                importer.unreadable(&child, FileError::whole(source));
                continue;
            }
        };
        if kind.is_dir() {
            match entry.metadata() {
                Ok(meta) => collect_files((&child, meta), false, out, importer),
                Err(source) => importer.unreadable(&child, FileError::whole(source)),
            }
        } else if walked_extension(&child) {
            walked_file(child, kind, out, importer);
        }
    }
}

/// Adds a walked entry named like a transcript to `out` if it is a file (or a link to one: a
/// dangling link is passed over, the file it named is gone). One that cannot be looked up (a
/// link that loops) or is not a file (a pipe, which is never opened) is named in a warning.
fn walked_file(
    child: PathBuf,
    kind: std::fs::FileType,
    out: &mut Vec<(PathBuf, u64)>,
    importer: &mut Importer<'_>,
) {
    if !kind.is_file() && !kind.is_symlink() {
        return importer.unreadable(&child, not_a_file());
    }
    match std::fs::metadata(&child) {
        Ok(meta) if meta.is_file() => out.push((child, meta.len())),
        // A link to a folder: links are not followed into folders (see `collect_files`).
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => importer.unreadable(&child, not_a_file()),
        Err(dangling) if dangling.kind() == io::ErrorKind::NotFound => {}
        Err(source) => importer.unreadable(&child, FileError::whole(source)),
    }
}

/// Why a path that is neither a file nor a folder is not read.
fn not_a_file() -> FileError {
    FileError::whole(muninn_fs::not_a_file())
}

/// Whether `path` is a file of a `subagents` folder (Claude Code's
/// `<session>/subagents/agent-<id>.jsonl`). Only the file's own folder counts: a folder above the
/// import that happens to bear the name would otherwise mark every file, and the copies would win
/// again.
fn under_subagents(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|name| name == "subagents")
}

/// Whether a directory walk reads a file of this name: JSON Lines, or CSV (TraceLab).
fn walked_extension(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jsonl" || e == "csv")
}

/// One reader per format, fed one line at a time by [`Importer::import_file`].
trait FormatReader {
    /// Handles one line (blank and oversized lines included; use [`lines::parse_line`]).
    fn line(&mut self, line: &Line<'_>, cx: &mut LineContext<'_, '_>);
    /// Called once after the last line.
    fn finish(self, cx: &mut LineContext<'_, '_>);
}

/// What a [`FormatReader`] writes into.
struct LineContext<'i, 'w> {
    sink: &'i mut sink::TraceSet,
    diag: &'i mut lines::Diagnostics<'w>,
    stats: &'i mut ImportStats,
    /// `path.display()`, kept as the source of the traces.
    source: &'i str,
}

impl LineContext<'_, '_> {
    /// Appends the request of line `line` (counted in [`Importer::finish`], once the traces are
    /// final); `None`, with a warning naming the line, if it is past the limits (`limits`).
    fn push(
        &mut self,
        (session, thread, kind): (&str, &str, muninn_core::trace::ThreadKind),
        model: &str,
        request: TraceRequest,
        line: u64,
    ) -> Option<sink::RequestSlot> {
        if let Some(problem) = limits::request_problem(&request) {
            self.diag.warn(line, format!("request skipped: {problem}"));
            return None;
        }
        Some(
            self.sink
                .push(session, thread, kind, model, self.source, request),
        )
    }
}

/// State shared across the files of one import.
struct Importer<'o> {
    opts: &'o ImportOptions,
    sink: sink::TraceSet,
    /// Hashes of the Claude Code `message.id`s already imported, for cross-file de-duplication.
    /// A 64-bit hash instead of the id keeps this at 8 bytes a request; a false "duplicate" needs
    /// a collision, about 1 in 10^7 even at a million requests.
    claude_seen: HashSet<u64>,
    warnings: Vec<Warning>,
    stats: ImportStats,
    /// The first file that could not be read, and why: the error of an import that found
    /// nothing else.
    first_unreadable: Option<(PathBuf, io::Error)>,
}

/// Why a file could not be read: the I/O error, and how many of its lines were read before it
/// (0: none, the file is skipped whole).
#[derive(Debug)]
struct FileError {
    lines_read: u64,
    source: io::Error,
}

impl FileError {
    /// A failure before any line was read.
    fn whole(source: io::Error) -> FileError {
        FileError {
            lines_read: 0,
            source,
        }
    }
}

impl<'o> Importer<'o> {
    fn new(opts: &'o ImportOptions) -> Importer<'o> {
        Importer {
            opts,
            sink: sink::TraceSet::default(),
            claude_seen: HashSet::new(),
            warnings: Vec::new(),
            stats: ImportStats::default(),
            first_unreadable: None,
        }
    }

    /// Records a file (or directory) that could not be read: a warning naming it and the
    /// cause, and the count.
    fn unreadable(&mut self, path: &Path, failed: FileError) {
        let message = match failed.lines_read {
            0 => format!("could not be read, skipped: {}", failed.source),
            n => format!(
                "could not be read past line {n}, the rest skipped: {}",
                failed.source
            ),
        };
        self.warnings.push(Warning {
            path: path.to_path_buf(),
            line: 0,
            message,
        });
        self.stats.files_unreadable += 1;
        self.first_unreadable
            .get_or_insert_with(|| (path.to_path_buf(), failed.source));
    }

    /// Imports one file, as it was when opened (see `muninn_fs::open_regular`); returns the bytes read. On an I/O
    /// error what was read before it stays imported, and the error says how far that was.
    fn import_file(
        &mut self,
        path: &Path,
        choice: Choice,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, FileError> {
        let opened = muninn_fs::open_regular(path).map_err(FileError::whole)?;
        let mut reader = BufReader::with_capacity(256 << 10, opened.file);
        let mut diag = lines::Diagnostics::new(path, &mut self.warnings);
        let chosen = chosen_format(&mut reader, choice, &mut diag);
        let Some(format) = chosen.map_err(FileError::whole)? else {
            diag.finish();
            self.stats.files_skipped += 1;
            return Ok(0);
        };
        reader.rewind().map_err(FileError::whole)?;
        self.stats.files += 1;

        let source = path.display().to_string();
        let mut cx = LineContext {
            sink: &mut self.sink,
            diag: &mut diag,
            stats: &mut self.stats,
            source: &source,
        };
        let mut lines = LineReader::new(reader.take(opened.len));
        let result = read_lines(
            (path, format),
            self.opts,
            &mut self.claude_seen,
            &mut lines,
            &mut cx,
            progress,
        );
        let bytes = lines.bytes_read();
        self.stats.bytes += bytes;
        if result.is_ok() && bytes < opened.len {
            // Cut short by another writer (a truncation, or a rewrite in place): what it held
            // past this point when opened is gone, and the user should know the read is partial.
            diag.warn(
                0,
                format!(
                    "the file shrank while it was read: {bytes} of the {} bytes it had when opened were read",
                    opened.len
                ),
            );
        }
        diag.finish();
        result.map_err(|source| FileError {
            lines_read: lines.lines_read(),
            source,
        })?;
        Ok(bytes)
    }

    fn finish(self) -> Import {
        let traces = self.sink.finish();
        let mut stats = self.stats;
        stats.requests = traces.iter().map(|t| t.requests.len() as u64).sum();
        Import {
            traces,
            warnings: self.warnings,
            stats,
        }
    }
}

/// Feeds every line of a file to `reader`, reporting progress every [`PROGRESS_STEP`] bytes.
fn drive<R: io::BufRead>(
    lines: &mut LineReader<R>,
    mut reader: impl FormatReader,
    cx: &mut LineContext<'_, '_>,
    progress: &mut dyn FnMut(u64),
) -> io::Result<()> {
    let mut reported = 0;
    while let Some(line) = lines.next_line()? {
        cx.stats.lines += 1;
        reader.line(&line, cx);
        let read = lines.bytes_read();
        if read - reported >= PROGRESS_STEP {
            reported = read;
            progress(read);
        }
    }
    reader.finish(cx);
    Ok(())
}

/// Writes `traces` in the stored format, one after another (header, requests, header, …).
pub fn write_traces<'t>(
    w: &mut impl Write,
    traces: impl IntoIterator<Item = &'t Trace>,
) -> io::Result<()> {
    for t in traces {
        write_trace(w, t)?;
    }
    Ok(())
}
