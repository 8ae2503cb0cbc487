//! `muninn doctor` on a `[matrix]` configuration against a real Synapse: an access token
//! checked with `whoami` (the account's on its device, another account's, a revoked one, an
//! unset variable), a password read but not tried, an unreachable homeserver named.

use super::*;

/// `muninn doctor --config` with the bot's credential `credential` (a TOML inline table) and
/// `env`: (exit success, stdout).
fn doctor(homeserver: &str, bot: &str, credential: &str, env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r##"data_dir = "data"

[backend]
kind = "sim"

[matrix]
homeserver = "{homeserver}"

[[mind]]
id = "vala"
doctrine_text = "You are Vala."
rooms = ["#doctor"]

[mind.matrix]
user_id = "{bot}"
device_id = "MUNINN_VALA"
{credential}
"##
    );
    std::fs::write(dir.path().join("muninn.toml"), config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_muninn"))
        .arg("doctor")
        .arg("--config")
        .arg(dir.path().join("muninn.toml"))
        .env_remove("MUNINN_CONFIG")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_homeserver_and_each_accounts_token_without_logging_in() {
    let Some(synapse) = synapse::shared() else {
        return;
    };
    let (human, bot) = accounts(synapse, "doctor").await;
    let client = muninn_matrix::client::MatrixClient::new(&synapse.url()).unwrap();
    let login = client.login(&bot, PASSWORD, "MUNINN_VALA").await.unwrap();
    let token = login.access_token.clone();
    let other = client
        .login(&human.user_id, PASSWORD, "ELSEWHERE")
        .await
        .unwrap()
        .access_token;
    let by_env = r#"access_token = { env = "VALA_TOKEN" }"#;

    the_accounts_own_token_passes_unprinted(&synapse.url(), &bot, by_env, &token);

    other_revoked_or_unset_tokens_fail(&synapse.url(), &bot, &human.user_id, by_env, &other);

    // A password is read but not tried: a login on the fixed device would replace the running
    // host's token — the token from the login above still works afterwards.
    let (passed, out) = doctor(
        &synapse.url(),
        &bot,
        r#"password = { env = "VALA_PASSWORD" }"#,
        &[("VALA_PASSWORD", PASSWORD)],
    );
    assert!(passed, "{out}");
    assert!(out.contains("a login is not tried"), "{out}");
    let me = client.with_token(&token).whoami().await.unwrap();
    assert_eq!(me.user_id, bot);

    // A homeserver nobody listens on: the reachability check fails.
    let (passed, out) = doctor(
        "http://127.0.0.1:9",
        &bot,
        by_env,
        &[("VALA_TOKEN", &token)],
    );
    assert!(!passed, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("FAIL homeserver")),
        "{out}"
    );
}

/// The account's own token on its device: every Matrix check passes, doctor exits 0, and the
/// token is not in its output.
fn the_accounts_own_token_passes_unprinted(homeserver: &str, bot: &str, by_env: &str, token: &str) {
    let (passed, out) = doctor(homeserver, bot, by_env, &[("VALA_TOKEN", token)]);
    assert!(passed, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("ok   homeserver")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{bot}: the access token is the account's on device MUNINN_VALA"
        )),
        "{out}"
    );
    assert!(
        !out.contains(token),
        "the token reached doctor's output: {out}"
    );
}

/// Another account's token (`other`, of `human_id`), a revoked one and an unset variable: each
/// a failure that names it.
fn other_revoked_or_unset_tokens_fail(
    homeserver: &str,
    bot: &str,
    human_id: &str,
    by_env: &str,
    other: &str,
) {
    // Another account's token: named, and a failure.
    let (passed, out) = doctor(homeserver, bot, by_env, &[("VALA_TOKEN", other)]);
    assert!(!passed, "{out}");
    assert!(
        out.contains(&format!(
            "the access token is {human_id}'s, configured {bot}"
        )),
        "{out}"
    );

    // A revoked token: whoami is refused, a failure that says so.
    let (passed, out) = doctor(homeserver, bot, by_env, &[("VALA_TOKEN", "syt_revoked_0")]);
    assert!(!passed, "{out}");
    assert!(
        out.contains("FAIL matrix account") && out.contains("whoami"),
        "{out}"
    );

    // A variable that is not set: the secret does not read.
    let (passed, out) = doctor(homeserver, bot, by_env, &[]);
    assert!(!passed, "{out}");
    assert!(out.contains("VALA_TOKEN"), "{out}");
}
