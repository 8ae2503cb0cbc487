//! The client against a server that answers without end: over a real socket, a reply body
//! (whole, streamed, or an error's) is read only up to its limit, and the request fails saying so;
//! one that trickles is read only until the attempt's deadline.

use muninn_anthropic::backend::{AnthropicBackend, ContextTools};
use muninn_anthropic::client::{
    ATTEMPT_BUDGET_FLOOR, AnthropicClient, ClientConfig, MAX_RESPONSE_BYTES, attempt_budget,
};
use muninn_anthropic::secret::ApiKey;
use muninn_anthropic::wire::MessagesRequest;
use muninn_backend::{Backend, BackendError, SessionSpec, TurnEvent, TurnInput};
use muninn_core::cache::Ttl;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server sends after the status line and headers: `body_head` once, then `pad`
/// repeated until `total` bytes are sent or the client hangs up.
struct Endless {
    status: &'static str,
    content_type: &'static str,
    /// Further header lines, each ending in `\r\n`.
    headers: &'static str,
    body_head: String,
    pad: Vec<u8>,
    total: usize,
    /// A pause before each `pad` (none: as fast as the socket takes it).
    every: Option<Duration>,
}

/// Serves one request with `reply`; returns the base URL and the count of body bytes the
/// server managed to send.
async fn serve(reply: Endless) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        if !read_request(&mut socket).await {
            return;
        }
        let head = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n{}\r\n{}",
            reply.status, reply.content_type, reply.total, reply.headers, reply.body_head
        );
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let mut body_sent = reply.body_head.len();
        while body_sent < reply.total {
            if let Some(pause) = reply.every {
                tokio::time::sleep(pause).await;
            }
            let n = reply.pad.len().min(reply.total - body_sent);
            if socket.write_all(&reply.pad[..n]).await.is_err() {
                break;
            }
            body_sent += n;
            counter.store(body_sent, Ordering::SeqCst);
        }
    });
    (format!("http://{addr}"), sent)
}

/// Reads one request from `socket`: its headers, then as many body bytes as its
/// content-length says. False when the client hung up first.
async fn read_request(socket: &mut tokio::net::TcpStream) -> bool {
    let mut request = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let Ok(n) = socket.read(&mut buf).await else {
            return false;
        };
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).to_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if request.len() >= end + 4 + length {
                return true;
            }
        }
        if n == 0 {
            return false;
        }
    }
}

fn client(base_url: String, attempt_timeout: Option<Duration>) -> AnthropicClient {
    let mut config = ClientConfig::new(base_url, ApiKey::new("sk-test-endless").unwrap());
    config.retry.max_retries = 0;
    config.read_timeout = Duration::from_secs(2);
    config.attempt_timeout = attempt_timeout;
    AnthropicClient::new(
        config,
        Arc::new(muninn_backend::clock::RecordingSleeper::default()),
    )
    .unwrap()
}

fn request(stream: bool) -> MessagesRequest {
    serde_json::from_value(serde_json::json!({
        "model": "claude-opus-5-5",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
    }))
    .unwrap()
}

/// Four times the limit: a client that reads it all holds it all.
const SENT: usize = 4 * MAX_RESPONSE_BYTES;
/// What the kernel's socket buffers may have taken beyond what the client read.
const SLACK: usize = 16 * 1024 * 1024;

async fn send(reply: Endless, stream: bool) -> (BackendError, usize) {
    send_within(reply, stream, None).await
}

/// [`send`] with each attempt bounded by `attempt_timeout` (`None`: the default budget).
async fn send_within(
    reply: Endless,
    stream: bool,
    attempt_timeout: Option<Duration>,
) -> (BackendError, usize) {
    let (url, sent) = serve(reply).await;
    let failed = tokio::time::timeout(
        Duration::from_secs(60),
        client(url, attempt_timeout).messages(&request(stream), false),
    )
    .await
    .expect("the request never ended")
    .unwrap_err();
    // Give the server a moment to notice the hang-up.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // With no retries allowed, a retryable failure comes back as the one attempt's error.
    let error = match failed.error {
        BackendError::RetriesExhausted { attempts: 1, last } => *last,
        other => other,
    };
    (error, sent.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_reply_past_the_limit_is_refused_unread() {
    let reply = Endless {
        status: "200 OK",
        content_type: "application/json",
        headers: "",
        body_head: r#"{"pad":""#.to_string(),
        pad: vec![b'x'; 1 << 20],
        total: SENT,
        every: None,
    };
    let (error, sent) = send(reply, false).await;
    assert!(error.to_string().contains("passed the limit"), "{error:?}");
    assert!(
        sent <= MAX_RESPONSE_BYTES + SLACK,
        "the server sent {sent} bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_past_the_limit_is_refused_unread() {
    let start = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",",
        "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-5-5\",\"content\":[],",
        "\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,",
        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    let delta = format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}}\n\n",
        "y".repeat(4000)
    );
    let reply = Endless {
        status: "200 OK",
        content_type: "text/event-stream",
        headers: "",
        body_head: start.to_string(),
        pad: delta.repeat(64).into_bytes(),
        total: SENT,
        every: None,
    };
    let (error, sent) = send(reply, true).await;
    assert!(
        matches!(&error, BackendError::BrokenAfterContent(e) if e.to_string().contains("passed the limit")),
        "{error:?}"
    );
    assert!(
        sent <= MAX_RESPONSE_BYTES + SLACK,
        "the server sent {sent} bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reply_is_read_only_as_far_as_its_message_needs() {
    let reply = Endless {
        status: "500 Internal Server Error",
        content_type: "text/html",
        headers: "",
        body_head: "<html>upstream failed".to_string(),
        pad: vec![b'z'; 1 << 20],
        total: SENT,
        every: None,
    };
    let (error, sent) = send(reply, false).await;
    let BackendError::Api {
        status,
        kind,
        message,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!((*status, kind.as_str()), (500, "http_500"));
    assert!(message.starts_with("<html>upstream failed"), "{message}");
    assert!(sent <= SLACK, "the server sent {sent} bytes");
}

/// A `retry-after` past what a `Duration` holds is no hint (it panicked the client, taking the
/// Mind's task with it); one whose milliseconds pass `u64` is the longest wait, not a wrapped
/// number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_retry_after_is_no_hint_and_a_huge_one_saturates() {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let limited = |headers: &'static str| Endless {
        status: "429 Too Many Requests",
        content_type: "application/json",
        headers,
        body_head: body.to_string(),
        pad: Vec::new(),
        total: body.len(),
        every: None,
    };
    let retry_after = |error: &BackendError| match error {
        BackendError::Api {
            status: 429,
            retry_after_ms,
            ..
        } => *retry_after_ms,
        other => panic!("{other:?}"),
    };
    let (absurd, _) = send(limited("retry-after: 1e300\r\n"), false).await;
    assert_eq!(retry_after(&absurd), None);
    let (huge, _) = send(limited("retry-after: 1e17\r\n"), false).await;
    assert_eq!(retry_after(&huge), Some(u64::MAX));
    let (plain, _) = send(limited("retry-after: 2.5\r\n"), false).await;
    assert_eq!(retry_after(&plain), Some(2_500));
}

/// A stream that sends nothing but `ping`s after its start is silent, however busy the socket:
/// it fails at the read timeout (before any content, so it may be retried) instead of holding
/// the turn for as long as the server keeps pinging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_pings_alone_times_out() {
    let start = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",",
        "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-5-5\",\"content\":[],",
        "\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
    );
    let ping = b"event: ping\ndata: {\"type\": \"ping\"}\n\n".to_vec();
    let reply = Endless {
        status: "200 OK",
        content_type: "text/event-stream",
        headers: "",
        body_head: start.to_string(),
        total: start.len() + ping.len() * 1_000,
        pad: ping,
        every: Some(Duration::from_millis(200)),
    };
    let started = std::time::Instant::now();
    let (error, _) = send(reply, true).await;
    assert!(
        matches!(&error, BackendError::Transport(m) if m.contains("no event but ping")),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// The start of a streamed reply: `message_start` and an empty text block.
const STREAM_START: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",",
    "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-5-5\",\"content\":[],",
    "\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,",
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
);

/// A stream that trickles real events — a one-character `text_delta` every 100 ms, well inside
/// the 2 s silence bound — is cut at the attempt's deadline (1.5 s), not read for as long as the
/// server keeps trickling (here 1,000 deltas, 100 s). Content had begun, so it is not re-sent:
/// `BrokenAfterContent`, as a stream cut mid-content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_trickles_real_events_is_cut_at_the_attempt_deadline() {
    let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"y\"}}\n\n";
    let reply = Endless {
        status: "200 OK",
        content_type: "text/event-stream",
        headers: "",
        body_head: STREAM_START.to_string(),
        total: STREAM_START.len() + delta.len() * 1_000,
        pad: delta.as_bytes().to_vec(),
        every: Some(Duration::from_millis(100)),
    };
    let started = std::time::Instant::now();
    let (error, sent) = send_within(reply, true, Some(Duration::from_millis(1_500))).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(&error, BackendError::BrokenAfterContent(e)
            if matches!(&**e, BackendError::Transport(m) if m.contains("deadline of 1.5s"))),
        "{error:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(sent < STREAM_START.len() + delta.len() * 100, "{sent}");
}

/// A whole (non-streaming) reply whose bytes trickle in — one every 100 ms — fails at the
/// attempt's deadline as a transport failure, retryable (no content was handed on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_reply_that_trickles_is_cut_at_the_attempt_deadline() {
    let reply = Endless {
        status: "200 OK",
        content_type: "application/json",
        headers: "",
        body_head: r#"{"pad":""#.to_string(),
        pad: vec![b'x'],
        total: 10_000,
        every: Some(Duration::from_millis(100)),
    };
    let started = std::time::Instant::now();
    let (error, _) = send_within(reply, false, Some(Duration::from_millis(1_500))).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(&error, BackendError::Transport(m) if m.contains("deadline of 1.5s")),
        "{error:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

/// The default budget is the SDKs' estimate of the longest real answer of `max_tokens`
/// (128,000 tokens an hour), never under their 10 minutes.
#[test]
fn the_default_attempt_budget_follows_max_tokens_from_ten_minutes() {
    let secs = |tokens| attempt_budget(tokens).as_secs();
    assert_eq!(ATTEMPT_BUDGET_FLOOR, Duration::from_secs(600));
    assert_eq!(
        [0, 1, 21_333, 32_000, 64_000, 128_000].map(secs),
        [600, 600, 600, 900, 1_800, 3_600]
    );
    assert!(attempt_budget(u64::MAX) > Duration::from_secs(3_600));
}

/// A server that reads each request whole and hangs up without a status; returns the base URL
/// and the count of requests it read.
async fn hang_up_after_reading() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let counter = read.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            read_request(&mut socket).await;
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (format!("http://{addr}"), read)
}

/// A whole (non-streaming) request whose connection dies after the request went and before a
/// status came may have been answered and billed: it is reported billed and not resent. A
/// stream, whose status comes before the work, is resent; and a request whose connection was
/// never made (nothing listening) is retried as unbilled.
#[tokio::test]
async fn a_whole_request_lost_before_its_status_is_not_resent_a_refused_connection_is() {
    let retrying = |url: String| {
        let mut config = ClientConfig::new(url, ApiKey::new("sk-test-lost").unwrap());
        config.retry.max_retries = 2;
        AnthropicClient::new(
            config,
            Arc::new(muninn_backend::clock::RecordingSleeper::default()),
        )
        .unwrap()
    };
    for (stream, reads, billed) in [(false, 1, 1), (true, 3, 0)] {
        let (url, read) = hang_up_after_reading().await;
        let failed = retrying(url)
            .messages(&request(stream), false)
            .await
            .unwrap_err();
        assert_eq!(
            (read.load(Ordering::SeqCst), failed.billed.len()),
            (reads, billed),
            "stream {stream}: {failed:?}"
        );
    }
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let failed = retrying(url)
        .messages(&request(false), false)
        .await
        .unwrap_err();
    assert!(
        matches!(
            failed.error,
            BackendError::RetriesExhausted { attempts: 3, .. }
        ) && failed.billed.is_empty(),
        "{failed:?}"
    );
}

/// A server that answers its n-th connection with `replies[n]`, a raw HTTP response sent as it
/// is, then hangs up: a reply shorter than its `content-length` is a connection cut mid-body.
async fn answer_in_turn(replies: Vec<String>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for reply in replies {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            if read_request(&mut socket).await {
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        }
    });
    format!("http://{addr}")
}

/// A `200` stream with `request-id`, `body` its events; `cut` declares more bytes than it
/// sends, so the connection ends mid-body.
fn stream_reply(request_id: &str, events: &[&str], cut: bool) -> String {
    let body: String = events
        .iter()
        .map(|data| {
            let kind = serde_json::from_str::<serde_json::Value>(data).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string();
            format!("event: {kind}\ndata: {data}\n\n")
        })
        .collect();
    let length = body.len() + if cut { 4_096 } else { 0 };
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: {request_id}\r\n\
         connection: close\r\ncontent-length: {length}\r\n\r\n{body}"
    )
}

/// The events of a whole streamed answer saying `text`, with `usage` on its `message_start`.
fn answered(text: &str, usage: &str) -> Vec<String> {
    vec![
        format!(
            r#"{{"type":"message_start","message":{{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-5-5","content":[],"stop_reason":null,"usage":{usage}}}}}"#
        ),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
            .to_string(),
        format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}}}"#
        ),
        r#"{"type":"content_block_stop","index":0}"#.to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#
            .to_string(),
        r#"{"type":"message_stop"}"#.to_string(),
    ]
}

/// A stream cut after its `200` and its `request-id`, before `message_start` (nothing billed),
/// is retried, and the retry's record names the request id of the attempt it retried, as a
/// refused attempt's does: the id a user quotes to the provider. Before, a transport failure's
/// retry had none (`request_id: None`), though the provider had given one.
#[tokio::test]
async fn a_retried_transport_failure_names_its_request_id() {
    let ping = r#"{"type":"ping"}"#;
    let whole = answered("hi", r#"{"input_tokens":5,"output_tokens":1}"#);
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let url = answer_in_turn(vec![
        stream_reply("req_cut_1", &[ping], true),
        stream_reply("req_ok_2", &whole, false),
    ])
    .await;
    let mut config = ClientConfig::new(url, ApiKey::new("sk-test-cut").unwrap());
    config.retry.max_retries = 1;
    let client = AnthropicClient::new(
        config,
        Arc::new(muninn_backend::clock::RecordingSleeper::default()),
    )
    .unwrap();
    let done = client.messages(&request(true), false).await.unwrap();
    assert_eq!(done.request_id.as_deref(), Some("req_ok_2"));
    let retried: Vec<(String, Option<String>)> = done
        .retries
        .iter()
        .map(|r| (r.kind.clone(), r.request_id.clone()))
        .collect();
    assert_eq!(
        retried,
        [("transport".to_string(), Some("req_cut_1".to_string()))]
    );
}

/// A streamed on-demand compaction cut mid-summary, before `message_delta`: its
/// `message_start` says 0 at the top level (a compaction's pass is reported in
/// `usage.iterations[]`, which here never came) and its summary had begun. What the attempt is
/// ledgered at is the cache model's prediction for the prompt and the summary received for the
/// output, and its error says both are estimates. Before, it was ledgered at 0 tokens in all,
/// read as the provider's own numbers.
#[tokio::test]
async fn a_compaction_cut_before_its_usage_is_ledgered_as_estimated() {
    let summary = "<summary>the mill by the river, and the crows on the bridge</summary>";
    let first = answered("hi", r#"{"input_tokens":400,"output_tokens":1}"#);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let start = r#"{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"claude-opus-5-5","content":[],"stop_reason":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}"#;
    let block = r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null,"signature":"sig"}}"#;
    let delta = format!(
        r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"compaction_delta","content":"{summary}"}}}}"#
    );
    let url = answer_in_turn(vec![
        stream_reply("req_1", &first, false),
        stream_reply("req_2", &[start, block, &delta], true),
    ])
    .await;
    let mut backend = compacting_after_hello(url, "You are Vala.", Ttl::FiveMinutes).await;
    backend.compact("summarise").await.unwrap_err();
    let failed = backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let predicted = failed[0].predicted.unwrap();
    let received = muninn_core::tokenize::count(summary);
    assert_eq!(
        (failed[0].usage.prompt(), failed[0].usage.output),
        (predicted.prompt(), received),
        "{failed:?}"
    );
    assert!(predicted.prompt() > 0, "{predicted:?}");
    assert_eq!(failed[0].request_id.as_deref(), Some("req_2"));
    for estimated in [
        "input and cache counted at the cache model's prediction",
        "output counted from the content received",
    ] {
        assert!(failed[0].error.contains(estimated), "{}", failed[0].error);
    }
}

/// A backend on the client for `url` that compacts on the server, its session (on `system`,
/// every breakpoint at `ttl`) started and its first turn, "hello", answered.
async fn compacting_after_hello(
    url: String,
    system: &str,
    ttl: Ttl,
) -> AnthropicBackend<AnthropicClient> {
    let mut backend = AnthropicBackend::new(
        client(url, None),
        Arc::new(muninn_backend::clock::ManualClock::new(1_800_000_000_000)),
        muninn_core::price::PriceTable::embedded(),
    )
    .with_context_tools(ContextTools {
        server_compaction: true,
        ..ContextTools::default()
    });
    backend
        .start(SessionSpec {
            model: "claude-opus-5-5".to_string(),
            system: vec![system.to_string()],
            tools: Vec::new(),
            output_schema: None,
            system_ttl: ttl,
            conversation_ttl: ttl,
            max_tokens: 1_000,
        })
        .await
        .unwrap();
    backend.turn(TurnInput::text("hello")).await.unwrap();
    backend
}

/// A streamed compaction cut mid-summary, after a `message_start` that said its pass's prompt
/// in `usage.iterations[]` without a TTL split of its writes: the attempt's writes are priced
/// at the request's breakpoints, as an answered compaction's are — all 1-hour under 1-hour
/// breakpoints. Before, the client's count (every unsplit write a 5-minute one) stood.
#[tokio::test]
async fn a_cut_compaction_prices_its_unsplit_writes_at_the_breakpoints_ttls() {
    let first = answered("hi", r#"{"input_tokens":400,"output_tokens":1}"#);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let start = r#"{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"claude-opus-5-5","content":[],"stop_reason":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0,"iterations":[{"type":"compaction","input_tokens":3,"cache_read_input_tokens":900,"cache_creation_input_tokens":5,"output_tokens":0}]}}}"#;
    let block = r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null,"signature":"sig"}}"#;
    let delta = r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"<summary>the mill</summary>"}}"#;
    let url = answer_in_turn(vec![
        stream_reply("req_1", &first, false),
        stream_reply("req_2", &[start, block, delta], true),
    ])
    .await;
    // Past the model's least cacheable length (512 tokens), so that every breakpoint caches.
    let system = "The mill by the river grinds at dawn. ".repeat(200);
    let mut backend = compacting_after_hello(url, &system, Ttl::OneHour).await;
    backend.compact("summarise").await.unwrap_err();
    let failed = backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let usage = failed[0].usage;
    assert_eq!(
        (
            usage.input,
            usage.cache_read,
            usage.cache_write_5m,
            usage.cache_write_1h
        ),
        (3, 900, 0, 5),
        "{failed:?}"
    );
}

/// A turn whose stream carries a `content_block_delta` of a type this crate does not know (the
/// API may add one under its version) is answered, not failed: failing it would fail — and
/// bill — every turn from the day the API sends the new delta, retries included. What the
/// delta said is not dropped: the turn's ledger events carry it verbatim with its block's
/// index (`unapplied_delta`). Before, the turn failed: "content_block_delta of unknown type
/// annotation_delta for block 0".
#[tokio::test]
async fn a_delta_of_an_unknown_type_is_ledgered_and_the_turn_answered() {
    let annotation = serde_json::json!({"type": "annotation_delta", "note": {"span": [0, 2]}});
    let mut events = answered("hi", r#"{"input_tokens":400,"output_tokens":1}"#);
    let delta = serde_json::json!({"type": "content_block_delta", "index": 0, "delta": annotation});
    events.insert(3, delta.to_string());
    let events: Vec<&str> = events.iter().map(String::as_str).collect();
    let url = answer_in_turn(vec![stream_reply("req_1", &events, false)]).await;
    let mut backend = AnthropicBackend::new(
        client(url, None),
        Arc::new(muninn_backend::clock::ManualClock::new(1_800_000_000_000)),
        muninn_core::price::PriceTable::embedded(),
    );
    backend
        .start(SessionSpec {
            model: "claude-opus-5-5".to_string(),
            system: vec!["You are Vala.".to_string()],
            tools: Vec::new(),
            output_schema: None,
            system_ttl: Ttl::FiveMinutes,
            conversation_ttl: Ttl::FiveMinutes,
            max_tokens: 1_000,
        })
        .await
        .unwrap();
    let outcome = backend.turn(TurnInput::text("hello")).await.unwrap();
    assert_eq!(outcome.text, "hi");
    let unapplied: Vec<&TurnEvent> = outcome
        .events
        .iter()
        .filter(|e| matches!(e, TurnEvent::UnappliedDelta { .. }))
        .collect();
    assert_eq!(
        unapplied,
        vec![&TurnEvent::UnappliedDelta {
            index: 0,
            delta: annotation
        }]
    );
}
