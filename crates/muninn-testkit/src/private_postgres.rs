//! A private PostgreSQL server for one test: `initdb` into a temporary directory with the
//! machine's own binaries (`/usr/lib/postgresql/<version>/bin`), its own loopback port, trust
//! authentication, and a test that can stop, start and restart it under load — which the
//! shared server on 5432 must never be.
//!
//! PostgreSQL refuses to run as root: as root (CI), the cluster belongs to the `postgres`
//! user and every command runs through `runuser`. The server is stopped (immediate mode) and
//! its directory removed when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A running private PostgreSQL; see the module docs.
#[derive(Debug)]
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

/// The newest installed server's binaries, if any.
fn server_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A free loopback port (bound and released: another process could take it in between, which
/// only fails the start loudly).
fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

impl PrivatePostgres {
    /// Creates and starts a cluster; `Err` says why not (no server binaries, initdb failed).
    pub fn start() -> Result<PrivatePostgres, String> {
        let bin = server_bin().ok_or("no /usr/lib/postgresql/*/bin/initdb")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let as_postgres = is_root();
        if as_postgres {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .map_err(|e| e.to_string())?;
            if !chown.success() {
                return Err("chown to postgres failed".into());
            }
        }
        let server = PrivatePostgres {
            bin,
            port: free_port()?,
            dir,
            as_postgres,
        };
        let data = server.data();
        server.run(
            "initdb",
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        )?;
        server.pg_ctl("start")?;
        Ok(server)
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (fast: sessions are disconnected, as a restart by an operator does).
    pub fn stop(&self) -> Result<(), String> {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"])
            .map(|_| ())
    }

    /// Starts a stopped server and waits until it accepts connections.
    pub fn start_again(&self) -> Result<(), String> {
        self.pg_ctl("start")
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn pg_ctl(&self, action: &str) -> Result<(), String> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-o", &options, "-l", &log, "-w", action],
        )?;
        self.wait_ready(Duration::from_secs(30))
    }

    fn wait_ready(&self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("PostgreSQL on port {} did not come up", self.port))
    }

    /// Runs one of the server's programs, as `postgres` when we are root.
    fn run(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{program} {args:?} failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(output)
    }

    /// The server's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "stop"]);
    }
}
