//! The API's bounds on clients, on the wire (raw TCP where the point is a client that misbehaves):
//! a body that does not arrive in time is cut with 408, one too large is 413 JSON, headers that
//! do not arrive in time and idle keep-alive connections are closed, and connections over the
//! cap are closed at once while the API keeps answering.

use muninn_api::ApiToken;
use muninn_host::Host;
use muninn_host::config::{ApiConfig, Config};
use muninn_host::http::serve;
use muninn_store::Mind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) struct Limited {
    pub(crate) addr: SocketAddr,
    pub(crate) token: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub(crate) async fn start(api: ApiConfig) -> Limited {
    muninn_anthropic::client::install_ring_provider();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::demo();
    config.data_dir = dir.path().to_owned();
    config.api = api;
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    store
        .create_mind(&Mind {
            id: "vala".into(),
            display_name: "Vala".into(),
            config: serde_json::json!({}),
            created_at_ms: 1,
        })
        .await
        .unwrap();
    let clock = Arc::new(muninn_backend::clock::ManualClock::new(1_750_000_000_000));
    let host = Host::new(store, config, clock);
    let token = ApiToken::load_or_create(&host.config.api_token_path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(host, token.clone(), listener, async {
        let _ = stopped.await;
    }));
    Limited {
        addr,
        token: token.expose().to_owned(),
        _dir: dir,
        _stop: stop,
    }
}

/// Everything the server sends until it closes the connection (or `within` passes: then the
/// test fails, since the point is that the server closes it).
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut received)).await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {within:?}; got {:?}",
        String::from_utf8_lossy(&received)
    );
    String::from_utf8_lossy(&received).into_owned()
}

fn delivery_head(token: &str, extra: &str) -> String {
    format!(
        "POST /v1/minds/vala/deliveries HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n{extra}\r\n"
    )
}

#[tokio::test]
async fn a_body_that_does_not_arrive_is_cut_with_408() {
    let server = start(ApiConfig {
        body_read_timeout_s: 2,
        ..ApiConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = delivery_head(&server.token, "content-length: 1000000\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(b"{\"room\":").await.unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut stream, Duration::from_secs(6)).await;
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "cut after {took:?}"
    );
}

#[tokio::test]
async fn a_body_over_the_route_limit_is_413_json_declared_or_chunked() {
    let server = start(ApiConfig {
        max_body_bytes: 8 * 1024,
        ..ApiConfig::default()
    })
    .await;
    // Declared: answered before a byte of the body is sent.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = delivery_head(&server.token, "content-length: 8193\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"payload_too_large\""), "{answer}");
    assert!(
        answer.contains("8192 bytes"),
        "the limit is named: {answer}"
    );
    // Chunked: cut once the bytes read pass the limit.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = delivery_head(&server.token, "transfer-encoding: chunked\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("1000\r\n{}\r\n", "a".repeat(0x1000));
    for _ in 0..3 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // Settings take far less than a delivery.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "PUT /v1/minds/vala/settings HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 100000\r\n\r\n",
        server.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("65536 bytes"), "{answer}");
}

/// An unauthenticated client's body is not waited for: 401 at once, whatever it declares.
#[tokio::test]
async fn an_unauthenticated_body_is_not_read() {
    let server = start(ApiConfig::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head =
        "POST /v1/minds/vala/deliveries HTTP/1.1\r\nhost: x\r\ncontent-length: 500000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(3)).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

async fn get_minds(addr: SocketAddr, token: &str) -> String {
    get(addr, "/v1/minds", token).await
}

async fn get(addr: SocketAddr, path: &str, token: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    read_until_closed(&mut stream, Duration::from_secs(5)).await
}

/// Connections over the cap are closed at once; the ones under it that never finish their
/// headers are closed after the header timeout, and then the API answers again. An idle
/// keep-alive connection goes after the same timeout.
#[tokio::test]
async fn slow_headers_are_closed_and_connections_over_the_cap_refused() {
    let server = start(ApiConfig {
        max_connections: 8,
        header_read_timeout_s: 2,
        ..ApiConfig::default()
    })
    .await;
    assert!(
        get_minds(server.addr, &server.token)
            .await
            .starts_with("HTTP/1.1 200")
    );
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"GET /v1/minds HTTP/1.1\r\nx-slow: 1\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    let opened = Instant::now();
    // Let the server accept all eight before the ninth arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = TcpStream::connect(server.addr).await.unwrap();
    let _ = over.write_all(b"GET /v1/minds HTTP/1.1\r\n").await;
    let mut buf = [0u8; 64];
    let refused = tokio::time::timeout(Duration::from_secs(1), over.read(&mut buf)).await;
    assert!(
        matches!(refused, Ok(Ok(0)) | Ok(Err(_))),
        "a connection over the cap is closed at once: {refused:?}"
    );
    for stream in &mut slow {
        // Trickle a header line, as a slowloris client does: it does not extend the deadline.
        let _ = stream.write_all(b"x-more: 1\r\n").await;
    }
    for stream in &mut slow {
        let rest = read_until_closed(stream, Duration::from_secs(4)).await;
        assert!(!rest.contains("200 OK"), "{rest}");
    }
    let closed_after = opened.elapsed();
    assert!(
        closed_after < Duration::from_millis(3500),
        "slow connections closed after {closed_after:?}"
    );
    assert!(
        get_minds(server.addr, &server.token)
            .await
            .starts_with("HTTP/1.1 200")
    );
    // The refusal is counted where an operator looks.
    let metrics = get(server.addr, "/metrics", &server.token).await;
    assert!(
        metrics.contains("\nmuninn_api_connections_refused_total 1\n"),
        "{metrics}"
    );

    // Idle keep-alive: one answered request, then nothing; closed after the timeout.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "GET /v1/minds HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\r\n",
        server.token
    );
    idle.write_all(request.as_bytes()).await.unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "closed before the idle timeout: {:?}",
        started.elapsed()
    );
}
