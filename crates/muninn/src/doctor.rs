//! `muninn doctor`: checks what `muninn serve` needs before it runs — the configuration, the
//! data directory, the store, the backend (its credential, its endpoint, the pinned Claude Code
//! CLI), and with `[matrix]` the homeserver and each account's credential — and says what to do
//! about each failure. It changes nothing: no directory, database or key is created, no model
//! request is made (the endpoint check is a TCP connect), and no Matrix login is attempted (a
//! password login on an account's fixed device would replace the running host's token; an access
//! token is checked with the read-only `whoami`).
//! Exits non-zero when any check fails.

use crate::output::{json, outln};
use crate::status::Format;
use muninn_host::backends::{PINNED_CLAUDE_CLI, backend_kind, claude_bin};
use muninn_host::config::{BackendKind, Config};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `muninn doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The configuration to check; default: the built-in demo's.
    #[arg(long, env = "MUNINN_CONFIG")]
    config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    Ok,
    Warn,
    Fail,
}

/// One check: what was looked at, what was found, and what to do about it.
#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    outcome: Outcome,
    found: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn ok(name: &'static str, found: impl Into<String>) -> Check {
    Check {
        name,
        outcome: Outcome::Ok,
        found: found.into(),
        fix: None,
    }
}

fn bad(
    name: &'static str,
    outcome: Outcome,
    found: impl Into<String>,
    fix: impl Into<String>,
) -> Check {
    Check {
        name,
        outcome,
        found: found.into(),
        fix: Some(fix.into()),
    }
}

/// `muninn doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<()> {
    let env = |k: &str| std::env::var(k).ok();
    let mut checks = Vec::new();
    match Config::load(args.config.as_deref()) {
        Ok(config) => {
            let source = args
                .config
                .as_ref()
                .map_or("the built-in demo".to_string(), |p| p.display().to_string());
            checks.push(ok("configuration", format!("{source}: {} Mind(s), valid", config.minds.len())));
            checks.extend(data_dir(&config.data_dir));
            checks.push(store(&config));
            checks.extend(backend(&config, env));
            checks.extend(matrix(&config, &env));
        }
        Err(e) => checks.push(bad(
            "configuration",
            Outcome::Fail,
            e.to_string(),
            "fix each field named above (see muninn.example.toml and crates/muninn-host/muninn.schema.json)",
        )),
    }
    let failed = checks.iter().filter(|c| c.outcome == Outcome::Fail).count();
    match args.format {
        Format::Json => json(&checks)?,
        Format::Text => {
            for check in &checks {
                let mark = match check.outcome {
                    Outcome::Ok => "ok  ",
                    Outcome::Warn => "warn",
                    Outcome::Fail => "FAIL",
                };
                outln!("{mark} {:<15} {}", check.name, check.found)?;
                if let Some(fix) = &check.fix {
                    outln!("     {:<15} → {fix}", "")?;
                }
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} check(s) failed");
    Ok(())
}

/// The data directory: present (or creatable), writable, private, and the token file private.
fn data_dir(dir: &Path) -> Vec<Check> {
    use std::os::unix::fs::PermissionsExt;
    let name = "data directory";
    let Ok(meta) = std::fs::metadata(dir) else {
        let parent = dir.parent().unwrap_or(Path::new("/"));
        return vec![match writable(parent) {
            Ok(()) => ok(
                name,
                format!(
                    "{} does not exist yet; `muninn serve` creates it",
                    dir.display()
                ),
            ),
            Err(e) => bad(
                name,
                Outcome::Fail,
                format!(
                    "{} does not exist and {} is not writable: {e}",
                    dir.display(),
                    parent.display()
                ),
                format!(
                    "create it (`mkdir -p {}`) as the user that runs muninn, or set data_dir",
                    dir.display()
                ),
            ),
        }];
    };
    let mut checks = Vec::new();
    checks.push(match writable(dir) {
        Ok(()) => ok(name, format!("{} is writable", dir.display())),
        Err(e) => bad(
            name,
            Outcome::Fail,
            format!("{} is not writable: {e}", dir.display()),
            format!(
                "`chown` it to the user that runs muninn, or `chmod u+w {}`",
                dir.display()
            ),
        ),
    });
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        checks.push(bad(
            "permissions",
            Outcome::Warn,
            format!("{} is writable by others (mode {mode:o})", dir.display()),
            format!(
                "`chmod go-w {}`: it holds the API token and session keys",
                dir.display()
            ),
        ));
    }
    let token = dir.join(muninn_host::config::API_TOKEN_FILE);
    if let Ok(meta) = std::fs::metadata(&token) {
        let mode = meta.permissions().mode() & 0o777;
        checks.push(if mode & 0o077 == 0 {
            ok("API token", format!("{} (mode {mode:o})", token.display()))
        } else {
            bad(
                "API token",
                Outcome::Fail,
                format!("{} is readable by others (mode {mode:o})", token.display()),
                format!(
                    "`chmod 600 {}` (or delete it: the next start makes a new one)",
                    token.display()
                ),
            )
        });
    }
    checks
}

/// Whether a file can be created in `dir` (created and removed at once).
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".muninn-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// The store: a SQLite file that exists opens, a PostgreSQL URL connects.
fn store(config: &Config) -> Check {
    let url = config.database_url();
    let shown = without_credentials(&url);
    let is_postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    if !is_postgres && !Path::new(&url).exists() {
        return ok(
            "store",
            format!("{shown} does not exist yet; `muninn serve` creates it"),
        );
    }
    let opened = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let store = tokio::time::timeout(Duration::from_secs(5), muninn_store::open(&url))
                    .await
                    .map_err(|_| "no answer within 5 s".to_string())?
                    .map_err(|e| e.to_string())?;
                let version = store.schema_version().await.map_err(|e| e.to_string());
                store.close().await;
                version
            })
        });
    match opened {
        Ok(version) => ok("store", format!("{shown} opens (schema version {version})")),
        Err(e) => bad(
            "store",
            Outcome::Fail,
            format!("{shown}: {e}"),
            if is_postgres {
                "start PostgreSQL or fix `database` (a postgres:// URL the host's user can log in with)"
            } else {
                "check the file's owner and permissions, or move it aside to start a fresh store"
            },
        ),
    }
}

/// A database URL as `doctor` prints it: `postgres://…@host/db`, the user and password left out
/// (of the authority and of the query, where sqlx takes them too: `?user=…&password=…`).
/// Anything else (a SQLite path) as it is.
fn without_credentials(url: &str) -> String {
    let Some((_, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // The credentials end at the authority's last `@` (a password may hold one); the
    // authority ends at the path, the query or the fragment (which may hold one too).
    let authority = rest.find(['/', '?', '#']).map_or(rest, |end| &rest[..end]);
    let shown = match authority.rfind('@') {
        Some(at) => format!("postgres://…{}", &rest[at..]),
        None => url.to_owned(),
    };
    without_query_credentials(&shown)
}

/// `url` with the values of its `user` and `password` query parameters left out.
fn without_query_credentials(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key @ ("user" | "password"), _)) => format!("{key}=…"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

/// The backend the configuration asks for: its credential, its endpoint, the CLI's version.
fn backend(config: &Config, env: impl Fn(&str) -> Option<String>) -> Vec<Check> {
    let kind = backend_kind(config, &env);
    let var = &config.backend.api_key_env;
    let mut checks = Vec::new();
    let key_fallback = match kind {
        BackendKind::Sim => {
            checks.push(ok(
                "backend",
                "sim: the built-in simulator (no key, no network)",
            ));
            return checks;
        }
        BackendKind::Anthropic => "ANTHROPIC_AUTH_TOKEN",
        BackendKind::ClaudeCli => "CLAUDE_CODE_OAUTH_TOKEN",
    };
    let label = match kind {
        BackendKind::ClaudeCli => "claude-cli",
        _ => "anthropic",
    };
    checks.push(ok("backend", label));
    let has = |name: &str| env(name).is_some_and(|v| !v.is_empty());
    checks.push(if has(var) || has(key_fallback) {
        let which = if has(var) { var.as_str() } else { key_fallback };
        ok("credential", format!("${which} is set"))
    } else {
        bad(
            "credential",
            Outcome::Fail,
            format!("neither ${var} nor ${key_fallback} is set"),
            format!(
                "export {var}=… in the host's environment (backend.api_key_env names the variable)"
            ),
        )
    });
    let base = config
        .backend
        .base_url
        .clone()
        .unwrap_or_else(|| "https://api.anthropic.com".into());
    checks.push(endpoint(&base));
    if kind == BackendKind::ClaudeCli {
        checks.push(cli_version(claude_bin(config, &env)));
    }
    checks
}

/// Whether the endpoint's host accepts a TCP connection (no request is sent).
fn endpoint(base: &str) -> Check {
    let rest = base.split("://").nth(1).unwrap_or(base);
    let authority = rest.split('/').next().unwrap_or(rest);
    let default_port = if base.starts_with("https://") {
        443
    } else {
        80
    };
    let target = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    let connected = std::net::ToSocketAddrs::to_socket_addrs(&target)
        .map_err(|e| e.to_string())
        .and_then(|mut addrs| addrs.next().ok_or_else(|| "no address".to_string()))
        .and_then(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .map_err(|e| e.to_string())
        });
    match connected {
        Ok(_) => ok("endpoint", format!("{base} accepts connections")),
        Err(e) => bad(
            "endpoint",
            Outcome::Fail,
            format!("{base}: {e}"),
            "check the network or backend.base_url (the host retries, but no turn runs until it answers)",
        ),
    }
}

/// The `claude` binary is there and is the pinned version.
fn cli_version(bin: Option<PathBuf>) -> Check {
    let install = "run scripts/install-claude-cli.sh and point backend.claude_bin or MUNINN_CLAUDE_BIN at the path it prints";
    let Some(bin) = bin.filter(|b| b.is_file()) else {
        return bad(
            "claude CLI",
            Outcome::Fail,
            "no claude binary found",
            install,
        );
    };
    let version = version_of(&bin, VERSION_WAIT);
    match version {
        Ok(v) if v.starts_with(&format!("{PINNED_CLAUDE_CLI} ")) => {
            ok("claude CLI", format!("{} is {v}", bin.display()))
        }
        Ok(v) => bad(
            "claude CLI",
            Outcome::Fail,
            format!(
                "{} is {v:?}, not the pinned {PINNED_CLAUDE_CLI}",
                bin.display()
            ),
            install,
        ),
        Err(e) => bad(
            "claude CLI",
            Outcome::Fail,
            format!("{}: {e}", bin.display()),
            install,
        ),
    }
}

/// How long `claude --version` may take before doctor gives up on it (it answers in well under
/// a second).
const VERSION_WAIT: Duration = Duration::from_secs(10);
/// The most bytes of `--version` output read (a version line is a few dozen).
const VERSION_MAX_BYTES: u64 = 4096;

/// What `bin --version` prints (its first line, at most [`VERSION_MAX_BYTES`], trimmed),
/// within `wait`.
///
/// Run in its own process group, which is killed when the wait runs out: a binary that never
/// answers (a wrapper waiting on something, a wrong file) used to hang `muninn doctor` for
/// ever, with nothing printed — `output()` waits for the child and for its stdout to close,
/// which a process the child started keeps open. The answer is its first line, taken as soon
/// as it ends: waiting for the end of the output failed a binary that printed its version and
/// lingered (or left a process holding its output) as one that did not answer.
fn version_of(bin: &Path, wait: Duration) -> std::io::Result<String> {
    use std::io::{BufRead as _, Read as _};
    use std::os::unix::process::CommandExt as _;
    let mut child = std::process::Command::new(bin)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    let stdout = child.stdout.take();
    let mut stdout = stdout.map(|out| std::io::BufReader::new(out.take(VERSION_MAX_BYTES)));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let read = stdout
            .as_mut()
            .map_or(Ok(0), |out| out.read_until(b'\n', &mut bytes));
        // The receiver is gone only once doctor gave up on the child.
        let _ = tx.send(read.map(|_| bytes));
    });
    let read = rx.recv_timeout(wait);
    // The whole group, whether or not it answered (then it is exiting, or lingers past its
    // answer): a wrapper's own children hold the pipe too, and the wait below is then bounded.
    if let Ok(id) = i32::try_from(child.id()) {
        let group = nix::unistd::Pid::from_raw(id);
        let _already_gone = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
    let _status = child.wait();
    match read {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes?).trim().to_string()),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "`--version` did not answer within {} s (killed)",
                wait.as_secs()
            ),
        )),
    }
}

/// With `[matrix]`: the homeserver accepts connections, every account's secret reads, and an
/// access token is the configured account's on its fixed device (`whoami`, read-only).
fn matrix(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Vec<Check> {
    let Some(matrix) = &config.matrix else {
        return Vec::new();
    };
    let mut reachable = endpoint(&matrix.homeserver);
    reachable.name = "homeserver";
    let mut checks = vec![reachable];
    let connector = match crate::matrix::connector_config(config, env) {
        Ok(Some(connector)) => connector,
        Ok(None) => return checks,
        Err(e) => {
            checks.push(bad(
                "matrix account",
                Outcome::Fail,
                format!("{e:#}"),
                "make the secret's file readable by the host, or export its variable",
            ));
            return checks;
        }
    };
    for account in &connector.accounts {
        checks.push(match &account.credential {
            muninn_matrix::Credential::Password(_) => ok(
                "matrix account",
                format!(
                    "{}: the password reads; a login is not tried (it would replace the running \
                     host's token on device {})",
                    account.user_id, account.device_id
                ),
            ),
            muninn_matrix::Credential::AccessToken(token) => {
                whoami(&matrix.homeserver, account, token.expose())
            }
        });
    }
    checks
}

/// Checks an access token with `GET /account/whoami`: the account's, on its fixed device.
fn whoami(homeserver: &str, account: &muninn_matrix::Account, token: &str) -> Check {
    let name = "matrix account";
    let asked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let client = muninn_matrix::client::MatrixClient::new(homeserver)
                    .map_err(|e| e.to_string())?
                    .with_token(token);
                tokio::time::timeout(Duration::from_secs(10), client.whoami())
                    .await
                    .map_err(|_| "no answer within 10 s".to_string())?
                    .map_err(|e| e.to_string())
            })
        });
    match asked {
        Err(e) => bad(
            name,
            Outcome::Fail,
            format!("{}: whoami: {e}", account.user_id),
            "check the homeserver URL and the access token (a token refused with 401 was logged out or revoked)",
        ),
        Ok(me) if me.user_id != account.user_id => bad(
            name,
            Outcome::Fail,
            format!(
                "the access token is {}'s, configured {}",
                me.user_id, account.user_id
            ),
            "use a token of the configured account, or fix user_id",
        ),
        Ok(me)
            if me
                .device_id
                .as_ref()
                .is_some_and(|d| *d != account.device_id) =>
        {
            bad(
                name,
                Outcome::Fail,
                format!(
                    "the access token is device {}'s, configured {}",
                    me.device_id.unwrap_or_default(),
                    account.device_id
                ),
                "log in on the configured device_id: transaction ids (idempotent sends) are per device",
            )
        }
        Ok(_) => ok(
            name,
            format!(
                "{}: the access token is the account's on device {}",
                account.user_id, account.device_id
            ),
        ),
    }
}

#[cfg(test)]
mod credentials_tests {
    use super::without_credentials;

    /// The user and password never show, whatever characters the password holds: an `@` in it
    /// is legal (URL parsers, sqlx's included, end the credentials at the authority's last `@`).
    #[test]
    fn a_database_url_is_shown_without_its_credentials() {
        let cases = [
            (
                "postgres://u:secret@db.example:5432/m",
                "postgres://…@db.example:5432/m",
            ),
            (
                "postgres://u:p@ss@db.example/m",
                "postgres://…@db.example/m",
            ),
            (
                "postgresql://u:a@b@c@db/m?application_name=x@y&call_timeout=5s",
                "postgres://…@db/m?application_name=x@y&call_timeout=5s",
            ),
            ("postgres://db.example/m", "postgres://db.example/m"),
            (
                "postgres://db/m?application_name=x@y",
                "postgres://db/m?application_name=x@y",
            ),
            ("/var/lib/muninn/muninn.db", "/var/lib/muninn/muninn.db"),
            // sqlx also takes the password (and the user) from the query.
            (
                "postgres://db.example/m?password=s3cr3t-pw",
                "postgres://db.example/m?password=…",
            ),
            (
                "postgres://db/m?application_name=x&user=u&password=a%40b&call_timeout=5s",
                "postgres://db/m?application_name=x&user=…&password=…&call_timeout=5s",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(without_credentials(url), shown, "{url}");
        }
    }
}
