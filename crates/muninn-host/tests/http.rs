//! The HTTP API against a real SQLite store in a temporary directory, served on an ephemeral
//! loopback port, called through the crate's own client (and raw reqwest where the wire itself
//! is the point: auth, SSE, JSON Lines).

use futures_util::FutureExt;
use muninn_api::ApiToken;
use muninn_api::client::{ApiClient, ClientError};
use muninn_api::wire::*;
use muninn_backend::clock::ManualClock;
use muninn_core::ledger::{LedgerRow, MissCause};
use muninn_core::money::MicroUsd;
use muninn_core::trace::Usage;
use muninn_host::Host;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_store::{
    BriefOrigin, BriefStatus, FencingToken, Mind, NewOutboxMessage, NewSegment, NewTranscriptItem,
    Role, TranscriptKind,
};
use pretty_assertions::assert_eq;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T0: i64 = 1_750_000_000_000;

struct Server {
    host: Host,
    clock: Arc<ManualClock>,
    client: ApiClient,
    token: ApiToken,
    base: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::demo();
        config.data_dir = dir.path().to_owned();
        let store = muninn_store::open(&config.database_url()).await.unwrap();
        for id in ["vala", "huginn"] {
            store
                .create_mind(&Mind {
                    id: id.into(),
                    display_name: id.to_uppercase(),
                    config: serde_json::json!({}),
                    created_at_ms: T0,
                })
                .await
                .unwrap();
        }
        let clock = Arc::new(ManualClock::new(T0));
        let host = Host::new(store, config, clock.clone());
        let token = ApiToken::load_or_create(&host.config.api_token_path()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(host.clone(), token.clone(), listener, async {
            let _ = stopped.await;
        }));
        Server {
            client: ApiClient::new(&addr.to_string(), token.clone()).unwrap(),
            base: format!("http://{addr}"),
            host,
            clock,
            token,
            _dir: dir,
            _stop: stop,
        }
    }

    async fn lease(&self, mind: &str) -> FencingToken {
        let lease = self
            .host
            .store
            .acquire_lease(mind, "test-host", 60_000, self.clock.now())
            .await
            .unwrap()
            .unwrap();
        lease.token
    }

    async fn enqueue(&self, mind: &str, token: FencingToken, request_id: &str) {
        self.host
            .store
            .enqueue_outbox(
                mind,
                token,
                &[NewOutboxMessage {
                    request_id: request_id.into(),
                    room: "#swarm".into(),
                    text: format!("reply {request_id}"),
                    created_at_ms: self.clock.now(),
                }],
            )
            .await
            .unwrap();
        // What the runtime does after it records outbox messages.
        self.host.signals.outbox.notify_waiters();
    }
}

trait Now {
    fn now(&self) -> i64;
}
impl Now for ManualClock {
    fn now(&self) -> i64 {
        muninn_backend::clock::Clock::now_ms(self)
    }
}

/// Whether `mind`'s runner has a wake-up waiting (taking it).
fn woken(server: &Server, mind: &str) -> Option<()> {
    server.host.signals.waiter(mind).notified().now_or_never()
}

fn delivery(source_id: &str) -> PostDeliveryRequest {
    PostDeliveryRequest {
        room: "#swarm".into(),
        sender: "@ada:example.org".into(),
        is_direct: false,
        to_you: false,
        text: "hello, Vala".into(),
        source_id: source_id.into(),
        context: Vec::new(),
    }
}

fn api_error(error: ClientError) -> (u16, String) {
    match error {
        ClientError::Api { status, kind, .. } => (status, kind),
        other => panic!("not an API error: {other}"),
    }
}

fn ledger_row(mind: &str, at_ms: i64, cost: i64) -> LedgerRow {
    LedgerRow {
        mind: mind.into(),
        role: "persona".into(),
        segment: 0,
        turn: 1,
        at_ms,
        idle_gap_ms: 0,
        model: "claude-opus-5-5".into(),
        prefix_tokens: 4_000,
        rehydration_tokens: 4_000,
        usage: Usage {
            input: 10,
            cache_write_5m: 0,
            cache_write_1h: 4_000,
            cache_read: 0,
            output: 120,
        },
        raw_usage: Some(serde_json::json!({"input_tokens": 10, "output_tokens": 120})),
        cost: MicroUsd(cost),
        predicted_read: 0,
        predicted_write: 4_000,
        cache_state: "cold".into(),
        miss_cause: Some(MissCause::ColdStart),
        decision: "append".into(),
        boundary: true,
        events: Vec::new(),
        decided: None,
        provider_miss: None,
    }
}

#[tokio::test]
async fn the_token_is_created_once_private_and_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data/api-token");
    let token = ApiToken::load_or_create(&path).unwrap();
    assert_eq!(token.expose().len(), 64);
    assert!(token.expose().bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(ApiToken::load_or_create(&path).unwrap(), token);
    assert_eq!(ApiToken::read(&path).unwrap(), token);
    assert!(!format!("{token:?}").contains(token.expose()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    std::fs::write(&path, "\n").unwrap();
    let error = ApiToken::read(&path).unwrap_err();
    assert!(error.to_string().contains("api-token"), "{error}");
}

#[tokio::test]
async fn every_route_requires_the_token() {
    let server = Server::start().await;
    let http = reqwest::Client::new();
    let cases = [
        (reqwest::Method::GET, "/v1/minds", None),
        (reqwest::Method::GET, "/v1/minds/vala", None),
        (
            reqwest::Method::POST,
            "/v1/minds/vala/deliveries",
            Some("{}"),
        ),
        (reqwest::Method::GET, "/v1/minds/vala/outbox", None),
        (reqwest::Method::POST, "/v1/brake", None),
        (reqwest::Method::GET, "/no/such/route", None),
    ];
    for (method, path, body) in cases {
        for auth in [None, Some("Bearer wrong"), Some("Basic abc")] {
            let mut request = http.request(method.clone(), format!("{}{path}", server.base));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            if let Some(body) = body {
                request = request
                    .header("content-type", "application/json")
                    .body(body);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {auth:?}");
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            let text = response.text().await.unwrap();
            assert!(!text.contains(server.token.expose()));
            let body: ErrorResponse = serde_json::from_str(&text).unwrap();
            assert_eq!(body.error.kind, "unauthorized", "{text}");
        }
    }
    // With the token, an unknown route is a 404 in the same error shape.
    let response = http
        .get(format!("{}/no/such/route", server.base))
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: ErrorResponse = response.json_body().await;
    assert_eq!(body.error.kind, "not_found");
    // And the client reports a wrong token as an API error without echoing either token.
    let wrong = ApiClient::new(&server.base, ApiToken::new("not-the-token")).unwrap();
    let error = wrong.minds().await.unwrap_err();
    let text = error.to_string();
    assert!(!text.contains("not-the-token") && !text.contains(server.token.expose()));
    assert_eq!(api_error(error), (401, "unauthorized".into()));
}

/// The scheme of `Authorization` is case-insensitive (RFC 9110, 11.1): `bearer` and
/// `BEARER` with the token are let in as `Bearer` is, and a wrong token with either is still
/// refused as a wrong token, not as a missing one.
#[tokio::test]
async fn the_bearer_scheme_is_matched_in_any_case() {
    let server = Server::start().await;
    let http = reqwest::Client::new();
    let get = |auth: String| {
        http.get(format!("{}/v1/minds", server.base))
            .header("authorization", auth)
            .send()
    };
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let response = get(format!("{scheme} {}", server.token.expose()))
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{scheme}");
        let response = get(format!("{scheme} wrong")).await.unwrap();
        assert_eq!(response.status(), 401, "{scheme}");
        let body: ErrorResponse = response.json_body().await;
        assert_eq!(body.error.message, "invalid bearer token", "{scheme}");
    }
}

trait JsonBody {
    async fn json_body<T: serde::de::DeserializeOwned>(self) -> T;
}
impl JsonBody for reqwest::Response {
    async fn json_body<T: serde::de::DeserializeOwned>(self) -> T {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}

/// A source id with a NUL (U+0000) in it is refused: the store drops NUL from every text it
/// keeps (PostgreSQL cannot hold one), so `$ev\u{0}1` was kept as `$ev1`, and another event whose
/// id really is `$ev1` was then answered as a repeat of it (`created: false`) and lost.
#[tokio::test]
async fn a_source_id_with_a_nul_is_refused_not_taken_for_another() {
    let server = Server::start().await;
    let error = server
        .client
        .post_delivery("vala", &delivery("$ev\u{0}1"))
        .await
        .unwrap_err();
    assert_eq!(api_error(error), (422, "unprocessable".to_owned()));
    let other = server
        .client
        .post_delivery("vala", &delivery("$ev1"))
        .await
        .unwrap();
    assert_eq!(
        other,
        PostDeliveryResponse {
            seq: 1,
            created: true
        }
    );
}

#[tokio::test]
async fn deliveries_are_idempotent_by_source_id_and_wake_the_runtime() {
    let server = Server::start().await;
    let first = server
        .client
        .post_delivery("vala", &delivery("ev-1"))
        .await
        .unwrap();
    assert_eq!(
        first,
        PostDeliveryResponse {
            seq: 1,
            created: true
        }
    );
    // The Mind's own wake-up was stored as a permit: it completes at once; the other Mind's
    // runner was not woken.
    tokio::time::timeout(
        Duration::from_secs(1),
        server.host.signals.waiter("vala").notified(),
    )
    .await
    .unwrap();
    assert!(woken(&server, "huginn").is_none());
    let again = server
        .client
        .post_delivery("vala", &delivery("ev-1"))
        .await
        .unwrap();
    assert_eq!(
        again,
        PostDeliveryResponse {
            seq: 1,
            created: false
        }
    );
    let second = server
        .client
        .post_delivery("vala", &delivery("ev-2"))
        .await
        .unwrap();
    assert_eq!(
        second,
        PostDeliveryResponse {
            seq: 2,
            created: true
        }
    );

    let stored = server
        .host
        .store
        .pending_deliveries("vala", 0, 10)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(
        stored[0],
        muninn_store::Delivery {
            mind: "vala".into(),
            seq: 1,
            room: "#swarm".into(),
            sender: "@ada:example.org".into(),
            is_direct: false,
            to_you: false,
            text: "hello, Vala".into(),
            source_id: "ev-1".into(),
            received_at_ms: T0,
            context: Vec::new(),
        }
    );

    assert_a_mentions_room_history_is_stored_in_order(&server).await;
    assert_refusals_in_the_api_error_shape(&server).await;
}

/// A mention with room history: both are stored with the delivery, lines in order.
async fn assert_a_mentions_room_history_is_stored_in_order(server: &Server) {
    let mut with_context = delivery("ev-3");
    with_context.to_you = true;
    with_context.context = vec![
        ContextLine {
            id: Some("$ev-0".into()),
            sender: "@bo:example.org".into(),
            text: "earlier".into(),
        },
        ContextLine {
            id: None,
            sender: "@cy:example.org".into(),
            text: "just before".into(),
        },
    ];
    let third = server
        .client
        .post_delivery("vala", &with_context)
        .await
        .unwrap();
    assert_eq!(third.seq, 3);
    let stored = server
        .host
        .store
        .pending_deliveries("vala", 2, 10)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert!(stored[0].to_you);
    assert_eq!(
        stored[0].context,
        vec![
            muninn_store::ContextLine {
                id: Some("$ev-0".into()),
                sender: "@bo:example.org".into(),
                text: "earlier".into(),
            },
            muninn_store::ContextLine {
                id: None,
                sender: "@cy:example.org".into(),
                text: "just before".into(),
            },
        ]
    );
}

/// Refusals (a bad room, an empty text, an unknown Mind, an unknown field), each in the API's
/// error shape.
async fn assert_refusals_in_the_api_error_shape(server: &Server) {
    let mut bad_room = delivery("ev-4");
    bad_room.room = "swarm".into();
    let mut empty_text = delivery("ev-4");
    empty_text.text = " ".into();
    for request in [bad_room, empty_text] {
        let error = server
            .client
            .post_delivery("vala", &request)
            .await
            .unwrap_err();
        assert_eq!(api_error(error), (422, "unprocessable".into()));
    }
    let error = server
        .client
        .post_delivery("nobody", &delivery("ev-4"))
        .await
        .unwrap_err();
    assert_eq!(api_error(error), (404, "mind_not_found".into()));
    let response = reqwest::Client::new()
        .post(format!("{}/v1/minds/vala/deliveries", server.base))
        .bearer_auth(server.token.expose())
        .header("content-type", "application/json")
        .body(r##"{"room":"#swarm","sender":"a","text":"t","source_id":"x","colour":"red"}"##)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: ErrorResponse = response.json_body().await;
    assert_eq!(body.error.kind, "invalid_request");
    assert!(
        body.error.message.contains("colour"),
        "{}",
        body.error.message
    );
}

mod openapi;
mod operator;
mod outbox;
