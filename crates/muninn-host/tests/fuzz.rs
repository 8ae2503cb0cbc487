//! Fuzzing what the host reads from outside (`muninn_testkit::fuzz`): the configuration file
//! (`fuzz/corpus/host-config/`) and the HTTP API's request bodies, sent over a real socket to
//! the real router on a real SQLite store (`fuzz/corpus/http-<route>/`).
//!
//! Properties. Configuration: parsing and validation never panic; an error names the file (and
//! a problem its field); a configuration that validates survives serialise → parse → validate
//! unchanged. HTTP: every body is answered 2xx or 4xx, never 5xx, and never hangs; a refusal
//! carries the API's JSON error; a body is accepted only when it is the route's wire type,
//! whose serialise → parse round trip is the identity; the host still answers afterwards.

use muninn_api::ApiToken;
use muninn_api::wire::{
    ContextLine, ErrorResponse, PostBriefRequest, PostDeliveryRequest, PostDeliveryResponse,
    PutSettingsRequest,
};
use muninn_backend::clock::ManualClock;
use muninn_host::Host;
use muninn_host::config::{Config, ConfigError};
use muninn_host::http::serve;
use muninn_store::Mind;
use muninn_testkit::fuzz::{
    FuzzConfig, FuzzRng, JSON_TOKENS, Verdict, corpus_dir, fnv1a, fuzz, load_corpus,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::Arc;

const T0: i64 = 1_750_000_000_000;

fn check_config(dir: &Path, bytes: &[u8]) -> Result<Verdict, String> {
    let file = dir.join("muninn.toml");
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(Verdict::Refused); // `Config::load` reads a String: not UTF-8 is an I/O error.
    };
    let named = |e: &ConfigError| -> Result<Verdict, String> {
        let message = e.to_string();
        if !message.contains(&*file.to_string_lossy()) {
            return Err(format!("the error does not name the file: {message}"));
        }
        if let ConfigError::Invalid { problems, .. } = e
            && let Some(p) = problems
                .iter()
                .find(|p| p.field.is_empty() || p.message.is_empty())
        {
            return Err(format!("a problem without a field or message: {p:?}"));
        }
        Ok(Verdict::Refused)
    };
    let config = match Config::parse(text, &file, dir) {
        Ok(config) => config,
        Err(e) => return named(&e),
    };
    if let Err(e) = config.validate(&file) {
        return named(&e);
    }
    let written = toml::to_string(&config)
        .map_err(|e| format!("a valid configuration does not serialise: {e}"))?;
    let again = Config::parse(&written, &file, dir)
        .map_err(|e| format!("its own serialisation does not parse: {e}\n{written}"))?;
    again
        .validate(&file)
        .map_err(|e| format!("its own serialisation does not validate: {e}"))?;
    if again != config {
        return Err(format!(
            "serialise → parse changed it:\n{config:?}\nvs\n{again:?}"
        ));
    }
    Ok(Verdict::Accepted)
}

#[test]
fn the_configuration_parser_survives_mutated_files() {
    let seeds = load_corpus(&corpus_dir("host-config"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    // The files the seeds refer to, so that mutants can validate.
    std::fs::write(dir.path().join("doctrine.md"), "Be brief.\n").expect("write");
    std::fs::write(dir.path().join("persona.json"), r#"{"mood":"calm"}"#).expect("write");
    let dictionary: &[&[u8]] = &[
        b"[[mind]]\nid = \"x\"\n",
        b"[backend]\n",
        b"[matrix]\n",
        b"[mind.matrix]\n",
        b" = ",
        b"\"\"\"",
        b"'''",
        b"inf",
        b"nan",
        b"1979-05-27T07:32:00Z",
        b"lease_ttl_ms = ",
        b"turn_limit = 4294967296\n",
        b"rooms = [\"#a\", \"#a\"]\n",
        b"policy = \"threshold:",
        b"= { file = \"",
        b"# comment\n",
        b"\\u0000",
    ];
    let dictionary: Vec<&[u8]> = dictionary.iter().chain(JSON_TOKENS).copied().collect();
    let report = fuzz(
        "host-config",
        &seeds,
        &dictionary,
        &FuzzConfig::from_env(16 * 1024),
        |bytes| check_config(dir.path(), bytes),
    );
    assert!(report.accepted > 0, "{report}");
}

/// A host on a fresh SQLite store with one Mind, serving the API on a loopback port.
struct Served {
    base: String,
    token: ApiToken,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn serve_one_mind() -> Served {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut config = Config::demo();
    config.data_dir = dir.path().to_owned();
    let store = muninn_store::open(&config.database_url())
        .await
        .expect("open the store");
    store
        .create_mind(&Mind {
            id: "vala".into(),
            display_name: "Vala".into(),
            config: serde_json::json!({}),
            created_at_ms: T0,
        })
        .await
        .expect("create a Mind");
    let host = Host::new(store, config, Arc::new(ManualClock::new(T0)));
    let token = ApiToken::load_or_create(&host.config.api_token_path()).expect("a token");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("an address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(host, token.clone(), listener, async {
        let _ = stopped.await;
    }));
    Served {
        base,
        token,
        _dir: dir,
        _stop: stop,
    }
}

/// Sends `body` and checks the answer against the route's wire type `T`.
async fn check_body<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    http: &reqwest::Client,
    served: &Served,
    method: reqwest::Method,
    path: &str,
    body: &[u8],
) -> Result<Verdict, String> {
    let response = http
        .request(method, format!("{}{path}", served.base))
        .bearer_auth(served.token.expose())
        .header("content-type", "application/json")
        .body(body.to_vec())
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let status = response.status();
    let answer = response
        .bytes()
        .await
        .map_err(|e| format!("a cut answer: {e}"))?;
    judge::<T>(status, &answer, body)
}

/// What `status` and `answer` must be for `body` sent to a route whose wire type is `T`.
fn judge<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    status: reqwest::StatusCode,
    answer: &[u8],
    body: &[u8],
) -> Result<Verdict, String> {
    let parsed = serde_json::from_slice::<T>(body);
    if let Ok(request) = &parsed {
        let round = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let again: T = serde_json::from_slice(&round).map_err(|e| e.to_string())?;
        if &again != request {
            return Err(format!(
                "serialise → parse changed {request:?} into {again:?}"
            ));
        }
    }
    if status.is_success() {
        if parsed.is_err() {
            return Err(format!("{status} for a body that is not the wire type"));
        }
        return Ok(Verdict::Accepted);
    }
    if !status.is_client_error() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(answer)));
    }
    match serde_json::from_slice::<ErrorResponse>(answer) {
        Ok(e) if !e.error.message.is_empty() => Ok(Verdict::Refused),
        _ => Err(format!(
            "{status} without the API's JSON error: {}",
            String::from_utf8_lossy(answer)
        )),
    }
}

/// Fuzzes one route's body; afterwards the host must still answer a valid request.
fn fuzz_route<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    target: &str,
    method: reqwest::Method,
    path: &str,
    dictionary: &[&[u8]],
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let served = runtime.block_on(serve_one_mind());
    muninn_anthropic::client::install_ring_provider();
    let http = reqwest::Client::new();
    let seeds = load_corpus(&corpus_dir(target));
    let dictionary: Vec<&[u8]> = dictionary.iter().chain(JSON_TOKENS).copied().collect();
    let report = fuzz(
        target,
        &seeds,
        &dictionary,
        &FuzzConfig::from_env(16 * 1024),
        |body| runtime.block_on(check_body::<T>(&http, &served, method.clone(), path, body)),
    );
    assert!(report.accepted > 0, "{report}");
    let after = runtime.block_on(check_body::<T>(&http, &served, method, path, &seeds[0]));
    assert!(
        matches!(after, Ok(Verdict::Accepted)),
        "the first seed after the run: {after:?}"
    );
}

#[test]
fn delivery_bodies() {
    fuzz_route::<PostDeliveryRequest>(
        "http-deliveries",
        reqwest::Method::POST,
        "/v1/minds/vala/deliveries",
        &[
            b"\"room\":",
            b"\"context\":[{\"sender\":\"a\",\"text\":\"b\"}]",
            b"\"is_direct\":",
            b"\"source_id\":\"",
            b"\"#",
            b"\"!",
            b"\"@",
            b"   ",
        ],
    );
    // The answer's own type round-trips too (it is what clients parse).
    let answer = PostDeliveryResponse {
        seq: i64::MAX,
        created: true,
    };
    let json = serde_json::to_string(&answer).expect("serialise");
    assert_eq!(
        serde_json::from_str::<PostDeliveryResponse>(&json).ok(),
        Some(answer)
    );
}

#[test]
fn brief_bodies() {
    fuzz_route::<PostBriefRequest>(
        "http-briefs",
        reqwest::Method::POST,
        "/v1/minds/vala/briefs",
        &[b"\"text\":", b"\"   \"", b"\"\\u0000\""],
    );
}

#[test]
fn settings_bodies() {
    fuzz_route::<PutSettingsRequest>(
        "http-settings",
        reqwest::Method::PUT,
        "/v1/minds/vala/settings",
        &[
            b"\"turn_limit\":",
            b"\"spend_cap_micro_usd\":",
            b"\"spend_window_ms\":",
            b"\"brake\":",
            b"-9223372036854775808",
            b"0",
        ],
    );
}

/// Odd but well-formed field values: blanks, every kind of room, escapes a terminal obeys, a NUL,
/// non-ASCII, and a long one.
fn odd_string(rng: &mut FuzzRng, input: &[u8]) -> String {
    let fixed = [
        "",
        " ",
        "\t\n",
        "#swarm",
        "#burn:example.org",
        "!abc:example.org",
        "@odin:example.org",
        "swarm",
        "Müninn 🐦",
        "\u{0}",
        "\u{1b}]0;title\u{7}\u{1b}[2J",
        "\u{202e}gnp.exe",
    ];
    match rng.below(fixed.len() + 2) {
        i if i < fixed.len() => fixed[i].to_string(),
        i if i == fixed.len() => "x".repeat(1 + rng.below(8 * 1024)),
        // The mutated seed itself, as text: whatever the mutations made of it.
        _ => String::from_utf8_lossy(&input[..input.len().min(2048)]).into_owned(),
    }
}

/// Structured deliveries — always the wire type, with odd values (generated from each mutated
/// input's hash): never a 5xx, a refusal is the API's JSON error, and intake is idempotent: a
/// delivery taken once is answered again with its first seq and `created: false`.
#[test]
fn structured_deliveries_are_idempotent_by_source_id() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let served = runtime.block_on(serve_one_mind());
    muninn_anthropic::client::install_ring_provider();
    let http = reqwest::Client::new();
    let seeds = load_corpus(&corpus_dir("http-deliveries"));
    let path = "/v1/minds/vala/deliveries";
    let report = fuzz(
        "http-deliveries-structured",
        &seeds,
        JSON_TOKENS,
        &FuzzConfig::from_env(16 * 1024),
        |input| {
            let mut rng = FuzzRng::new(fnv1a(input));
            let request = PostDeliveryRequest {
                room: odd_string(&mut rng, input),
                sender: odd_string(&mut rng, input),
                is_direct: rng.below(2) == 0,
                to_you: rng.below(2) == 0,
                text: odd_string(&mut rng, input),
                source_id: format!("{}-{:016x}", odd_string(&mut rng, input), fnv1a(input)),
                context: (0..rng.below(4))
                    .map(|_| ContextLine {
                        id: (rng.below(2) == 0).then(|| odd_string(&mut rng, input)),
                        sender: odd_string(&mut rng, input),
                        text: odd_string(&mut rng, input),
                    })
                    .collect(),
            };
            let body = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
            let post = || {
                runtime.block_on(async {
                    let response = http
                        .post(format!("{}{path}", served.base))
                        .bearer_auth(served.token.expose())
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .timeout(std::time::Duration::from_secs(10))
                        .send()
                        .await
                        .map_err(|e| format!("no answer: {e}"))?;
                    let status = response.status();
                    let answer = response.bytes().await.map_err(|e| e.to_string())?;
                    Ok::<_, String>((status, answer))
                })
            };
            let (status, answer) = post()?;
            if !status.is_success() {
                // The same checks as for any body: a 4xx with the API's JSON error.
                return judge::<PostDeliveryRequest>(status, &answer, &body);
            }
            let first: PostDeliveryResponse = serde_json::from_slice(&answer)
                .map_err(|e| format!("{status} with an answer that is not the wire type: {e}"))?;
            let (again_status, again) = post()?;
            let second: Option<PostDeliveryResponse> = serde_json::from_slice(&again).ok();
            if again_status != reqwest::StatusCode::OK
                || second
                    != Some(PostDeliveryResponse {
                        seq: first.seq,
                        created: false,
                    })
            {
                return Err(format!(
                    "posted twice: {status} {first:?}, then {again_status} {}",
                    String::from_utf8_lossy(&again)
                ));
            }
            Ok(Verdict::Accepted)
        },
    );
    assert!(report.accepted > 0, "{report}");
}
