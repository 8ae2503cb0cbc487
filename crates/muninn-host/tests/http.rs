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

trait JsonBody {
    async fn json_body<T: serde::de::DeserializeOwned>(self) -> T;
}
impl JsonBody for reqwest::Response {
    async fn json_body<T: serde::de::DeserializeOwned>(self) -> T {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
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

    // A mention with room history: both are stored with the delivery, lines in order.
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

    // Refusals, each in the API's error shape.
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

#[tokio::test]
async fn the_outbox_long_poll_wakes_when_a_message_is_recorded() {
    let server = Arc::new(Server::start().await);
    let token = server.lease("vala").await;
    // Nothing yet, no wait: an empty answer at once.
    let empty = server.client.outbox("vala", 0, 0).await.unwrap();
    assert_eq!(
        empty,
        OutboxResponse {
            messages: vec![],
            next_after: 0
        }
    );

    let poller = {
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = server.client.outbox("vala", 0, 30).await.unwrap();
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.enqueue("vala", token, "b1-0").await;
    let (answer, waited) = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.messages.len(), 1);
    assert_eq!(answer.messages[0].request_id, "b1-0");
    assert_eq!(answer.next_after, answer.messages[0].seq);
    // Woken by the signal, not by the periodic re-read (every 2 s) nor the 30 s deadline.
    assert!(waited < Duration::from_millis(1_500), "waited {waited:?}");

    // `after` skips what was seen.
    server.enqueue("vala", token, "b1-1").await;
    let next = server
        .client
        .outbox("vala", answer.next_after, 0)
        .await
        .unwrap();
    let ids: Vec<_> = next
        .messages
        .iter()
        .map(|m| m.request_id.as_str())
        .collect();
    assert_eq!(ids, ["b1-1"]);
}

#[tokio::test]
async fn the_outbox_stream_delivers_messages_as_server_sent_events() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    let mut response = reqwest::Client::new()
        .get(format!("{}/v1/minds/vala/outbox/stream", server.base))
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let mut enqueued_second = false;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !seen.contains("b1-1") {
            let chunk = response.chunk().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("b1-0") && !enqueued_second {
                enqueued_second = true;
                server.enqueue("vala", token, "b1-1").await;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("stream stalled; saw {seen:?}"));
    let events: Vec<OutboxMessage> = seen
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let ids: Vec<_> = events.iter().map(|m| m.request_id.as_str()).collect();
    assert_eq!(ids, ["b1-0", "b1-1"]);
    assert!(seen.contains("event: outbox"));
    assert!(seen.contains(&format!("id: {}", events[1].seq)));
}

use muninn_store::OutboxMessage;

#[tokio::test]
async fn ack_is_idempotent_and_removes_the_message_from_the_outbox() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    server.clock.advance(500);
    let acked = server.client.ack("vala", "b1-0").await.unwrap();
    assert_eq!(acked.acked_at_ms, Some(T0 + 500));
    assert_eq!(acked.sent_at_ms, Some(T0 + 500));
    server.clock.advance(500);
    let again = server.client.ack("vala", "b1-0").await.unwrap();
    assert_eq!(again, acked);
    assert!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .is_empty()
    );

    let error = server.client.ack("vala", "no-such").await.unwrap_err();
    assert_eq!(api_error(error), (404, "not_found".into()));
    // The ack is the transport's, not the runtime's: it needs no lease, so it lands while
    // the Mind is not running (a host restarting, the lease changing hands).
    server.enqueue("vala", token, "b1-1").await;
    server
        .host
        .store
        .release_lease("vala", token)
        .await
        .unwrap();
    server.clock.advance(500);
    let acked = server.client.ack("vala", "b1-1").await.unwrap();
    assert_eq!(acked.acked_at_ms, Some(T0 + 1_500));
    assert!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
}

#[tokio::test]
async fn operator_briefs_are_queued_for_the_self() {
    let server = Server::start().await;
    let brief = server
        .client
        .post_brief("vala", "tidy the wiki")
        .await
        .unwrap();
    assert_eq!(brief.seq, 1);
    assert_eq!(brief.origin, BriefOrigin::Operator);
    assert_eq!(brief.status, BriefStatus::Queued);
    assert_eq!(brief.created_at_ms, T0);
    assert!(woken(&server, "vala").is_some());
    assert!(woken(&server, "huginn").is_none());
    let queued = server.host.store.briefs("vala", None, 10).await.unwrap();
    assert_eq!(queued, vec![brief]);
    let error = server.client.post_brief("vala", "").await.unwrap_err();
    assert_eq!(api_error(error), (422, "unprocessable".into()));
}

#[tokio::test]
async fn status_shows_settings_lease_segments_and_spend() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    let segment = server
        .host
        .store
        .start_segment(
            "vala",
            token,
            &NewSegment {
                role: Role::Persona,
                started_at_ms: T0,
                rehydration_tokens: 4_000,
                reason: "cold start".into(),
                session_id: None,
                memory: None,
                spec_digest: None,
            },
        )
        .await
        .unwrap();
    server
        .host
        .store
        .append_ledger("vala", token, &[ledger_row("vala", T0, 1_234)])
        .await
        .unwrap();
    server.clock.advance(1_000);

    let status = server.client.mind("vala").await.unwrap();
    assert!(status.registered);
    assert!(status.lease_live);
    assert_eq!(status.lease.as_ref().unwrap().holder, "test-host");
    assert_eq!(status.segments.persona, Some(segment.clone()));
    assert_eq!(status.segments.self_role, None);
    assert_eq!(status.config.as_ref().unwrap()["id"], "vala");
    // The client reads the configuration as JSON; it is the host's typed `[[mind]]` entry.
    let config: muninn_host::config::MindConfig =
        serde_json::from_value(status.config.clone().unwrap()).unwrap();
    assert_eq!(Some(&config), server.host.config.mind("vala"));
    assert_eq!(status.display_name, "VALA");
    assert_eq!(
        status.spend,
        SpendSummary {
            window_ms: 86_400_000,
            from_ms: T0 + 1_000 - 86_400_000,
            to_ms: T0 + 1_000,
            spent_micro_usd: 1_234,
            cap_micro_usd: Some(5_000_000),
        }
    );
    assert_eq!(status.settings, Settings::default());

    let all = server.client.minds().await.unwrap();
    let ids: Vec<_> = all.minds.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["huginn", "vala"]);
    assert!(
        all.minds[0].config.is_none(),
        "huginn is stored but not configured"
    );

    let segments = server.client.segments("vala").await.unwrap();
    assert_eq!(segments.persona, vec![segment]);
    assert!(segments.self_role.is_empty());

    let error = server.client.mind("nobody").await.unwrap_err();
    assert_eq!(api_error(error), (404, "mind_not_found".into()));
}

#[tokio::test]
async fn the_transcript_pages_tails_and_long_polls() {
    let server = Arc::new(Server::start().await);
    let token = server.lease("vala").await;
    let item = |n: i64| NewTranscriptItem {
        role: Role::Persona,
        segment: 0,
        kind: TranscriptKind::Reply,
        body: serde_json::json!({"say": [{"room": "#swarm", "text": format!("line {n}")}]}),
        created_at_ms: T0 + n,
    };
    server
        .host
        .store
        .append_transcript("vala", token, &[item(1), item(2), item(3)])
        .await
        .unwrap();
    let query = |after, last, wait_s| TranscriptQuery {
        after,
        last,
        wait_s,
        ..TranscriptQuery::default()
    };
    let page = server
        .client
        .transcript("vala", Role::Persona, &query(Some(1), None, None))
        .await
        .unwrap();
    assert_eq!(page.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(page.next_after, 3);
    assert_eq!(page.items[0].kind, "reply");
    assert_eq!(page.items[0].body["say"][0]["text"], "line 2");
    let tail = server
        .client
        .transcript("vala", Role::Persona, &query(None, Some(1), None))
        .await
        .unwrap();
    assert_eq!(tail.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [3]);
    let other_role = server
        .client
        .transcript("vala", Role::SelfRole, &query(None, None, None))
        .await
        .unwrap();
    assert!(other_role.items.is_empty());

    let poller = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .client
                .transcript("vala", Role::Persona, &query(Some(3), None, Some(30)))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    server
        .host
        .store
        .append_transcript("vala", token, &[item(4)])
        .await
        .unwrap();
    server.host.signals.outbox.notify_waiters();
    let woken = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [4]);
}

#[tokio::test]
async fn the_ledger_exports_json_and_jsonl_that_parses_back() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    let rows = vec![
        ledger_row("vala", T0, 100),
        ledger_row("vala", T0 + 10_000, 200),
        ledger_row("vala", T0 + 20_000, 300),
    ];
    server
        .host
        .store
        .append_ledger("vala", token, &rows)
        .await
        .unwrap();

    let all = server
        .client
        .ledger_jsonl("vala", &LedgerParams::default())
        .await
        .unwrap();
    let parsed: Vec<LedgerRow> = all
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed, rows);

    let window = LedgerParams {
        from_ms: Some(T0 + 5_000),
        to_ms: Some(T0 + 20_000),
        ..LedgerParams::default()
    };
    let json = server.client.ledger("vala", &window).await.unwrap();
    assert_eq!(json.rows.len(), 1);
    assert_eq!(json.rows[0].row, rows[1]);
    let paged = server
        .client
        .ledger(
            "vala",
            &LedgerParams {
                after_id: Some(json.rows[0].id),
                limit: Some(5),
                ..LedgerParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        paged.rows.iter().map(|r| &r.row).collect::<Vec<_>>(),
        [&rows[2]]
    );

    let response = reqwest::Client::new()
        .get(format!("{}/v1/minds/vala/ledger?format=jsonl", server.base))
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
}

#[tokio::test]
async fn settings_round_trip_and_the_brake_reaches_every_mind() {
    let server = Server::start().await;
    assert_eq!(
        server.client.settings("vala").await.unwrap(),
        Settings::default()
    );
    let wanted = Settings {
        spend_cap_micro_usd: Some(2_000_000),
        spend_window_ms: Some(3_600_000),
        brake: false,
        turn_limit: Some(20),
    };
    assert_eq!(
        server.client.put_settings("vala", &wanted).await.unwrap(),
        wanted
    );
    assert_eq!(server.client.settings("vala").await.unwrap(), wanted);
    let status = server.client.mind("vala").await.unwrap();
    assert_eq!(status.spend.cap_micro_usd, Some(2_000_000));
    assert_eq!(status.spend.window_ms, 3_600_000);

    let invalid = Settings {
        spend_cap_micro_usd: Some(-1),
        ..Settings::default()
    };
    let error = server
        .client
        .put_settings("vala", &invalid)
        .await
        .unwrap_err();
    assert_eq!(api_error(error), (422, "unprocessable".into()));

    assert!(
        woken(&server, "vala").is_some(),
        "a settings change wakes its Mind"
    );
    assert!(woken(&server, "huginn").is_none());
    let on = server.client.brake(true).await.unwrap();
    for mind in ["vala", "huginn"] {
        assert!(woken(&server, mind).is_some(), "the brake wakes {mind}");
    }
    assert_eq!(
        on,
        BrakeResponse {
            brake: true,
            minds: vec!["huginn".into(), "vala".into()]
        }
    );
    for mind in ["vala", "huginn"] {
        assert!(server.host.store.settings(mind).await.unwrap().brake);
    }
    // The brake leaves the other settings alone.
    let braked = server.client.settings("vala").await.unwrap();
    assert_eq!(
        braked,
        Settings {
            brake: true,
            ..wanted.clone()
        }
    );
    let off = server.client.brake(false).await.unwrap();
    assert!(!off.brake);
    assert_eq!(server.client.settings("vala").await.unwrap(), wanted);
    assert!(!server.client.settings("huginn").await.unwrap().brake);
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_long_polls_instead_of_waiting_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::demo();
    config.data_dir = dir.path().to_owned();
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    store
        .create_mind(&Mind {
            id: "vala".into(),
            display_name: "Vala".into(),
            config: serde_json::json!({}),
            created_at_ms: T0,
        })
        .await
        .unwrap();
    let host = Host::new(store, config, Arc::new(ManualClock::new(T0)));
    let token = ApiToken::new("t0k3n");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(host, token.clone(), listener, async {
        let _ = stopped.await;
    }));
    let client = ApiClient::new(&addr.to_string(), token.clone()).unwrap();
    let mut stream = reqwest::Client::new()
        .get(format!("http://{addr}/v1/minds/vala/outbox/stream"))
        .bearer_auth(token.expose())
        .send()
        .await
        .unwrap();
    let poll = tokio::spawn(async move { client.outbox("vala", 0, 60).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server did not stop")
        .unwrap()
        .unwrap();
    let answer = poll.await.unwrap().unwrap();
    assert!(answer.messages.is_empty());
    // The stream ended cleanly (or its connection closed).
    while let Ok(Some(_)) = stream.chunk().await {}
}

#[tokio::test]
async fn the_brake_holds_back_sends_until_it_is_released() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    server.enqueue("vala", token, "b1-0").await;
    assert_eq!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
    server.client.brake(true).await.unwrap();
    assert!(
        server
            .client
            .outbox("vala", 0, 0)
            .await
            .unwrap()
            .messages
            .is_empty(),
        "no send while braked"
    );
    server.client.brake(false).await.unwrap();
    let released = server.client.outbox("vala", 0, 0).await.unwrap();
    assert_eq!(released.messages.len(), 1);
    assert_eq!(released.messages[0].request_id, "b1-0");
}

/// The checked-in OpenAPI document describes exactly the routes the router serves: the same
/// paths and methods as `muninn_host::http::ROUTES`, each of which the server answers (not its
/// "no such route" fallback), and no other method on those paths.
#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    use std::collections::BTreeSet;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../muninn-api/openapi.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let methods = ["GET", "POST", "PUT", "DELETE"];
    let mut documented = BTreeSet::new();
    for (route, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), route.clone()));
        }
    }
    let served: BTreeSet<_> = muninn_host::http::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, served);
    // Every referenced schema exists.
    let text = doc.to_string();
    for reference in text.split("\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(doc["components"]["schemas"][name].is_object(), "{name}");
    }

    let s = Server::start().await;
    let http = reqwest::Client::new();
    let paths: BTreeSet<&str> = served.iter().map(|(_, p)| p.as_str()).collect();
    for route in paths {
        let url = format!(
            "{}{}",
            s.base,
            route
                .replace("{mind}", "vala")
                .replace("{request_id}", "no-such-request")
        );
        for method in methods {
            let response = http
                .request(method.parse().unwrap(), &url)
                .bearer_auth(s.token.expose())
                .header("content-type", "application/json")
                .body("{}")
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let listed = served.contains(&(method.to_string(), route.to_string()));
            let body = if route.ends_with("/stream") && listed {
                String::new()
            } else {
                response.text().await.unwrap_or_default()
            };
            if listed {
                assert!(
                    status != 405 && !body.contains("no such route"),
                    "{method} {route}: {status} {body}"
                );
            } else {
                assert_eq!(
                    status, 405,
                    "{method} {route} is served but not documented: {body}"
                );
            }
        }
    }
}

/// A Mind's status as served carries exactly the fields the OpenAPI document lists for it (and
/// every required one), with a failed send and a failing transport present, so a field added to
/// the wire type without the document — or the reverse — fails here.
#[tokio::test]
async fn a_minds_status_has_the_fields_the_openapi_document_lists() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../muninn-api/openapi.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let schema = |name: &str| doc["components"]["schemas"][name].clone();
    let s = Server::start().await;
    let token = s.lease("vala").await;
    s.enqueue("vala", token, "f1-0").await;
    s.host
        .store
        .fail_outbox(
            "vala",
            "f1-0",
            "M_FORBIDDEN: not in the room",
            s.clock.now(),
        )
        .await
        .unwrap();
    s.host.telemetry.transport(
        "vala",
        "matrix",
        muninn_api::wire::TransportState::Failing {
            stage: "sync".into(),
            error: "connection refused".into(),
            failures: 1,
        },
        s.clock.now(),
    );
    let body = reqwest::Client::new()
        .get(format!("{}/v1/minds/vala", s.base))
        .bearer_auth(s.token.expose())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    let check = |value: &serde_json::Value, name: &str| {
        let schema = schema(name);
        let listed = schema["properties"].as_object().unwrap();
        let object = value.as_object().unwrap();
        for key in object.keys() {
            assert!(
                listed.contains_key(key),
                "{name}.{key} is served but not documented"
            );
        }
        for required in schema["required"].as_array().unwrap() {
            let required = required.as_str().unwrap();
            assert!(
                object.contains_key(required),
                "{name}.{required} is required but not served"
            );
        }
    };
    check(&served, "MindStatus");
    let failed = &served["failed_sends"][0];
    assert_eq!(
        failed["failure"], "M_FORBIDDEN: not in the room",
        "{served}"
    );
    check(failed, "OutboxMessage");
    assert_eq!(served["transport"]["state"], "failing", "{served}");
    check(&served["transport"], "TransportStatus");
}
