//! The credential reaches the child through an inherited pipe: the turn authenticates against a
//! sim that requires the exact key, and the key is in no argv, no environment, no file under the
//! data dir and no log line — while the same checks do catch a key passed in the environment.

use super::*;
use muninn_claude_cli::{CredentialKind, CredentialPassing};
use pretty_assertions::assert_eq;
use std::sync::{Mutex, OnceLock};

/// Every tracing event of the test process (the driver's own lines and the child's stderr,
/// which the driver logs at debug), so a test can check that no credential was logged.
fn captured_logs() -> &'static Mutex<String> {
    static LOGS: OnceLock<&'static Mutex<String>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static Mutex<String> = Box::leak(Box::new(Mutex::new(String::new())));
        // Another test binary module may have installed one first; then nothing is captured
        // and the log check below would pass vacuously, so it asserts the capture is live.
        let _ = tracing::subscriber::set_global_default(Capture(logs));
        logs
    })
}

struct Capture(&'static Mutex<String>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(format!("{} ", event.metadata().target()));
        event.record(&mut fields);
        fields.0.push('\n');
        self.0.lock().unwrap().push_str(&fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Every regular file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let ty = entry.file_type().unwrap();
            let path = entry.path();
            if ty.is_dir() {
                stack.push(path);
            } else if ty.is_file() {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path);
                }
            }
        }
    }
    assert!(files > 3, "the walk saw the CLI's files ({files})");
    found
}

fn proc_file(pid: u32, name: &str) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{name}")).unwrap()).into_owned()
}

async fn keyed_sim(key: &str) -> SimHandle {
    muninn_sim::spawn(
        "127.0.0.1:0".parse().unwrap(),
        SimConfig {
            frozen_at_ms: Some(T0),
            api_key: Some(key.to_string()),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

fn keyed_config(
    bin: &std::path::Path,
    dir: &std::path::Path,
    sim: &SimHandle,
    key: &str,
    id: &str,
) -> CliConfig {
    let mut c = CliConfig::new(bin, dir, sim.base_url(), Secret::new(key), id);
    // A refused key fails at once instead of after the CLI's ten retries.
    c.max_retries = Some(0);
    c
}

/// The child's argv and environment hold no key and no key variable, only the descriptor's
/// number and exactly the allowlist the driver sets (`env_clear` first): nothing of the test
/// process's own environment, no credential variable.
fn the_child_has_no_key_and_only_the_allowlist(cmdline: &str, environ: &str, key: &str) {
    assert!(cmdline.contains("stream-json"), "{cmdline}");
    assert!(!cmdline.contains(key));
    assert!(!environ.contains(key));
    assert!(!environ.contains("ANTHROPIC_API_KEY"), "{environ}");
    assert!(
        environ
            .split('\0')
            .any(|v| v.starts_with("CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR=")),
        "{environ}"
    );
    let names: std::collections::BTreeSet<&str> = environ
        .split('\0')
        .filter(|v| !v.is_empty())
        .filter_map(|v| v.split('=').next())
        .collect();
    let allowlist: std::collections::BTreeSet<&str> = [
        "PATH",
        "HOME",
        "CLAUDE_CONFIG_DIR",
        "TMPDIR",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "CLAUDE_CODE_ATTRIBUTION_HEADER",
        "CLAUDE_CODE_DISABLE_BACKGROUND_TASKS",
        "CLAUDE_CODE_PROMPT_CACHE_TTL",
        "DISABLE_TELEMETRY",
        "DISABLE_AUTOUPDATER",
        "DISABLE_AUTO_COMPACT",
        "CLAUDE_CODE_MAX_RETRIES",
        "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
        "MUNINN_CHILD_MARK",
    ]
    .into_iter()
    .collect();
    assert_eq!(names, allowlist, "{environ}");
}

/// The sim refuses any other key, so the turns that passed really carried its own: a wrong key,
/// and an empty descriptor, both fail.
async fn no_other_credential_is_accepted(bin: &std::path::Path, sim: &SimHandle) {
    let dir2 = tempfile::tempdir().unwrap();
    for (credential, expect) in [("sk-ant-wrong", "401"), ("", "Not logged in")] {
        let mut b = ClaudeCliBackend::new(keyed_config(
            bin,
            dir2.path(),
            sim,
            credential,
            "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a52",
        ));
        b.start(spec("fd-wrong")).await.unwrap();
        let err = b.turn(TurnInput::text("fd wrong")).await.unwrap_err();
        assert!(err.to_string().contains(expect), "{err}");
        b.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_goes_through_a_descriptor_and_is_left_nowhere() {
    let Some(bin) = claude_cli() else { return };
    let logs = captured_logs();
    tracing::info!("capture check");
    assert!(
        logs.lock().unwrap().contains("capture check"),
        "the log capture is live"
    );
    let key = "sk-ant-fd-3f9c1e7a5b2d4c6e8a0b1c2d3e4f5a6b";
    let sim = keyed_sim(key).await;
    let dir = tempfile::tempdir().unwrap();
    let config = keyed_config(
        &bin,
        dir.path(),
        &sim,
        key,
        "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a51",
    );
    assert_eq!(config.credential_passing, CredentialPassing::FileDescriptor);
    let mut b = ClaudeCliBackend::new(config.clone());
    b.start(spec("fd")).await.unwrap();
    let o = ok(b.turn(TurnInput::text("fd one")).await);
    assert!(o.text.contains("fd one"));
    ok(b.turn(TurnInput::text("fd two")).await);
    let auths: Vec<String> = sim.sim.requests().into_iter().map(|r| r.auth).collect();
    assert_eq!(auths, ["x-api-key", "x-api-key"]);

    let pid = b.child_pid().await.unwrap();
    let cmdline = proc_file(pid, "cmdline");
    let environ = proc_file(pid, "environ");
    the_child_has_no_key_and_only_the_allowlist(&cmdline, &environ, key);
    // The pipe is drained: nothing left for a later reader of the child's descriptors.
    assert_eq!(files_containing(dir.path(), key), Vec::<PathBuf>::new());
    // A relaunch passes it again (a fresh pipe).
    sigkill(pid);
    wait_dead(pid).await;
    ok(b.turn(TurnInput::text("fd three, after a relaunch")).await);
    b.shutdown().await.unwrap();

    assert_eq!(files_containing(dir.path(), key), Vec::<PathBuf>::new());
    // The CLI's "handoff" copy (written only when CLAUDE_CODE_REMOTE is set) does not hold it.
    for handoff in [
        "/home/claude/.claude/remote/.api_key",
        "/home/claude/.claude/remote/.oauth_token",
    ] {
        let held = std::fs::read_to_string(handoff).unwrap_or_default();
        assert!(!held.contains(key), "{handoff}");
    }
    let logged = logs.lock().unwrap().clone();
    assert!(!logged.contains(key), "a log line holds the key");
    assert!(!logged.contains(&key[key.len() - 12..]));
    no_other_credential_is_accepted(&bin, &sim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_token_goes_as_a_bearer_and_the_environment_fallback_works() {
    let Some(bin) = claude_cli() else { return };
    let token = "sk-ant-oat01-7d2e9b4c1a3f5e6d8c0b2a4f6e8d0c1b";
    let sim = keyed_sim(token).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = keyed_config(
        &bin,
        dir.path(),
        &sim,
        token,
        "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a53",
    );
    config.credential_kind = CredentialKind::OAuthToken;
    // With a token the CLI defaults to the subscription's model, which the sim does not price.
    let mut s = spec("oauth");
    s.model = "claude-opus-5-5".to_string();
    let mut b = ClaudeCliBackend::new(config.clone());
    b.start(s.clone()).await.unwrap();
    ok(b.turn(TurnInput::text("oauth one")).await);
    let pid = b.child_pid().await.unwrap();
    assert!(!proc_file(pid, "environ").contains(token));
    assert!(proc_file(pid, "environ").contains("CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR="));
    b.shutdown().await;
    assert_eq!(files_containing(dir.path(), token), Vec::<PathBuf>::new());
    let auths: Vec<String> = sim.sim.requests().into_iter().map(|r| r.auth).collect();
    assert_eq!(auths, ["bearer"]);

    // The fallback for CLIs without the descriptor variables: the environment. The same check
    // that found nothing above finds the token there.
    config.credential_passing = CredentialPassing::Environment;
    config.session_id = "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a54".to_string();
    let mut b = ClaudeCliBackend::new(config.clone());
    b.start(s).await.unwrap();
    ok(b.turn(TurnInput::text("oauth env")).await);
    let pid = b.child_pid().await.unwrap();
    assert!(proc_file(pid, "environ").contains(&format!("CLAUDE_CODE_OAUTH_TOKEN={token}")));
    b.shutdown().await;
    let auths: Vec<String> = sim.sim.requests().into_iter().map(|r| r.auth).collect();
    assert_eq!(auths, ["bearer", "bearer"]);
}

/// Lets the session of `config` run Bash: allowed by its project's settings
/// (`bypassPermissions` is refused to root), which the CLI reads only in a workspace marked
/// trusted.
fn allow_bash(config: &CliConfig) {
    let project = config.work_dir().join(".claude");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("settings.json"),
        json!({"permissions": {"allow": ["Bash"]}}).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(config.config_dir()).unwrap();
    let trusted = json!({"projects": {config.work_dir().display().to_string():
        {"hasTrustDialogAccepted": true}}});
    std::fs::write(
        config.config_dir().join(".claude.json"),
        trusted.to_string(),
    )
    .unwrap();
}

/// What the CLI's tools see of the credential: nothing in the default descriptor mode. A Bash
/// tool call lists its environment and its open descriptors; neither holds the key (the CLI
/// read the pipe at start and passes its tools neither the descriptor nor its variable). The
/// control: under the environment fallback the same call prints the key — the CLI hands its
/// own environment to every tool process, so that fallback gives the credential to whatever a
/// tool runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_process_gets_no_credential_from_the_descriptor() {
    let Some(bin) = claude_cli() else { return };
    let key = "sk-ant-tool-8b1d3f5a7c9e0b2d4f6a8c0e1b3d5f7a";
    let sim = keyed_sim(key).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = keyed_config(
        &bin,
        dir.path(),
        &sim,
        key,
        "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a55",
    );
    config.tools = vec!["Bash".to_string()];
    let script = json!([
        {"name": "Bash", "input": {"command": "env", "description": "environment"}},
        {"name": "Bash", "input": {"command": "ls -l /proc/self/fd", "description": "descriptors"}},
    ]);
    let seen_by_tools = |sim: &SimHandle| -> Vec<String> {
        let body = sim.sim.requests().last().unwrap().body.clone();
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["content"].to_string())
            .collect()
    };
    allow_bash(&config);
    let mut b = ClaudeCliBackend::new(config.clone());
    b.start(spec("tool-fd")).await.unwrap();
    ok(
        b.turn(TurnInput::text(format!("look [sim: tool calls {script}]")))
            .await,
    );
    b.shutdown().await;
    let [environment, descriptors] = seen_by_tools(&sim).try_into().unwrap();
    assert!(
        environment.contains("CLAUDE_CODE_SESSION_ID="),
        "{environment}"
    );
    assert!(!environment.contains(key), "{environment}");
    assert!(!environment.contains("FILE_DESCRIPTOR"), "{environment}");
    assert!(descriptors.contains("/proc/"), "{descriptors}");
    assert!(!descriptors.contains("pipe:"), "{descriptors}");

    config.credential_passing = CredentialPassing::Environment;
    config.session_id = "f1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a56".to_string();
    allow_bash(&config);
    let mut b = ClaudeCliBackend::new(config);
    b.start(spec("tool-env")).await.unwrap();
    ok(
        b.turn(TurnInput::text(format!("look [sim: tool calls {script}]")))
            .await,
    );
    b.shutdown().await;
    let [environment, _] = seen_by_tools(&sim).try_into().unwrap();
    assert!(
        environment.contains(&format!("ANTHROPIC_API_KEY={key}")),
        "{environment}"
    );
}
