//! Security of the real `muninn serve`: every authenticated route refuses a missing, wrong or
//! another instance's token; a recognisable fake API key used for a whole conversation (the
//! anthropic backend against `muninn sim-api`, which accepts only that key) is in no file of
//! the data directory, no ledger export and no log line; the data directory is 0700 and every
//! file in it 0600; a non-loopback listen address is warned about; and slow clients (slowloris
//! headers, bodies that never arrive) are cut off while the API keeps answering, with the serve
//! process's descriptors and memory measured before, during and after.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The fake key: recognisable, and shaped like a real one.
const CANARY: &str =
    "sk-ant-api03-MUNINNCANARY7f3e9a1c5b2d4e6f8091a2b3c4d5e6f7081928374655647382910-zzQQ";

struct Serve {
    child: Child,
    addr: String,
    token_file: PathBuf,
    banner: String,
}

impl Serve {
    /// Starts `muninn serve` in `dir` with `args` and `env`, stderr to `dir/serve.log`.
    fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_muninn"));
        command
            .arg("serve")
            .args(args)
            .current_dir(dir)
            .env("MUNINN_STATE_DIR", dir.join("state"))
            .env("RUST_LOG", "debug")
            .env_remove("MUNINN_CONFIG")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .stdout(Stdio::piped())
            .stderr(log);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let mut banner = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut banner)
            .unwrap();
        let between = |from: &str, to: &str| {
            let start = banner.find(from).unwrap_or_else(|| panic!("{banner}")) + from.len();
            banner[start..][..banner[start..].find(to).unwrap()].to_owned()
        };
        let addr = between("API on http://", " ");
        let token_file = PathBuf::from(between("(token in ", ")"));
        Serve {
            child,
            addr,
            token_file,
            banner,
        }
    }

    fn muninn(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_muninn"))
            .args(args)
            .arg("--addr")
            .arg(&self.addr)
            .arg("--token-file")
            .arg(&self.token_file)
            .output()
            .unwrap()
    }

    /// SIGTERM, and the exit (within 30 s).
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "serve did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Open descriptors and resident memory (KiB) of the serve process.
    fn fds_and_rss(&self) -> (usize, u64) {
        let pid = self.child.id();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        (fds, rss)
    }
}

/// One raw HTTP/1.1 request; the status code.
fn status_of(addr: &str, method: &str, path: &str, auth: Option<&str>) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let auth = auth.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let body = if method == "GET" { "" } else { "{}" };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: {answer:?}"))
}

#[test]
fn every_route_refuses_a_missing_wrong_or_foreign_token() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(dir.path(), &["--listen", "127.0.0.1:0"], &[]);
    let own = std::fs::read_to_string(&serve.token_file).unwrap();
    let own = own.trim();
    let other = tempfile::tempdir().unwrap();
    let foreign = muninn_api::ApiToken::load_or_create(&other.path().join("api-token")).unwrap();
    assert_ne!(foreign.expose(), own);
    let mut routes: Vec<(&str, String)> = muninn_host::http::ROUTES
        .iter()
        .map(|(m, p)| (*m, p.replace("{mind}", "vala").replace("{request_id}", "x")))
        .collect();
    routes.push(("GET", "/no/such/route".into()));
    for (method, path) in &routes {
        for token in [None, Some("wrong"), Some(foreign.expose())] {
            let status = status_of(&serve.addr, method, path, token);
            assert_eq!(status, 401, "{method} {path} with {token:?}");
        }
    }
    // And the real token is taken (the same raw client, so the refusals above are real).
    assert_eq!(status_of(&serve.addr, "GET", "/v1/minds", Some(own)), 200);
    serve.stop();
}

/// Every regular file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in walk(dir) {
        if entry.is_file()
            && std::fs::read(&entry).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
        {
            found.push(entry);
        }
    }
    found
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// What a failed client run and the processes behind it said: its exit status, stdout and
/// stderr, then the ends of the serve log and the simulator's log in `dir` (a failure under
/// load is otherwise a bare non-zero exit, with nothing to find its cause from).
fn failure(out: &std::process::Output, dir: &Path) -> String {
    let tail = |name: &str| {
        let log = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    format!(
        "status: {}\n--- stdout\n{}\n--- stderr\n{}\n--- serve.log (last 40 lines)\n{}\n--- sim.log (last 40 lines)\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        tail("serve.log"),
        tail("sim.log")
    )
}

/// A whole conversation (two deliveries, answered) on `backend` (TOML lines of `[backend]`)
/// against `muninn sim-api` accepting only [`CANARY`]; `while_running` looks at the serve
/// process (by pid) before it stops. Then: no file of the data or state directory, no ledger
/// export and no log line holds the key or a piece of it, and the data directory is private.
fn canary_conversation(backend: &str, while_running: impl FnOnce(u32)) {
    let dir = tempfile::tempdir().unwrap();
    let sim_log = std::fs::File::create(dir.path().join("sim.log")).unwrap();
    let mut sim = Command::new(env!("CARGO_BIN_EXE_muninn"))
        .args(["sim-api", "--addr", "127.0.0.1:0", "--api-key", CANARY])
        .stdout(Stdio::piped())
        .stderr(sim_log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(sim.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let sim_url = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(sim_url.starts_with("http://"), "{line}");
    let config = format!(
        "data_dir = 'data'\nlisten = '127.0.0.1:0'\n[backend]\n{backend}\nbase_url = '{sim_url}'\napi_key_env = 'MUNINN_CANARY_KEY'\n[[mind]]\nid = 'vala'\nrooms = ['#swarm']\ndoctrine_text = 'You are Vala. Answer briefly.'\n"
    );
    std::fs::write(dir.path().join("muninn.toml"), config).unwrap();
    let serve = Serve::start(
        dir.path(),
        &["--config", "muninn.toml"],
        &[("MUNINN_CANARY_KEY", CANARY)],
    );
    for text in ["hello, who are you?", "and what do you keep?"] {
        let out = serve.muninn(&["say", "vala", text, "--wait"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("vala → #swarm: "),
            "`muninn say --wait` did not get an answer through the sim:\n{}",
            failure(&out, dir.path())
        );
    }
    let ledger = serve.muninn(&["ledger", "vala", "--format", "jsonl"]);
    assert!(ledger.status.success(), "{}", failure(&ledger, dir.path()));
    let ledger = String::from_utf8(ledger.stdout).unwrap();
    assert!(ledger.lines().count() >= 2, "{ledger}");
    while_running(serve.child.id());

    // Private while it runs: the directory 0700, every file 0600 (the database, its WAL and
    // shared memory, the token, a CLI child's session files), every directory 0700.
    let data = dir.path().join("data");
    assert_eq!(mode(&data), 0o700);
    assert!(data.join("muninn.db").exists() && data.join("muninn.db-wal").exists());
    for path in walk(&data) {
        let expected = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(&path), expected, "{}", path.display());
    }
    serve.stop();
    let _ = sim.kill();
    let _ = sim.wait();

    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(
        log.contains("muninn serve started"),
        "the log is live:\n{log}"
    );
    // The key and any long piece of it.
    let tail = &CANARY[CANARY.len() - 24..];
    for needle in [CANARY, "MUNINNCANARY", tail] {
        assert!(!ledger.contains(needle), "the ledger export holds {needle}");
        assert!(!log.contains(needle), "a log line holds {needle}");
        assert_eq!(
            files_containing(&data, needle.as_bytes()),
            Vec::<PathBuf>::new()
        );
        assert_eq!(
            files_containing(&dir.path().join("state"), needle.as_bytes()),
            Vec::<PathBuf>::new()
        );
    }
}

#[test]
fn a_fake_key_is_left_nowhere_and_conversation_files_are_private() {
    canary_conversation("kind = 'anthropic'", |_| {});
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid …`: the comm may hold spaces, so split after its `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            children.push(child);
        }
    }
    children
}

/// The same with the claude-cli backend, the real CLI as the child: the key is in no child's
/// argv or environment, and the child's environment holds only allowlisted names.
#[test]
fn on_the_claude_cli_backend_no_child_sees_the_key() {
    let Some(bin) = muninn_testkit::peers::claude_cli() else {
        return;
    };
    let backend = format!("kind = 'claude-cli'\nclaude_bin = '{}'", bin.display());
    canary_conversation(&backend, |serve_pid| {
        let children = children_of(serve_pid);
        assert!(!children.is_empty(), "no CLI child is running");
        for child in children {
            let read = |name: &str| {
                String::from_utf8_lossy(
                    &std::fs::read(format!("/proc/{child}/{name}")).unwrap_or_default(),
                )
                .into_owned()
            };
            let (cmdline, environ) = (read("cmdline"), read("environ"));
            assert!(cmdline.contains("stream-json"), "{cmdline}");
            for needle in [CANARY, "MUNINNCANARY"] {
                assert!(!cmdline.contains(needle), "argv holds the key");
                assert!(!environ.contains(needle), "the environment holds the key");
            }
            for var in environ.split('\0').filter(|v| !v.is_empty()) {
                let name = var.split('=').next().unwrap_or_default();
                // `MUNINN_CHILD_MARK` is the driver's own: a random mark per child, by which
                // what the child leaves behind is found and killed; no other `MUNINN_` name
                // may come from the host.
                assert!(
                    name.starts_with("CLAUDE_")
                        || name.starts_with("DISABLE_")
                        || [
                            "PATH",
                            "HOME",
                            "TMPDIR",
                            "ANTHROPIC_BASE_URL",
                            "MUNINN_CHILD_MARK"
                        ]
                        .contains(&name),
                    "{name} is not on the allowlist"
                );
                assert!(
                    !name.starts_with("MUNINN_") || name == "MUNINN_CHILD_MARK",
                    "{name} leaked from the host"
                );
            }
        }
    });
}

#[test]
fn a_non_loopback_listen_address_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(dir.path(), &["--listen", "0.0.0.0:0"], &[]);
    assert!(
        serve
            .banner
            .contains("WARNING: listening on 0.0.0.0 (not loopback)"),
        "{}",
        serve.banner
    );
    serve.stop();
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(log.contains("non-loopback"), "{log}");
}

/// Slowloris: `MUNINN_SLOWLORIS` connections (default 200) that send a request line and then
/// one header line a second, never finishing; and a quarter as many POSTs that declare a
/// megabyte and send eight bytes. With `[api]` timeouts of 3 s (longer for thousands), every one is closed within the
/// timeout (plus scheduling slack), the API answers an authenticated request meanwhile, and the
/// serve process's descriptors return to where they were. Run with `--nocapture` for the figures.
#[test]
fn slow_clients_are_cut_off_and_the_api_keeps_answering() {
    let n: usize = std::env::var("MUNINN_SLOWLORIS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    // Opening thousands of connections from one thread takes a few ms each here: the timeouts
    // grow with the count so that all of them are open at once before the first is cut.
    let timeout_s = 3 + n / 150;
    let serve = serve_with_read_timeouts(dir.path(), n, timeout_s);
    let token = std::fs::read_to_string(&serve.token_file).unwrap();
    let token = token.trim().to_owned();
    std::thread::sleep(Duration::from_millis(500));
    let before = serve.fds_and_rss();

    let opened = Instant::now();
    let mut slow = slow_header_connections(&serve.addr, n);
    let mut bodies = slow_body_connections(&serve.addr, &token, n / 4);
    let open_took = opened.elapsed();
    std::thread::sleep(Duration::from_millis(1000));
    for stream in &mut slow {
        let _ = stream.write_all(b"x-slow: 1\r\n");
    }
    let during = serve.fds_and_rss();
    assert_eq!(
        status_of(&serve.addr, "GET", "/v1/minds", Some(&token)),
        200
    );
    let answered_during = opened.elapsed();

    let timed_out_bodies = answered_408_once_closed(
        bodies.iter_mut().chain(slow.iter_mut()),
        Duration::from_secs(timeout_s as u64 + 10),
    );
    let all_closed = opened.elapsed();
    drop(slow);
    drop(bodies);
    std::thread::sleep(Duration::from_millis(500));
    let after = serve.fds_and_rss();
    println!(
        "slowloris: {n} slow-header + {} slow-body connections (opened in {:.1} s, timeouts \
         {timeout_s} s); API answered during the attack ({:.1} s in); all closed after {:.1} s \
         ({timed_out_bodies} bodies answered 408); serve fds before/during/after {}/{}/{}, RSS \
         KiB before/during/after {}/{}/{}",
        n / 4,
        open_took.as_secs_f64(),
        answered_during.as_secs_f64(),
        all_closed.as_secs_f64(),
        before.0,
        during.0,
        after.0,
        before.1,
        during.1,
        after.1
    );
    assert_eq!(timed_out_bodies, n / 4, "every slow body is answered 408");
    assert!(
        during.0 >= before.0 + n,
        "the connections were held: {during:?}"
    );
    // Each is cut at most a timeout after it opened (plus scheduling slack).
    let bound = open_took + Duration::from_secs(timeout_s as u64 + 3);
    assert!(all_closed < bound, "{all_closed:?} > {bound:?}");
    assert!(
        after.0 <= before.0 + 4,
        "descriptors leaked: {before:?} → {after:?}"
    );
    serve.stop();
}

/// `muninn serve` in `dir` with header and body read timeouts of `timeout_s` and room for `n`
/// slow-header connections and a quarter as many slow bodies (the cap itself is tested in
/// muninn-host's `limits`).
fn serve_with_read_timeouts(dir: &Path, n: usize, timeout_s: usize) -> Serve {
    let cap = (n + n / 4 + 64).max(1024);
    let config = format!(
        "listen = '127.0.0.1:0'\n[api]\nmax_connections = {cap}\nheader_read_timeout_s = {timeout_s}\nbody_read_timeout_s = {timeout_s}\n[[mind]]\nid = 'vala'\nrooms = ['#swarm']\ndoctrine_text = 'You are Vala.'\n"
    );
    std::fs::write(dir.join("muninn.toml"), config).unwrap();
    Serve::start(dir, &["--config", "muninn.toml"], &[])
}

/// `n` connections that each send a request line and stop there.
fn slow_header_connections(addr: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"GET /v1/minds HTTP/1.1\r\n").unwrap();
            stream
        })
        .collect()
}

/// `n` authenticated POSTs that declare a megabyte and send eight bytes of it.
fn slow_body_connections(addr: &str, token: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).unwrap();
            write!(
                stream,
                "POST /v1/minds/vala/deliveries HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{{\"room\":"
            )
            .unwrap();
            stream
        })
        .collect()
}

/// Reads each stream to its end (failing if one is still open after `wait`): how many were
/// answered 408.
fn answered_408_once_closed<'a>(
    streams: impl Iterator<Item = &'a mut TcpStream>,
    wait: Duration,
) -> usize {
    let mut timed_out_bodies = 0;
    for stream in streams {
        stream.set_read_timeout(Some(wait)).unwrap();
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        assert!(read.is_ok(), "a slow connection was left open: {read:?}");
        if answer.starts_with(b"HTTP/1.1 408") {
            timed_out_bodies += 1;
        }
    }
    timed_out_bodies
}
