//! `muninn.toml`: loading, validation (every problem names its field), the demo, the checked-in
//! JSON Schema and the example file.

use muninn_host::config::{
    Config, ConfigError, DEMO_SOURCE, PermissionMode, PoolSettings, RefreshMode,
};
use pretty_assertions::assert_eq;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const VALID: &str = r##"
data_dir = "data"
listen = "127.0.0.1:0"

[[mind]]
id = "vala"
doctrine = ["doctrine.md"]
persona_state = "persona.json"
rooms = ["#swarm", "!abc:example.org"]
policy = "threshold:0.8"
"##;

/// A directory with the files VALID refers to, and the config file itself.
fn write(dir: &Path, text: &str) -> PathBuf {
    std::fs::write(dir.join("doctrine.md"), "Be brief.\n").unwrap();
    std::fs::write(dir.join("persona.json"), r#"{"mood":"calm"}"#).unwrap();
    let path = dir.join("muninn.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_valid_file_loads_with_paths_resolved_against_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), VALID);
    let config = Config::load(Some(&path)).unwrap();
    assert_eq!(config.data_dir, dir.path().join("data"));
    assert_eq!(
        config.database_url(),
        dir.path()
            .join("data")
            .join("muninn.db")
            .display()
            .to_string()
    );
    assert_eq!(config.api_token_path(), dir.path().join("data/api-token"));
    let mind = &config.minds[0];
    assert_eq!(mind.doctrine, vec![dir.path().join("doctrine.md")]);
    assert_eq!(mind.read_doctrine().unwrap(), "Be brief.");
    assert_eq!(
        mind.read_persona_state().unwrap(),
        Some(serde_json::json!({"mood": "calm"}))
    );
    assert_eq!(mind.display_name(), "vala");
}

#[test]
fn no_file_means_the_valid_demo() {
    let config = Config::load(None).unwrap();
    let cwd = std::env::current_dir().unwrap();
    let mut demo = Config::demo();
    demo.resolve_paths(&cwd);
    assert_eq!(config, demo);
    let vala = config.mind("vala").unwrap();
    assert_eq!(vala.rooms, ["#swarm", "#burn", "#minds"]);
    assert_eq!(
        config.backend.kind,
        Some(muninn_host::config::BackendKind::Sim)
    );
    assert!(vala.read_persona_state().unwrap().is_some());
    assert!(!vala.read_doctrine().unwrap().is_empty());
    assert_eq!(
        config.database_url(),
        cwd.join("muninn-data/muninn.db").display().to_string()
    );
    config.validate(Path::new(DEMO_SOURCE)).unwrap();
}

/// Issue 10: every path is absolute once loaded, whether the file was named relative to the
/// working directory or there was no file at all.
#[test]
fn paths_are_absolute_after_loading_from_a_relative_file_name() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), VALID);
    let config = Config::load_in(dir.path(), Some(Path::new("muninn.toml"))).unwrap();
    assert_eq!(config.data_dir, dir.path().join("data"));
    assert!(config.data_dir.is_absolute());
    assert!(Path::new(&config.database_url()).is_absolute());
    assert_eq!(
        config.minds[0].doctrine,
        vec![dir.path().join("doctrine.md")]
    );
    let nested = dir.path().join("etc");
    std::fs::create_dir(&nested).unwrap();
    write(&nested, VALID);
    let config = Config::load_in(dir.path(), Some(Path::new("etc/muninn.toml"))).unwrap();
    assert_eq!(config.data_dir, nested.join("data"));
    let demo = Config::load_in(dir.path(), None).unwrap();
    assert_eq!(demo.data_dir, dir.path().join("muninn-data"));
    assert_eq!(
        demo.api_token_path(),
        dir.path().join("muninn-data/api-token")
    );
}

#[test]
fn an_unreadable_file_and_bad_toml_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let error = Config::load(Some(&missing)).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }), "{error}");
    assert!(error.to_string().contains("nope.toml"), "{error}");

    let path = write(dir.path(), &format!("{VALID}\nbogus_field = 1\n"));
    let error = Config::load(Some(&path)).unwrap_err();
    assert!(matches!(error, ConfigError::Parse { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("muninn.toml") && text.contains("bogus_field"),
        "{text}"
    );

    let path = write(
        dir.path(),
        &VALID.replace("policy = ", "head_ttl = \"2h\"\npolicy = "),
    );
    let text = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(text.contains("head_ttl") || text.contains("2h"), "{text}");
}

#[test]
fn self_sessions_resolve_mind_over_backend_over_defaults_and_the_pool_parses() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:0\"\n\
         [backend.self_session]\n\
         cli_tools = [\"Read\", \"Bash\"]\n\
         permission_mode = \"acceptEdits\"\n\
         flush_grace_s = 600\n\
         [backend.pool]\n\
         max_processes = 3\n\
         memory_budget_mib = 1024\n",
    ) + "refresh = \"compact\"\nself_session = { flush_grace_s = 30, brief_budget_micro_usd = 2000000 }\n";
    let path = write(dir.path(), &text);
    let config = Config::load(Some(&path)).unwrap();
    let mind = &config.minds[0];
    assert_eq!(mind.refresh, RefreshMode::Compact);
    let session = mind.self_session.resolve(&config.backend.self_session);
    assert_eq!(session.cli_tools, ["Read", "Bash"]);
    assert_eq!(session.permission_mode, PermissionMode::AcceptEdits);
    assert_eq!(session.permission_mode.as_str(), "acceptEdits");
    assert_eq!(session.brief_budget_micro_usd, Some(2_000_000));
    assert_eq!(
        session.flush_grace,
        Duration::from_secs(30),
        "the Mind's wins"
    );
    assert_eq!(session.flush_headroom_tokens, 60_000, "the default");
    assert_eq!(session.flush_escalate_after, Duration::from_secs(120));
    assert_eq!(session.flush_exit_drain, Duration::from_millis(2_000));
    assert_eq!(config.backend.pool.max_processes, 3);
    assert_eq!(config.backend.pool.memory_budget_mib, 1_024);
    assert_eq!(config.backend.pool.per_process_mib, 300, "the default");
    // Left out, everything has its default.
    let plain = Config::load(Some(&write(dir.path(), VALID))).unwrap();
    assert_eq!(plain.minds[0].refresh, RefreshMode::Rebuild);
    let session = plain.minds[0]
        .self_session
        .resolve(&plain.backend.self_session);
    assert!(session.cli_tools.is_empty());
    assert_eq!(session.permission_mode, PermissionMode::Default);
    assert_eq!(session.flush_grace, Duration::from_secs(900));
    assert_eq!(plain.backend.pool, PoolSettings::default());
    // An unknown permission mode is a parse error naming it.
    let bad = write(
        dir.path(),
        &(VALID.to_string() + "self_session = { permission_mode = \"yolo\" }\n"),
    );
    let text = Config::load(Some(&bad)).unwrap_err().to_string();
    assert!(
        text.contains("yolo") || text.contains("permission_mode"),
        "{text}"
    );
}

/// Each invalid value of a Mind's table: the text of the valid config it replaces, what it is
/// replaced with, and the field its error must name.
const INVALID_MIND_VALUES: &[(&str, &str, &str)] = &[
    (r##"id = "vala""##, r##"id = "va la""##, "mind[0].id"),
    (r##"id = "vala""##, r##"id = """##, "mind[0].id"),
    (
        r##"rooms = ["#swarm", "!abc:example.org"]"##,
        r##"rooms = ["swarm"]"##,
        "mind[0].rooms[0]",
    ),
    (
        r##"rooms = ["#swarm", "!abc:example.org"]"##,
        r##"rooms = ["#swarm", ""]"##,
        "mind[0].rooms[1]",
    ),
    (
        r##"rooms = ["#swarm", "!abc:example.org"]"##,
        r##"rooms = ["#a", "#a"]"##,
        "mind[0].rooms[1]",
    ),
    (
        r##"policy = "threshold:0.8""##,
        r##"policy = "sometimes""##,
        "mind[0].policy",
    ),
    (
        r##"policy = "threshold:0.8""##,
        r##"policy = "threshold:2""##,
        "mind[0].policy",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "head_ttl = \"5m\"\ntail_ttl = \"1h\"",
        "mind[0].head_ttl",
    ),
    (
        r##"doctrine = ["doctrine.md"]"##,
        r##"doctrine = ["missing.md"]"##,
        "mind[0].doctrine[0]",
    ),
    (
        r##"doctrine = ["doctrine.md"]"##,
        "doctrine = []",
        "mind[0].doctrine",
    ),
    (
        r##"persona_state = "persona.json""##,
        r##"persona_state = "nope.json""##,
        "mind[0].persona_state",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "spend_cap_micro_usd = 0",
        "mind[0].spend_cap_micro_usd",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "spend_cap_micro_usd = -5",
        "mind[0].spend_cap_micro_usd",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "spend_window_s = 0",
        "mind[0].spend_window_s",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "turns_per_wake = 0",
        "mind[0].turns_per_wake",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "max_output_tokens = 0",
        "mind[0].max_output_tokens",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "ceiling_tokens = 0",
        "mind[0].ceiling_tokens",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "self_session = { flush_grace_s = 0 }",
        "mind[0].self_session.flush_grace_s",
    ),
    (
        r##"policy = "threshold:0.8""##,
        r##"self_session = { cli_tools = ["Read", "Bash, Edit"] }"##,
        "mind[0].self_session.cli_tools[1]",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "self_session = { brief_budget_micro_usd = 0 }",
        "mind[0].self_session.brief_budget_micro_usd",
    ),
    (
        r##"policy = "threshold:0.8""##,
        "ceiling_tokens = 50000",
        "mind[0].self_session.flush_headroom_tokens",
    ),
    (
        r##"policy = "threshold:0.8""##,
        r##"model = " ""##,
        "mind[0].model",
    ),
    (
        r##"policy = "threshold:0.8""##,
        r##"campaigns = [{ slug = "a b", title = "t" }]"##,
        "mind[0].campaigns[0].slug",
    ),
    (
        r##"policy = "threshold:0.8""##,
        r##"campaigns = [{ slug = "a", title = "" }]"##,
        "mind[0].campaigns[0].title",
    ),
];

/// Each invalid value of the host's own settings (listen, prices, lease, backend, pool), as
/// [`INVALID_MIND_VALUES`].
const INVALID_HOST_VALUES: &[(&str, &str, &str)] = &[
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\nbackend.self_session.flush_headroom_tokens = 0",
        "backend.self_session.flush_headroom_tokens",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\nbackend.pool.max_processes = 0",
        "backend.pool.max_processes",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\nbackend.pool = { memory_budget_mib = 100, per_process_mib = 300 }",
        "backend.pool.memory_budget_mib",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        r##"listen = "localhost""##,
        "listen",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\nprices = \"none.toml\"",
        "prices",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\nlease_ttl_ms = 999",
        "lease_ttl_ms",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\n[backend]\napi_key_env = \"sk-ant-123\"",
        "backend.api_key_env",
    ),
    (
        r##"listen = "127.0.0.1:0""##,
        "listen = \"127.0.0.1:0\"\n[backend]\nbase_url = \"api.example\"",
        "backend.base_url",
    ),
];

/// Each invalid case names its field, in the error's fields and its message.
#[test]
fn every_invalid_value_names_its_field() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to, field) in INVALID_MIND_VALUES.iter().chain(INVALID_HOST_VALUES) {
        assert!(
            VALID.contains(from),
            "case {field}: {from:?} not in the valid config"
        );
        let path = write(dir.path(), &VALID.replacen(from, to, 1));
        let error = Config::load(Some(&path)).unwrap_err();
        assert_eq!(error.fields(), vec![*field], "case {to:?}: {error}");
        let text = error.to_string();
        assert!(
            text.contains("muninn.toml") && text.contains(field),
            "{text}"
        );
    }
    // A duplicate id, and a file with no Mind.
    let two = format!("{VALID}\n[[mind]]\nid = \"vala\"\ndoctrine_text = \"x\"\n");
    let error = Config::load(Some(&write(dir.path(), &two))).unwrap_err();
    assert_eq!(error.fields(), vec!["mind[1].id"], "{error}");
    let none = "listen = \"127.0.0.1:0\"\n";
    let error = Config::load(Some(&write(dir.path(), none))).unwrap_err();
    assert_eq!(error.fields(), vec!["mind"], "{error}");
}

#[test]
fn all_problems_are_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID
        .replace(r#"id = "vala""#, r#"id = "v/a""#)
        .replace(r#"policy = "threshold:0.8""#, r#"policy = "x""#);
    let error = Config::load(Some(&write(dir.path(), &text))).unwrap_err();
    assert_eq!(error.fields(), vec!["mind[0].id", "mind[0].policy"]);
}

#[test]
fn the_example_file_loads_and_validates() {
    let config = Config::load(Some(&repo_root().join("muninn.example.toml"))).unwrap();
    assert_eq!(config.minds.len(), 1);
    assert_eq!(config.minds[0].id, "vala");
}

/// The checked-in schema is what the types generate. `MUNINN_BLESS=1` rewrites it.
#[test]
fn the_checked_in_json_schema_has_not_drifted() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("muninn.schema.json");
    let generated = muninn_host::config::json_schema_text();
    if std::env::var_os("MUNINN_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: rerun with MUNINN_BLESS=1 and commit it",
        path.display()
    );
    // And it describes what the loader accepts: the demo's own serialization round-trips.
    let schema = muninn_host::config::json_schema();
    let mind = &schema["$defs"]["MindConfig"]["properties"];
    assert_eq!(mind["head_ttl"]["default"], "1h");
    assert!(mind["policy"]["description"].is_string());
    let demo = toml::to_string(&Config::demo()).unwrap();
    let back = Config::parse(&demo, Path::new("demo"), Path::new("")).unwrap();
    assert_eq!(back, Config::demo());
}

/// A Mind with a Matrix account whose password is in a file beside the configuration.
const MATRIX: &str = r##"
listen = "127.0.0.1:0"

[matrix]
homeserver = "http://127.0.0.1:8008"
max_pending = 7

[[mind]]
id = "vala"
doctrine_text = "Be brief."
rooms = ["#swarm", "#burn:example.org", "!abc:example.org"]

[mind.matrix]
user_id = "@vala:example.org"
device_id = "MUNINN_VALA"
password = { file = "vala.password" }
"##;

#[test]
fn matrix_sections_load_with_defaults_and_the_secret_is_read_from_its_source() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vala.password"), "hunter2\n").unwrap();
    let path = write(dir.path(), MATRIX);
    let config = Config::load(Some(&path)).unwrap();
    let matrix = config.matrix.clone().unwrap();
    assert_eq!(
        (
            matrix.sync_timeout_ms,
            matrix.timeline_limit,
            matrix.max_pending,
            matrix.context_lines,
            matrix.context_bytes,
            matrix.max_gap_events
        ),
        (30_000, 50, 7, 20, 16_384, 5_000)
    );
    let account = config.minds[0].matrix.clone().unwrap();
    assert!(account.accept_dm_invites);
    let password = account.password.unwrap();
    assert_eq!(password.file, Some(dir.path().join("vala.password")));
    assert_eq!(password.read(&|_| None).unwrap(), "hunter2");
    let from_env = muninn_host::config::SecretSource {
        file: None,
        env: Some("VALA_TOKEN".into()),
    };
    let env = |name: &str| (name == "VALA_TOKEN").then(|| " syt_abc ".to_string());
    assert_eq!(from_env.read(&env).unwrap(), "syt_abc");
    assert_eq!(
        from_env.read(&|_| None).unwrap_err(),
        "$VALA_TOKEN is not set"
    );
    // A configuration without Matrix has none.
    assert_eq!(Config::demo().matrix, None);
}

/// A secret's file is read up to a bound: a path pointing at something that is not a secret (a
/// log, a dump) is refused, naming the file and the bound, never what it holds, instead of
/// being read whole into memory (at load, and again at each refusal of the account's token).
/// A secret at the bound is read.
#[test]
fn a_secret_file_over_its_bound_is_refused_without_being_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.token");
    let source = muninn_host::config::SecretSource {
        file: Some(path.clone()),
        env: None,
    };
    let bound = muninn_host::config::SECRET_MAX_BYTES;
    std::fs::write(&path, "x".repeat(bound)).unwrap();
    assert_eq!(source.read(&|_| None).unwrap().len(), bound);
    std::fs::write(&path, "x".repeat(bound + 1)).unwrap();
    // Its length, not the text, if it was read: a failure message shows no secret either.
    let error = source.read(&|_| None).map(|s| s.len()).unwrap_err();
    assert_eq!(
        error,
        format!(
            "cannot read {}: larger than the limit of {bound} bytes for a secret",
            path.display()
        )
    );
}

/// `f`'s answer, or a failure naming `what` if it has none within 10 s (the thread is left
/// behind: it is what was stuck).
fn within_10_s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} still waiting on the named pipe after 10 s"))
}

/// A named pipe where the configuration names a file — `muninn.toml` itself, a doctrine, a
/// persona state, a secret's file — is refused at once as not a file. Each was opened
/// for reading, which waits for a writer for ever: `serve` and `doctor` hung at load, and a
/// doctrine replaced by a pipe after the load hung the Mind's next turn, on a runtime thread.
#[test]
fn a_named_pipe_named_by_the_configuration_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), VALID);
    let config = Config::load(Some(&path)).unwrap();
    let pipe = |name: &str| {
        let at = dir.path().join(name);
        let _ = std::fs::remove_file(&at);
        nix::unistd::mkfifo(&at, nix::sys::stat::Mode::S_IRWXU).unwrap();
        at
    };
    let refused = "not a file nor a folder (a pipe, socket or device)";

    pipe("doctrine.md");
    let mind = config.minds[0].clone();
    let error = within_10_s("read_doctrine", move || mind.read_doctrine())
        .unwrap_err()
        .to_string();
    assert!(error.contains(refused), "{error}");
    let load = path.clone();
    let error = within_10_s("the load", move || Config::load(Some(&load)))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("doctrine[0]") && error.contains(refused),
        "{error}"
    );

    std::fs::remove_file(dir.path().join("doctrine.md")).unwrap();
    write(dir.path(), VALID);
    pipe("persona.json");
    let load = path.clone();
    let error = within_10_s("the load", move || Config::load(Some(&load)))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("persona_state") && error.contains(refused),
        "{error}"
    );

    let toml = pipe("piped.toml");
    let error = within_10_s("the load", move || Config::load(Some(&toml))).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }), "{error}");
    assert!(error.to_string().contains(refused), "{error}");

    let source = muninn_host::config::SecretSource {
        file: Some(pipe("vala.token")),
        env: None,
    };
    let error = within_10_s("the secret's read", move || source.read(&|_| None)).unwrap_err();
    assert!(error.contains(refused), "{error}");
}

/// Each bad value of the Matrix settings (the host's `[matrix]` and a Mind's account): the text
/// of the valid Matrix config it replaces, what it is replaced with, and the field its error
/// must name.
const BAD_MATRIX_VALUES: &[(&str, &str, &str)] = &[
    (
        r##"homeserver = "http://127.0.0.1:8008""##,
        r##"homeserver = "127.0.0.1:8008""##,
        "matrix.homeserver",
    ),
    ("max_pending = 7", "max_pending = 0", "matrix.max_pending"),
    (
        "max_pending = 7",
        "timeline_limit = 0",
        "matrix.timeline_limit",
    ),
    (
        "max_pending = 7",
        "sync_timeout_ms = 999",
        "matrix.sync_timeout_ms",
    ),
    (
        "max_pending = 7",
        "context_bytes = 0",
        "matrix.context_bytes",
    ),
    (
        "max_pending = 7",
        "max_gap_events = 0",
        "matrix.max_gap_events",
    ),
    (
        "max_pending = 7",
        "max_gap_events = 100001",
        "matrix.max_gap_events",
    ),
    (
        r##"user_id = "@vala:example.org""##,
        r##"user_id = "vala""##,
        "mind[0].matrix.user_id",
    ),
    (
        r##"device_id = "MUNINN_VALA""##,
        r##"device_id = "has space""##,
        "mind[0].matrix.device_id",
    ),
    (
        r##"password = { file = "vala.password" }"##,
        r##"password = { file = "missing.password" }"##,
        "mind[0].matrix.password.file",
    ),
    (
        r##"password = { file = "vala.password" }"##,
        r##"password = { file = "empty.password" }"##,
        "mind[0].matrix.password.file",
    ),
    (
        r##"password = { file = "vala.password" }"##,
        r##"password = { env = "syt_secret-token" }"##,
        "mind[0].matrix.password.env",
    ),
    (
        r##"password = { file = "vala.password" }"##,
        r##"password = { file = "vala.password", env = "X" }"##,
        "mind[0].matrix.password",
    ),
    (
        r##"password = { file = "vala.password" }"##,
        "password = { file = \"vala.password\" }\naccess_token = { env = \"T\" }",
        "mind[0].matrix",
    ),
    (
        r##"rooms = ["#swarm", "#burn:example.org", "!abc:example.org"]"##,
        r##"rooms = ["#swarm", "@ann:example.org"]"##,
        "mind[0].rooms[1]",
    ),
    (
        "[matrix]\nhomeserver = \"http://127.0.0.1:8008\"\nmax_pending = 7\n",
        "",
        "mind[0].matrix",
    ),
];

/// Every file the configuration is read from or names is read up to its bound: a
/// `muninn.toml`, a doctrine or a persona state over it is refused at load naming the file and
/// the limit, and a doctrine that grew past it after the load is refused when it is read again
/// (at a Mind's next turn). Each was read whole before, whatever its size: the load succeeded.
#[test]
fn a_configuration_file_over_its_bound_is_refused_naming_the_limit() {
    let limit = muninn_host::config::CONFIG_FILE_MAX_BYTES as usize;
    let too_large = format!("larger than the limit of {limit} bytes");
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), VALID);
    let config = Config::load(Some(&path)).unwrap();

    let doctrine = dir.path().join("doctrine.md");
    std::fs::write(&doctrine, "x".repeat(limit + 1)).unwrap();
    let error = config.minds[0].read_doctrine().unwrap_err().to_string();
    assert!(error.contains(&too_large), "{error}");
    let error = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(
        error.contains("doctrine[0]") && error.contains(&too_large),
        "{error}"
    );
    std::fs::write(&doctrine, "x".repeat(limit)).unwrap();
    Config::load(Some(&path)).unwrap();

    let persona = dir.path().join("persona.json");
    std::fs::write(&persona, format!("\"{}\"", "x".repeat(limit))).unwrap();
    let error = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(
        error.contains("persona_state") && error.contains(&too_large),
        "{error}"
    );
    std::fs::write(&persona, "{}").unwrap();

    let padded = format!("{VALID}\n# {}\n", "x".repeat(limit));
    std::fs::write(&path, padded).unwrap();
    let error = Config::load(Some(&path)).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }), "{error}");
    assert!(error.to_string().contains(&too_large), "{error}");
}

#[test]
fn every_bad_matrix_value_names_its_field_and_never_shows_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vala.password"), "hunter2").unwrap();
    std::fs::write(dir.path().join("empty.password"), "\n").unwrap();
    for (from, to, field) in BAD_MATRIX_VALUES {
        assert!(
            MATRIX.contains(from),
            "case {field}: {from:?} not in the config"
        );
        let path = write(dir.path(), &MATRIX.replacen(from, to, 1));
        let error = Config::load(Some(&path)).unwrap_err();
        assert_eq!(error.fields(), vec![*field], "case {to:?}: {error}");
        let text = error.to_string();
        assert!(!text.contains("hunter2"), "the secret leaked: {text}");
    }
    // One account, one Mind.
    let two = format!(
        "{MATRIX}\n[[mind]]\nid = \"eir\"\ndoctrine_text = \"x\"\n[mind.matrix]\nuser_id = \"@vala:example.org\"\ndevice_id = \"D\"\naccess_token = {{ env = \"T\" }}\n"
    );
    let error = Config::load(Some(&write(dir.path(), &two))).unwrap_err();
    assert_eq!(error.fields(), vec!["mind[1].matrix.user_id"], "{error}");
}

/// A Config's `Debug` (what a `{config:?}` in a log or a panic prints) names the database
/// without its password; it printed the URL whole.
#[test]
fn a_configs_debug_has_no_database_password() {
    for url in [
        "postgres://muninn:s3cr3t-pw@db.example:5433/muninn",
        "postgresql://muninn:s3cr3t-pw@ss@db.example/muninn?call_timeout=5s",
    ] {
        let mut config = Config::demo();
        config.database = Some(url.into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t-pw"), "{shown}");
        assert!(shown.contains("db.example"), "{shown}");
        let pretty = format!("{config:#?}");
        assert!(!pretty.contains("s3cr3t-pw"), "{pretty}");
    }
    // A SQLite path holds no secret: shown as it is.
    let mut config = Config::demo();
    config.database = Some("/var/lib/muninn/muninn.db".into());
    assert!(format!("{config:?}").contains(r#"database: Some("/var/lib/muninn/muninn.db")"#));
}
