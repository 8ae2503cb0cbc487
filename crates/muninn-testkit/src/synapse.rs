//! A real Matrix homeserver for the Matrix tests: Synapse from PyPI (installed pinned by
//! `scripts/install-synapse.sh`), one per test binary or per test, each on a free loopback port
//! with its own data directory; and [`MatrixUser`], a person's client that posts through the
//! Client-Server API and reads what appears in the rooms.
//!
//! The configuration is `../shared/reference/matrix`'s tested recipe (SQLite, loopback only,
//! open registration, every `rc_*` limit raised, no key servers) with a fixed signing key and
//! cheap password hashing (`bcrypt_rounds: 4`), so a start costs one Python start (3–8 s) and a
//! registration well under a second.
//!
//! Synapse caches identical `/sync` requests for two minutes (`since`, filter and timeout
//! alike); [`MatrixUser`] therefore reads rooms with `/messages`, never `/sync`. A test of what
//! that cache does runs on [`short_sync_cache`]'s homeserver, which keeps answers
//! [`SHORT_SYNC_CACHE`] (Synapse's `caches.sync_response_cache_duration`), so that it waits
//! for an answer to leave the cache in seconds, not minutes.
//!
//! A Synapse lives as long as its [`Synapse`] value; one held in a `static` (see [`shared`]) is
//! stopped by a watchdog shell when the test process exits, which also removes its directory.

use crate::peers::synapse_python;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shared secret of the test homeservers' admin registration.
const REGISTRATION_SECRET: &str = "muninn-test-registration";

/// The server name of every test homeserver: user ids are `@name:localhost`.
pub const SERVER_NAME: &str = "localhost";

/// A fixed ed25519 signing key (test only: nothing federates), so a start needs no
/// `--generate-keys` run.
const SIGNING_KEY: &str = "ed25519 a_test dGVzdC1rZXktZm9yLW11bmlubi1tYXRyaXgtdGVzdHM";

/// How long a start may take before the test fails (a loaded 2-core machine: 8 s measured).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A running Synapse with its own data directory and port.
#[derive(Debug)]
pub struct Synapse {
    python: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Remove `dir` when dropped (a `static` instance leaves that to its watchdog).
    owns_dir: bool,
}

impl Synapse {
    /// Starts a Synapse for `test`; `None` after [`missing_peer`](crate::peers::missing_peer) when Synapse is not
    /// installed. Panics (with its log) if it does not start.
    #[track_caller]
    pub fn start(test: &str) -> Option<Synapse> {
        Synapse::start_configured(test, "")
    }

    /// Starts a Synapse as [`start`](Self::start) does, `extra` (YAML lines) added to its
    /// configuration.
    #[track_caller]
    fn start_configured(test: &str, extra: &str) -> Option<Synapse> {
        let python = synapse_python()?;
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("muninn-synapse-{}-{n}-{test}", std::process::id()));
        std::fs::create_dir_all(dir.join("media")).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
        let port = free_port();
        write_config(&dir, port, extra);
        let mut synapse = Synapse {
            python,
            dir,
            port,
            child: None,
            owns_dir: true,
        };
        synapse.launch();
        Some(synapse)
    }

    /// Its base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts the process on the existing configuration and waits until it answers.
    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("synapse.log"))
            .unwrap_or_else(|e| panic!("synapse log: {e}"));
        let err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("synapse log: {e}"));
        let started = Instant::now();
        let mut child = Command::new(&self.python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(self.dir.join("homeserver.yaml"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting synapse: {e}"));
        watchdog(child.id(), &self.dir);
        while !answers(self.port) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("synapse exited ({status}):\n{}", self.log_tail());
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                panic!(
                    "synapse did not answer within {START_TIMEOUT:?}:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "synapse on port {} ready in {:.1} s",
            self.port,
            started.elapsed().as_secs_f64()
        );
        self.child = Some(child);
    }

    /// Stops it (SIGTERM, as an operator would; it exits in about 1.5 s) and waits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it and starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// The end of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("synapse.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Registers `name` with `password` through the client API and returns its client.
    pub async fn register(&self, name: &str, password: &str) -> MatrixUser {
        let http = http_client();
        let body =
            json!({"username": name, "password": password, "auth": {"type": "m.login.dummy"}});
        let answer = post_json(
            &http,
            &format!("{}/_matrix/client/v3/register", self.url()),
            None,
            &body,
        )
        .await;
        MatrixUser::from_login(http, self.url(), &answer)
    }

    /// Logs `user` (a user id) in with `password` on `device`: a client of its own on that
    /// device (the connector's fixed device, to log it out from outside).
    pub async fn login(&self, user: &str, password: &str, device: &str) -> MatrixUser {
        let http = http_client();
        let body = json!({"type": "m.login.password", "device_id": device,
            "identifier": {"type": "m.id.user", "user": user}, "password": password});
        let answer = post_json(
            &http,
            &format!("{}/_matrix/client/v3/login", self.url()),
            None,
            &body,
        )
        .await;
        MatrixUser::from_login(http, self.url(), &answer)
    }

    /// Registers a server admin (through Synapse's own script: the shared-secret registration)
    /// and logs it in.
    pub async fn register_admin(&self, name: &str, password: &str) -> MatrixUser {
        let script = self.python.with_file_name("register_new_matrix_user");
        let status = Command::new(script)
            .args([
                "-k",
                REGISTRATION_SECRET,
                "-u",
                name,
                "-p",
                password,
                "-a",
                "--exists-ok",
            ])
            .arg(self.url())
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("register_new_matrix_user: {e}"));
        assert!(
            status.success(),
            "register_new_matrix_user failed: {status}"
        );
        let http = http_client();
        let body = json!({"type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": name}, "password": password});
        let answer = post_json(
            &http,
            &format!("{}/_matrix/client/v3/login", self.url()),
            None,
            &body,
        )
        .await;
        MatrixUser::from_login(http, self.url(), &answer)
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        self.stop();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One Synapse for a whole test binary, started on first use (`None` after [`missing_peer`](crate::peers::missing_peer)).
/// It outlives every test; its watchdog stops it and removes its directory once the test
/// process has exited.
#[track_caller]
pub fn shared() -> Option<&'static Synapse> {
    static SHARED: OnceLock<Option<Synapse>> = OnceLock::new();
    kept(&SHARED, "shared", "")
}

/// How long [`short_sync_cache`]'s homeserver keeps a `/sync` answer in its response cache.
pub const SHORT_SYNC_CACHE: Duration = Duration::from_secs(30);

/// One Synapse for a whole test binary, as [`shared`], that keeps `/sync` answers
/// [`SHORT_SYNC_CACHE`] instead of two minutes: for the tests that wait for an answer to leave
/// the cache (one extra start, a few seconds, against minutes of waiting). The other tests keep
/// the default, the one a deployment runs with.
#[track_caller]
pub fn short_sync_cache() -> Option<&'static Synapse> {
    static SHORT: OnceLock<Option<Synapse>> = OnceLock::new();
    let cache = format!(
        "caches: {{sync_response_cache_duration: {}s}}\n",
        SHORT_SYNC_CACHE.as_secs()
    );
    kept(&SHORT, "shortcache", &cache)
}

/// The Synapse held in `cell`, started with `extra` configuration on first use and kept until
/// the test process exits (its watchdog removes its directory).
#[track_caller]
fn kept<'a>(cell: &'a OnceLock<Option<Synapse>>, test: &str, extra: &str) -> Option<&'a Synapse> {
    cell.get_or_init(|| {
        Synapse::start_configured(test, extra).map(|mut s| {
            s.owns_dir = false;
            s
        })
    })
    .as_ref()
}

/// A free loopback port (released just before Synapse binds it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Whether a homeserver answers `/versions` on `port` (plain HTTP/1.0, no client needed).
fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /_matrix/client/versions HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// A shell that stops Synapse `pid` (and removes `dir`) once this test process is gone; it
/// ends by itself when Synapse stops first.
fn watchdog(pid: u32, dir: &Path) {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         if ! kill -0 {parent} 2>/dev/null; then kill -TERM {pid} 2>/dev/null; sleep 3; \
         kill -KILL {pid} 2>/dev/null; rm -rf '{dir}'; fi",
        parent = std::process::id(),
        dir = dir.display()
    );
    let _ = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// The test homeserver's configuration, `extra` (YAML lines) at its end.
fn write_config(dir: &Path, port: u16, extra: &str) {
    let d = dir.display();
    let rc = "{per_second: 1000, burst_count: 1000}";
    let config = format!(
        "server_name: \"{SERVER_NAME}\"
pid_file: {d}/homeserver.pid
listeners:
  - {{port: {port}, bind_addresses: ['127.0.0.1'], type: http, tls: false, x_forwarded: false,
     resources: [{{names: [client], compress: false}}]}}
database: {{name: sqlite3, args: {{database: {d}/homeserver.db}}}}
media_store_path: {d}/media
signing_key_path: {d}/signing.key
report_stats: false
registration_shared_secret: \"{REGISTRATION_SECRET}\"
macaroon_secret_key: \"muninn-test-macaroon\"
form_secret: \"muninn-test-form\"
enable_registration: true
enable_registration_without_verification: true
bcrypt_rounds: 4
trusted_key_servers: []
suppress_key_server_warning: true
presence: {{enabled: false}}
rc_message: {rc}
rc_registration: {rc}
rc_login: {{address: {rc}, account: {rc}, failed_attempts: {rc}}}
rc_joins: {{local: {rc}, remote: {rc}}}
rc_joins_per_room: {rc}
rc_invites: {{per_room: {rc}, per_user: {rc}}}
{extra}"
    );
    std::fs::write(dir.join("homeserver.yaml"), config)
        .and_then(|()| std::fs::write(dir.join("signing.key"), format!("{SIGNING_KEY}\n")))
        .unwrap_or_else(|e| panic!("writing the synapse config: {e}"));
}

fn http_client() -> reqwest::Client {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_else(|e| panic!("http client: {e}"))
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Value {
    let mut request = http.request(method.clone(), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    assert!(status.is_success(), "{method} {url}: HTTP {status}: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn post_json(http: &reqwest::Client, url: &str, token: Option<&str>, body: &Value) -> Value {
    call(http, reqwest::Method::POST, url, token, Some(body)).await
}

/// Percent-encodes a path segment (room ids and aliases carry `!`, `#`, `:`).
fn segment(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A message as it appears in a room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomMessage {
    /// Its event id.
    pub event_id: String,
    /// Who sent it.
    pub sender: String,
    /// Its body.
    pub body: String,
    /// The homeserver's time of it, Unix ms.
    pub ts: i64,
}

/// A person on the homeserver, posting and reading through the Client-Server API.
#[derive(Debug, Clone)]
pub struct MatrixUser {
    http: reqwest::Client,
    base: String,
    /// `@name:localhost`.
    pub user_id: String,
    token: String,
}

static TXN: AtomicU64 = AtomicU64::new(0);

impl MatrixUser {
    fn from_login(http: reqwest::Client, base: String, answer: &Value) -> MatrixUser {
        let field = |name: &str| {
            answer[name]
                .as_str()
                .unwrap_or_else(|| panic!("no {name} in {answer}"))
                .to_owned()
        };
        MatrixUser {
            user_id: field("user_id"),
            token: field("access_token"),
            http,
            base,
        }
    }

    fn api(&self, path: &str) -> String {
        format!("{}/_matrix/client/v3/{path}", self.base)
    }

    /// Creates a room: public with `#alias:localhost` when `alias` is given, else private;
    /// `direct` makes it a direct chat with the invitees (`is_direct` on the invites).
    pub async fn create_room(&self, alias: Option<&str>, invite: &[&str], direct: bool) -> String {
        let mut body = json!({"invite": invite, "is_direct": direct,
            "preset": if alias.is_some() { "public_chat" } else { "trusted_private_chat" }});
        if let Some(alias) = alias {
            body["room_alias_name"] = json!(alias);
        }
        let answer = post_json(
            &self.http,
            &self.api("createRoom"),
            Some(&self.token),
            &body,
        )
        .await;
        answer["room_id"].as_str().unwrap_or_default().to_owned()
    }

    /// Creates a private room of room version `version` with `invite` invited. (Synapse's
    /// default, 12, gives its creator no entry among the users' power levels, and an upgrade of
    /// such a room to 11 leaves the creator at level 0 in the replacement; in an 11 the creator
    /// keeps 100 there and can, say, open its join rule.)
    pub async fn create_private_room(&self, invite: &[&str], version: &str) -> String {
        let body = json!({"invite": invite, "preset": "private_chat", "room_version": version});
        let answer = post_json(
            &self.http,
            &self.api("createRoom"),
            Some(&self.token),
            &body,
        )
        .await;
        answer["room_id"].as_str().unwrap_or_default().to_owned()
    }

    /// Logs this client's device out (`POST /logout`): Synapse deletes the device, and every
    /// access token of it is refused from then on.
    pub async fn logout(&self) {
        post_json(
            &self.http,
            &self.api("logout"),
            Some(&self.token),
            &json!({}),
        )
        .await;
    }

    /// Changes this user's password from `old` to `new` (`POST /account/password`, the old
    /// password as its authentication); `logout_devices`: every other device is logged out
    /// (Synapse deletes them), as a password change after a compromise does.
    pub async fn change_password(&self, old: &str, new: &str, logout_devices: bool) {
        let auth = json!({"type": "m.login.password", "password": old,
            "identifier": {"type": "m.id.user", "user": self.user_id}});
        let body = json!({"new_password": new, "logout_devices": logout_devices, "auth": auth});
        post_json(
            &self.http,
            &self.api("account/password"),
            Some(&self.token),
            &body,
        )
        .await;
    }

    /// The client's access token (to configure a connector with).
    pub fn access_token(&self) -> &str {
        &self.token
    }

    /// Upgrades `room` to room version `version` (`POST …/upgrade`, by a member with the power
    /// to, e.g. its creator); returns the replacement room's id.
    pub async fn upgrade_room(&self, room: &str, version: &str) -> String {
        let url = self.api(&format!("rooms/{}/upgrade", segment(room)));
        let answer = post_json(
            &self.http,
            &url,
            Some(&self.token),
            &json!({"new_version": version}),
        )
        .await;
        answer["replacement_room"]
            .as_str()
            .unwrap_or_else(|| panic!("no replacement_room in {answer}"))
            .to_owned()
    }

    /// Sets `room`'s state event of `kind` with the empty state key (e.g. `m.room.join_rules`
    /// to `{"join_rule": "public"}`, letting anyone in).
    pub async fn set_state(&self, room: &str, kind: &str, content: &Value) {
        let url = self.api(&format!("rooms/{}/state/{kind}/", segment(room)));
        call(
            &self.http,
            reqwest::Method::PUT,
            &url,
            Some(&self.token),
            Some(content),
        )
        .await;
    }

    /// Invites `user` to `room`.
    pub async fn invite(&self, room: &str, user: &str) {
        let url = self.api(&format!("rooms/{}/invite", segment(room)));
        post_json(
            &self.http,
            &url,
            Some(&self.token),
            &json!({"user_id": user}),
        )
        .await;
    }

    /// Joins `room` (by id or alias).
    pub async fn join(&self, room: &str) {
        let url = self.api(&format!("join/{}", segment(room)));
        post_json(&self.http, &url, Some(&self.token), &json!({})).await;
    }

    /// Leaves `room`.
    pub async fn leave(&self, room: &str) {
        let url = self.api(&format!("rooms/{}/leave", segment(room)));
        post_json(&self.http, &url, Some(&self.token), &json!({})).await;
    }

    /// Sets the user's display name (a profile change: a join over the join in each of its
    /// rooms).
    pub async fn set_display_name(&self, name: &str) {
        let url = self.api(&format!("profile/{}/displayname", segment(&self.user_id)));
        let body = json!({"displayname": name});
        call(
            &self.http,
            reqwest::Method::PUT,
            &url,
            Some(&self.token),
            Some(&body),
        )
        .await;
    }

    /// Kicks `user` out of `room`.
    pub async fn kick(&self, room: &str, user: &str) {
        let url = self.api(&format!("rooms/{}/kick", segment(room)));
        post_json(
            &self.http,
            &url,
            Some(&self.token),
            &json!({"user_id": user, "reason": "test"}),
        )
        .await;
    }

    /// Sends a text message (mentioning `mentions` in `m.mentions`); returns its event id.
    pub async fn send(&self, room: &str, text: &str, mentions: &[&str]) -> String {
        let txn = format!(
            "t{}-{}",
            std::process::id(),
            TXN.fetch_add(1, Ordering::Relaxed)
        );
        let url = self.api(&format!(
            "rooms/{}/send/m.room.message/{txn}",
            segment(room)
        ));
        let body = json!({"msgtype": "m.text", "body": text, "m.mentions": {"user_ids": mentions}});
        let answer = call(
            &self.http,
            reqwest::Method::PUT,
            &url,
            Some(&self.token),
            Some(&body),
        )
        .await;
        answer["event_id"].as_str().unwrap_or_default().to_owned()
    }

    /// Every text message in `room` visible to this user, oldest first (up to 1000).
    pub async fn messages(&self, room: &str) -> Vec<RoomMessage> {
        let filter = segment(r#"{"types":["m.room.message"]}"#);
        let url = self.api(&format!(
            "rooms/{}/messages?dir=b&limit=1000&filter={filter}",
            segment(room)
        ));
        let answer = call(
            &self.http,
            reqwest::Method::GET,
            &url,
            Some(&self.token),
            None,
        )
        .await;
        let mut messages: Vec<RoomMessage> = answer["chunk"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| RoomMessage {
                event_id: e["event_id"].as_str().unwrap_or_default().to_owned(),
                sender: e["sender"].as_str().unwrap_or_default().to_owned(),
                body: e["content"]["body"].as_str().unwrap_or_default().to_owned(),
                ts: e["origin_server_ts"].as_i64().unwrap_or_default(),
            })
            .collect();
        messages.reverse();
        messages
    }

    /// The users joined to `room`.
    pub async fn joined_members(&self, room: &str) -> Vec<String> {
        let url = self.api(&format!("rooms/{}/joined_members", segment(room)));
        let answer = call(
            &self.http,
            reqwest::Method::GET,
            &url,
            Some(&self.token),
            None,
        )
        .await;
        answer["joined"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Admin only: limits `user`'s messages to `per_second` with `burst` (Synapse's
    /// per-user rate-limit override), to provoke `M_LIMIT_EXCEEDED`.
    pub async fn override_ratelimit(&self, user: &str, per_second: u32, burst: u32) {
        let url = format!(
            "{}/_synapse/admin/v1/users/{}/override_ratelimit",
            self.base,
            segment(user)
        );
        let body = json!({"messages_per_second": per_second, "burst_count": burst});
        post_json(&self.http, &url, Some(&self.token), &body).await;
    }
}
