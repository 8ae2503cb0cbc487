//! A coverage-free mutation fuzzer for stable Rust, run as ordinary tests.
//!
//! The toolchain is stable only, so there is no libFuzzer (`cargo fuzz` needs nightly's
//! sanitizer coverage). This driver does what is left without coverage: it takes a checked-in
//! seed corpus (`fuzz/corpus/<target>/` at the repository root, small real-ish inputs and every
//! regression found so far), stacks random mutations on a seed — bit flips, interesting bytes,
//! deleted, duplicated and truncated ranges, splices of two seeds, JSON and format tokens from a
//! dictionary, numbers swapped for boundary values — and hands each input to the target's check
//! for a time budget. Seeds that are already structured (a valid SSE stream, a real transcript
//! line) take the place of coverage feedback: most mutants stay close to something that parses.
//!
//! A target fails when its check returns `Err` (a property broken), panics, or takes longer than
//! [`FuzzConfig::hang_after`]. The failing input is written to a file named in the panic message
//! (with the seed and the execution number, so a run can be repeated with `MUNINN_FUZZ_SEED`);
//! copy it into the corpus as `regression-<what>` when the bug is fixed. A check that never
//! returns is caught by a watchdog thread that writes the input and aborts the test binary: a
//! hang is loud, not a CI job that times out.
//!
//! ## Budgets
//!
//! - `MUNINN_FUZZ_SECS` (default 2): seconds per target. CI runs the default as part of
//!   `cargo test`; a long run sets it, e.g. `MUNINN_FUZZ_SECS=60 scripts/fuzz.sh`.
//! - `MUNINN_FUZZ_SEED` (default a fixed seed, so CI is reproducible): the PRNG's seed.
//!
//! Every run prints one line per target, `fuzz <target>: <n> executions in <s> s …`, which
//! `scripts/fuzz.sh` collects.

use muninn_backend::panic::payload_text;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The seed CI uses when `MUNINN_FUZZ_SEED` is unset.
pub const DEFAULT_SEED: u64 = 0x6d75_6e69_6e6e_0011;

/// How one target is fuzzed.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// How long to keep generating inputs.
    pub duration: Duration,
    /// The PRNG's seed.
    pub seed: u64,
    /// The longest input generated: targets are bounded, and a bound keeps every execution
    /// short enough to run thousands per second.
    pub max_len: usize,
    /// One execution taking longer than this is a failure (a hang or a quadratic blow-up).
    pub hang_after: Duration,
}

impl FuzzConfig {
    /// The budget from the environment (`MUNINN_FUZZ_SECS`, `MUNINN_FUZZ_SEED`), inputs of at
    /// most `max_len` bytes. A malformed variable is a panic naming it, not a silent default.
    pub fn from_env(max_len: usize) -> FuzzConfig {
        let secs = env_number("MUNINN_FUZZ_SECS").unwrap_or(2);
        FuzzConfig {
            duration: Duration::from_secs(secs),
            seed: env_number("MUNINN_FUZZ_SEED").unwrap_or(DEFAULT_SEED),
            max_len,
            // Generous: five helpers share two cores, and a debug build is slow. A real hang
            // (an endless loop, a quadratic parse of 64 KiB) passes it by far.
            hang_after: Duration::from_secs(10),
        }
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(n) => Some(n),
        Err(e) => panic!("{name}={value:?} is not a whole number: {e}"),
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzReport {
    /// The target's name.
    pub target: String,
    /// Inputs checked (the seeds themselves included).
    pub executions: u64,
    /// Seeds in the corpus.
    pub seeds: usize,
    /// Inputs the check accepted (`Ok`) — the rest were refused with a clear error, which is
    /// also a pass; a target whose every input is refused is fuzzing its front door only.
    pub accepted: u64,
    /// How long it ran.
    pub elapsed: Duration,
}

impl std::fmt::Display for FuzzReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "fuzz {}: {} executions in {:.1} s ({:.0}/s), {} seeds, {} accepted",
            self.target,
            self.executions,
            secs,
            self.executions as f64 / secs.max(1e-9),
            self.seeds,
            self.accepted
        )
    }
}

/// What a check says about one input: accepted (it parsed, and every property held), or
/// refused with a clear error (also fine). A broken property is a panic or an `Err` from the
/// check closure, which [`fuzz`] reports as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The input was accepted and its properties held.
    Accepted,
    /// The input was refused with a clear error.
    Refused,
}

/// The directory of a target's checked-in corpus: `fuzz/corpus/<target>` at the repository root.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Every file under `dir` (recursively), in path order. Panics when there is none: a target
/// without seeds would fuzz noise, and a moved corpus must fail loudly.
pub fn load_corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no seed files in {}", dir.display());
    files
        .iter()
        .map(|f| {
            std::fs::read(f).unwrap_or_else(|e| panic!("cannot read seed {}: {e}", f.display()))
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Fuzzes `check` with mutants of `seeds` (and `dictionary` tokens) for `config.duration`, and
/// prints and returns the report. Panics, naming the saved input, when the check fails.
pub fn fuzz(
    target: &str,
    seeds: &[Vec<u8>],
    dictionary: &[&[u8]],
    config: &FuzzConfig,
    mut check: impl FnMut(&[u8]) -> Result<Verdict, String>,
) -> FuzzReport {
    assert!(!seeds.is_empty(), "fuzz {target}: no seeds");
    let mut rng = FuzzRng::new(config.seed ^ fnv1a(target.as_bytes()));
    let watchdog = Watchdog::start(target, config.hang_after);
    let start = Instant::now();
    let (mut executions, mut accepted) = (0u64, 0u64);
    let mut input = Vec::new();
    // The seeds first, unchanged: a seed that fails is a bug too, and the cheapest to read.
    let mut pending_seeds = seeds.iter();
    loop {
        match pending_seeds.next() {
            Some(seed) => input.clone_from(seed),
            None if start.elapsed() >= config.duration => break,
            None => mutate(&mut rng, seeds, dictionary, config.max_len, &mut input),
        }
        watchdog.begin(&input);
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let took = started.elapsed();
        watchdog.end();
        let failure = match outcome {
            Ok(Ok(verdict)) if took <= config.hang_after => {
                accepted += u64::from(verdict == Verdict::Accepted);
                None
            }
            Ok(Ok(_)) => Some(format!("took {took:?} (limit {:?})", config.hang_after)),
            Ok(Err(broken)) => Some(broken),
            Err(panic) => Some(format!("panicked: {}", payload_text(&*panic))),
        };
        if let Some(why) = failure {
            let saved = save_failure(target, &input);
            panic!(
                "fuzz {target}: execution {executions} (MUNINN_FUZZ_SEED={}) failed: {why}\n\
                 input ({} bytes) saved to {}; starts {:?}",
                config.seed,
                input.len(),
                saved.display(),
                String::from_utf8_lossy(&input[..input.len().min(300)])
            );
        }
        executions += 1;
    }
    let report = FuzzReport {
        target: target.to_string(),
        executions,
        seeds: seeds.len(),
        accepted,
        elapsed: start.elapsed(),
    };
    // Printed, not logged: this line is the run's result (`scripts/fuzz.sh` collects it).
    println!("{report}");
    report
}

/// Writes a failing input where a person can pick it up: the system's temporary directory.
fn save_failure(target: &str, input: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("muninn-fuzz-{target}-{:016x}.bin", fnv1a(input)));
    if let Err(e) = std::fs::write(&path, input) {
        eprintln!(
            "fuzz {target}: could not save the failing input to {}: {e}",
            path.display()
        );
    }
    path
}

/// Aborts the process when one execution never returns (a panic or `Err` cannot report a hang:
/// the check is still running). It saves the input first, so the hang can be replayed.
struct Watchdog {
    shared: Arc<WatchdogState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchdogState {
    /// Milliseconds since `epoch` when the current execution began; 0 between executions.
    began_ms: AtomicU64,
    input: Mutex<Vec<u8>>,
    done: AtomicBool,
    epoch: Instant,
}

impl Watchdog {
    fn start(target: &str, hang_after: Duration) -> Watchdog {
        let shared = Arc::new(WatchdogState {
            began_ms: AtomicU64::new(0),
            input: Mutex::new(Vec::new()),
            done: AtomicBool::new(false),
            epoch: Instant::now(),
        });
        let watched = shared.clone();
        let target = target.to_string();
        // Three times the per-execution limit: an execution past the limit that does return is
        // reported by `fuzz` itself, with a clearer message than an abort.
        let limit_ms = u64::try_from(hang_after.as_millis().saturating_mul(3)).unwrap_or(u64::MAX);
        let thread = std::thread::spawn(move || {
            while !watched.done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let began = watched.began_ms.load(Ordering::Relaxed);
                let now = u64::try_from(watched.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
                if began != 0 && now.saturating_sub(began) > limit_ms {
                    let input = watched.input.lock().map(|i| i.clone()).unwrap_or_default();
                    let saved = save_failure(&target, &input);
                    eprintln!(
                        "fuzz {target}: one execution has run for {} ms and never returned; \
                         input saved to {}; aborting",
                        now - began,
                        saved.display()
                    );
                    std::process::abort();
                }
            }
        });
        Watchdog {
            shared,
            thread: Some(thread),
        }
    }

    fn begin(&self, input: &[u8]) {
        if let Ok(mut current) = self.shared.input.lock() {
            current.clear();
            current.extend_from_slice(input);
        }
        let now = u64::try_from(self.shared.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.shared.began_ms.store(now.max(1), Ordering::Relaxed);
    }

    fn end(&self) {
        self.shared.began_ms.store(0, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Tokens worth inserting into any text format muninn reads: JSON structure, escapes, numbers
/// at the edges of the integer types, and line ends.
pub const JSON_TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"null",
    b"true",
    b"false",
    b"\"\"",
    b"{}",
    b"[]",
    b"\\u0000",
    b"\\ud800",
    b"\\\"",
    b"\n",
    b"\r\n",
    b"\r",
    b"0",
    b"-1",
    b"1e400",
    b"-0.0",
    b"4294967296",
    b"9223372036854775807",
    b"9223372036854775808",
    b"18446744073709551615",
    b"18446744073709551616",
    b"\xe2\x80\xae",
    b"\xff",
    b"\xc3",
    b"\x1b]0;x\x07",
];

/// Numbers a digit run is swapped for: the boundaries of the integer types (overflow when two
/// are added), zero, negatives, floats where integers are expected.
const NUMBERS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"1",
    b"255",
    b"65536",
    b"2147483648",
    b"4294967295",
    b"4294967296",
    b"9007199254740993",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"18446744073709551615",
    b"18446744073709551616",
    b"1.5",
    b"1e308",
    b"-1e400",
];

/// Applies 1–8 random mutations to a random seed (a stack of small changes finds more than one
/// large one, and keeps most of the seed's structure).
fn mutate(
    rng: &mut FuzzRng,
    seeds: &[Vec<u8>],
    dictionary: &[&[u8]],
    max_len: usize,
    out: &mut Vec<u8>,
) {
    out.clone_from(&seeds[rng.below(seeds.len())]);
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        let tokens = if !dictionary.is_empty() && rng.below(2) == 0 {
            dictionary
        } else {
            JSON_TOKENS
        };
        match rng.below(11) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = *rng.pick(b"\x00\xff\x7f\x80\"\\\n\r{}[]:, 0");
            }
            2 if !out.is_empty() => {
                let start = rng.below(out.len());
                let len = 1 + rng.below((out.len() - start).min(64));
                out.drain(start..start + len);
            }
            3 if !out.is_empty() => {
                let start = rng.below(out.len());
                let len = 1 + rng.below((out.len() - start).min(256));
                let copy = out[start..start + len].to_vec();
                let at = rng.below(out.len() + 1);
                out.splice(at..at, copy);
            }
            4 if !out.is_empty() => out.truncate(rng.below(out.len())),
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(out.len() + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            6 | 7 => {
                let token = rng.pick(tokens);
                let at = rng.below(out.len() + 1);
                out.splice(at..at, token.iter().copied());
            }
            8 => swap_number(rng, out),
            9 if !out.is_empty() => {
                // Overwrite, not insert: keeps the length, changes a field's value.
                let token = rng.pick(tokens);
                let at = rng.below(out.len());
                let end = (at + token.len()).min(out.len());
                out.splice(at..end, token.iter().copied());
            }
            _ => {
                let at = rng.below(out.len() + 1);
                out.insert(at, 0x20 + rng.below(0x5f) as u8);
            }
        }
        out.truncate(max_len);
    }
}

/// Replaces the run of digits around a random digit with a boundary number.
fn swap_number(rng: &mut FuzzRng, out: &mut Vec<u8>) {
    let digits: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].is_ascii_digit())
        .collect();
    if digits.is_empty() {
        return;
    }
    let i = digits[rng.below(digits.len())];
    let start = (0..=i)
        .rev()
        .take_while(|&j| out[j].is_ascii_digit())
        .last()
        .unwrap_or(i);
    let end = (i..out.len())
        .take_while(|&j| out[j].is_ascii_digit())
        .last()
        .map_or(i + 1, |j| j + 1);
    let number = rng.pick(NUMBERS);
    out.splice(start..end, number.iter().copied());
}

/// 64-bit FNV-1a: names a saved input and separates targets' random streams.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A small deterministic PRNG (SplitMix64): reproducible from its seed, which is the point —
/// a failure found in CI must replay anywhere with the seed it printed.
#[derive(Debug, Clone)]
pub struct FuzzRng(u64);

impl FuzzRng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> FuzzRng {
        FuzzRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A random element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Cut points splitting `len` bytes into chunks (sorted, within `0..=len`): for properties
    /// that must not depend on where a stream was cut.
    pub fn cuts(&mut self, len: usize) -> Vec<usize> {
        let mut cuts: Vec<usize> = (0..self.below(12)).map(|_| self.below(len + 1)).collect();
        if self.below(8) == 0 {
            // Now and then, byte at a time: every boundary at once.
            cuts = (0..=len).collect();
        }
        cuts.sort_unstable();
        cuts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_stay_within_the_bound_and_vary() {
        let seeds = vec![
            b"{\"a\":12,\"b\":[1,2,3]}".to_vec(),
            b"event: x\n\n".to_vec(),
        ];
        let mut rng = FuzzRng::new(1);
        let mut out = Vec::new();
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..2000 {
            mutate(&mut rng, &seeds, &[], 32, &mut out);
            assert!(out.len() <= 32);
            distinct.insert(out.clone());
        }
        assert!(
            distinct.len() > 1000,
            "only {} distinct mutants",
            distinct.len()
        );
    }

    #[test]
    fn a_failing_check_panics_naming_the_saved_input() {
        let config = FuzzConfig {
            duration: Duration::from_millis(200),
            seed: 7,
            max_len: 64,
            hang_after: Duration::from_secs(10),
        };
        let seeds = vec![b"abc".to_vec()];
        let failed = catch_unwind(AssertUnwindSafe(|| {
            fuzz("selftest", &seeds, &[], &config, |input| {
                if input.contains(&b'{') {
                    Err("a brace".to_string())
                } else {
                    Ok(Verdict::Accepted)
                }
            })
        }));
        let message = payload_text(&*failed.expect_err("a brace is found within 200 ms"));
        assert!(message.contains("a brace"), "{message}");
        assert!(message.contains("muninn-fuzz-selftest-"), "{message}");
    }

    #[test]
    fn a_passing_check_reports_its_executions() {
        let config = FuzzConfig {
            duration: Duration::from_millis(50),
            seed: 7,
            max_len: 64,
            hang_after: Duration::from_secs(10),
        };
        let report = fuzz("selftest-pass", &[b"x".to_vec()], &[], &config, |input| {
            Ok(if input.is_empty() {
                Verdict::Refused
            } else {
                Verdict::Accepted
            })
        });
        assert!(report.executions > 10, "{report}");
        assert!(report.accepted > 0 && report.accepted <= report.executions);
    }
}
