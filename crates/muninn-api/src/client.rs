//! A typed client of the HTTP API, for the CLI (`muninn say`, `tail`, `status`, …) and tests.
//!
//! Plain HTTP to the host (loopback by default) with the bearer token; bodies are the
//! [`wire`](crate::wire) types. API errors come back as [`ClientError::Api`] with the server's
//! class and message; the token appears in no error.

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

use crate::token::ApiToken;
use crate::wire::*;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing accepts connections at the address: the host is not running there. Start it
    /// (`muninn serve`) or point the client at the one that runs.
    #[error(
        "nothing answers at {base}: start the host with `muninn serve`, or point --addr, MUNINN_ADDR or --config at the one that runs"
    )]
    Unreachable {
        /// The API's base URL.
        base: String,
    },
    /// The host could not be reached, or the connection broke. Retry when the host is up.
    #[error("cannot reach the muninn host at {base}: {message}")]
    Transport {
        /// The API's base URL.
        base: String,
        /// What the HTTP stack said.
        message: String,
    },
    /// The host answered with an API error.
    #[error("{status}: {kind}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error class (`unauthorized`, `mind_not_found`, …).
        kind: String,
        /// The host's message.
        message: String,
    },
    /// The answer's body was over the client's limit ([`ANSWER_MAX_BYTES`]); the rest was not
    /// read. Not the host's answer: check what listens at the address.
    #[error("the answer from {base} is over the limit of {limit} bytes; the rest was not read")]
    TooLarge {
        /// The API's base URL.
        base: String,
        /// The limit, bytes.
        limit: usize,
    },
    /// The host answered something that is not the expected JSON.
    #[error("unexpected answer from the host ({status}): {message}")]
    Decode {
        /// The HTTP status.
        status: u16,
        /// What did not parse.
        message: String,
    },
}

/// How long a call may take beyond a long poll's own wait before it counts as lost. A host
/// that accepted the connection and then went silent (stopped, wedged, its machine gone
/// without a reset) would otherwise hang the caller — `muninn tail`'s loop, a transport's
/// outbox poll — for ever, without a word.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer body a call reads, bytes. The largest a host sends is a page of
/// [`LEDGER_PAGE_LIMIT`] ledger rows or of up to 1,000 transcript items (a few MiB); a body over
/// this is not the host's (a proxy's, or something else at the address) and is refused at the
/// limit ([`ClientError::TooLarge`]) rather than read into memory whole.
pub const ANSWER_MAX_BYTES: usize = 64 * 1024 * 1024;

/// A client of one host's API.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: ApiToken,
    /// [`CALL_TIMEOUT`] unless set otherwise.
    call_timeout: Duration,
    /// [`ANSWER_MAX_BYTES`] unless set otherwise.
    answer_limit: usize,
}

/// Percent-encodes a path segment (request ids are chosen by the runtime, room names by users).
fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A query string from `(name, value)` pairs whose value is set (values here are numbers and
/// enum words, which need no escaping).
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(name, value)| value.as_ref().map(|v| format!("{name}={}", segment(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

impl ApiClient {
    /// A client of the host at `addr` (`127.0.0.1:7676`, or a full `http://…` base URL).
    pub fn new(addr: &str, token: ApiToken) -> Result<ApiClient, ClientError> {
        let base = if addr.contains("://") {
            addr.trim_end_matches('/').to_owned()
        } else {
            format!("http://{addr}")
        };
        // reqwest is built without a default TLS provider; install ring's even though loopback
        // HTTP needs no TLS, because the builder refuses to build without one. (The same call as
        // `muninn_anthropic::client::install_ring_provider`: whichever runs first wins, and both
        // install ring.)
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("muninn/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(5))
            // Below the host's idle keep-alive limit (`[api] header_read_timeout_s`, at least
            // 1 s, default 10): a pooled connection is dropped here before the host closes it,
            // so a request is not sent on a connection the host is closing.
            .pool_idle_timeout(std::time::Duration::from_millis(900))
            .build()
            .map_err(|e| ClientError::Transport {
                base: base.clone(),
                message: e.to_string(),
            })?;
        Ok(ApiClient {
            http,
            base,
            token,
            call_timeout: CALL_TIMEOUT,
            answer_limit: ANSWER_MAX_BYTES,
        })
    }

    /// This client with `timeout` as each call's deadline beyond its long poll's wait (instead
    /// of [`CALL_TIMEOUT`]).
    pub fn with_call_timeout(mut self, timeout: Duration) -> ApiClient {
        self.call_timeout = timeout;
        self
    }

    /// This client reading at most `bytes` of an answer (instead of [`ANSWER_MAX_BYTES`]).
    pub fn with_answer_limit(mut self, bytes: usize) -> ApiClient {
        self.answer_limit = bytes;
        self
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        wait: Duration,
    ) -> Result<(StatusCode, Vec<u8>), ClientError> {
        let deadline = self.call_timeout + wait;
        let transport = |e: reqwest::Error| {
            if e.is_connect() {
                return ClientError::Unreachable {
                    base: self.base.clone(),
                };
            }
            if e.is_timeout() {
                return ClientError::Transport {
                    base: self.base.clone(),
                    message: format!("no answer within {deadline:?}"),
                };
            }
            ClientError::Transport {
                base: self.base.clone(),
                // Without the URL: it is ours anyway, and errors stay short.
                message: e.without_url().to_string(),
            }
        };
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(deadline)
            .bearer_auth(self.token.expose());
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        let too_large = || ClientError::TooLarge {
            base: self.base.clone(),
            limit: self.answer_limit,
        };
        // A declared length over the limit is refused before a byte of it is read; an
        // undeclared one (chunked) is read only up to the limit.
        if response
            .content_length()
            .is_some_and(|n| n > self.answer_limit as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            if bytes.len() + chunk.len() > self.answer_limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok((status, bytes));
        }
        Err(match serde_json::from_slice::<ErrorResponse>(&bytes) {
            Ok(body) => ClientError::Api {
                status: status.as_u16(),
                kind: body.error.kind,
                message: body.error.message,
            },
            Err(_) => ClientError::Decode {
                status: status.as_u16(),
                message: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
            },
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        self.call_waiting(method, path, body, Duration::ZERO).await
    }

    /// [`call`](Self::call) of a long poll, whose answer may take `wait` more.
    async fn call_waiting<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
        wait: Duration,
    ) -> Result<T, ClientError> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| ClientError::Decode {
                status: 0,
                message: e.to_string(),
            })?;
        let (status, bytes) = self.send(method, path, body, wait).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            status: status.as_u16(),
            message: e.to_string(),
        })
    }

    /// `POST /v1/minds/{mind}/deliveries`.
    pub async fn post_delivery(
        &self,
        mind: &str,
        delivery: &PostDeliveryRequest,
    ) -> Result<PostDeliveryResponse, ClientError> {
        let path = format!("/v1/minds/{}/deliveries", segment(mind));
        self.call(Method::POST, &path, Some(delivery)).await
    }

    /// `GET /v1/minds/{mind}/outbox`.
    pub async fn outbox(
        &self,
        mind: &str,
        after: i64,
        wait_s: u64,
    ) -> Result<OutboxResponse, ClientError> {
        let path = format!(
            "/v1/minds/{}/outbox{}",
            segment(mind),
            query(&[
                ("after", Some(after.to_string())),
                ("wait_s", Some(wait_s.to_string()))
            ])
        );
        let wait = Duration::from_secs(wait_s.min(MAX_WAIT_S));
        self.call_waiting(Method::GET, &path, None::<&()>, wait)
            .await
    }

    /// `POST /v1/minds/{mind}/outbox/{request_id}/ack`.
    pub async fn ack(&self, mind: &str, request_id: &str) -> Result<OutboxMessage, ClientError> {
        let path = format!(
            "/v1/minds/{}/outbox/{}/ack",
            segment(mind),
            segment(request_id)
        );
        self.call(Method::POST, &path, None::<&()>).await
    }

    /// `POST /v1/minds/{mind}/briefs`.
    pub async fn post_brief(&self, mind: &str, text: &str) -> Result<Brief, ClientError> {
        let path = format!("/v1/minds/{}/briefs", segment(mind));
        let body = PostBriefRequest {
            text: text.to_owned(),
        };
        self.call(Method::POST, &path, Some(&body)).await
    }

    /// `GET /v1/minds`.
    pub async fn minds(&self) -> Result<MindsResponse, ClientError> {
        self.call(Method::GET, "/v1/minds", None::<&()>).await
    }

    /// `GET /v1/minds/{mind}`.
    pub async fn mind(&self, mind: &str) -> Result<MindStatus, ClientError> {
        let path = format!("/v1/minds/{}", segment(mind));
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `GET /v1/minds/{mind}/segments`: each role's newest 100.
    pub async fn segments(&self, mind: &str) -> Result<SegmentsResponse, ClientError> {
        self.segments_page(mind, &SegmentsQuery::default()).await
    }

    /// `GET /v1/minds/{mind}/segments` with its query: a page further back (`before`, with
    /// `role` set, since each role numbers its own segments), or another size.
    pub async fn segments_page(
        &self,
        mind: &str,
        query_: &SegmentsQuery,
    ) -> Result<SegmentsResponse, ClientError> {
        let path = format!(
            "/v1/minds/{}/segments{}",
            segment(mind),
            query(&[
                ("limit", query_.limit.map(|v| v.to_string())),
                ("before", query_.before.map(|v| v.to_string())),
                ("role", query_.role.map(|r| r.as_str().to_owned())),
            ])
        );
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `GET /v1/minds/{mind}/transcript`.
    pub async fn transcript(
        &self,
        mind: &str,
        role: Role,
        query_: &TranscriptQuery,
    ) -> Result<TranscriptResponse, ClientError> {
        let path = format!(
            "/v1/minds/{}/transcript{}",
            segment(mind),
            query(&[
                ("role", Some(role.as_str().to_owned())),
                ("after", query_.after.map(|v| v.to_string())),
                ("limit", query_.limit.map(|v| v.to_string())),
                ("last", query_.last.map(|v| v.to_string())),
                ("wait_s", query_.wait_s.map(|v| v.to_string())),
            ])
        );
        let wait = Duration::from_secs(query_.wait_s.unwrap_or(0).min(MAX_WAIT_S));
        self.call_waiting(Method::GET, &path, None::<&()>, wait)
            .await
    }

    fn ledger_path(mind: &str, params: &LedgerParams, format: &str) -> String {
        format!(
            "/v1/minds/{}/ledger{}",
            segment(mind),
            query(&[
                ("from_ms", params.from_ms.map(|v| v.to_string())),
                ("to_ms", params.to_ms.map(|v| v.to_string())),
                ("after_id", params.after_id.map(|v| v.to_string())),
                ("limit", params.limit.map(|v| v.to_string())),
                ("format", Some(format.to_owned())),
            ])
        )
    }

    /// `GET /v1/minds/{mind}/ledger?format=json`: the rows `params` asks for (every one without
    /// a `limit`, the first `limit` with one), in order, collected (see [`ApiClient::ledger_pages`]
    /// to handle them a page at a time).
    pub async fn ledger(
        &self,
        mind: &str,
        params: &LedgerParams,
    ) -> Result<LedgerResponse, ClientError> {
        let mut pages = self.ledger_pages(mind, params);
        let mut rows = Vec::new();
        while let Some(page) = pages.next().await? {
            rows.extend(page);
        }
        Ok(LedgerResponse { rows })
    }

    /// The rows of [`ApiClient::ledger`], a page at a time: the server answers at most
    /// [`LEDGER_PAGE_LIMIT`] rows a request, so they are read in pages, each after the last id
    /// of the one before, until a page comes short or the limit is reached (a `limit` above the
    /// server's cap is not cut short without a word). A caller that prints each page before
    /// asking for the next holds one page in memory, not the whole ledger.
    pub fn ledger_pages<'a>(&'a self, mind: &'a str, params: &LedgerParams) -> LedgerPages<'a> {
        LedgerPages {
            client: self,
            mind,
            asked: params.clone(),
            limit: params.limit,
            read: 0,
            done: false,
        }
    }

    /// `GET /v1/minds/{mind}/ledger?format=jsonl`'s text: the rows of [`ApiClient::ledger`]
    /// (read in pages, which carry the ids paging needs), one per line as the server writes
    /// them.
    pub async fn ledger_jsonl(
        &self,
        mind: &str,
        params: &LedgerParams,
    ) -> Result<String, ClientError> {
        let mut text = String::new();
        let mut pages = self.ledger_pages(mind, params);
        while let Some(page) = pages.next().await? {
            for entry in &page {
                text.push_str(&ledger_line(entry)?);
                text.push('\n');
            }
        }
        Ok(text)
    }

    /// `GET /v1/minds/{mind}/settings`.
    pub async fn settings(&self, mind: &str) -> Result<Settings, ClientError> {
        let path = format!("/v1/minds/{}/settings", segment(mind));
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `PUT /v1/minds/{mind}/settings`: sets the caps, leaves the brake; answers the settings.
    pub async fn put_settings(
        &self,
        mind: &str,
        caps: &PutSettingsRequest,
    ) -> Result<Settings, ClientError> {
        let path = format!("/v1/minds/{}/settings", segment(mind));
        self.call(Method::PUT, &path, Some(caps)).await
    }

    /// `POST /v1/minds/{mind}/brake` (`on`) or `DELETE /v1/minds/{mind}/brake`: one Mind's brake.
    pub async fn brake_mind(&self, mind: &str, on: bool) -> Result<BrakeResponse, ClientError> {
        let method = if on { Method::POST } else { Method::DELETE };
        let path = format!("/v1/minds/{}/brake", segment(mind));
        self.call(method, &path, None::<&()>).await
    }

    /// `POST /v1/brake` (`on`) or `DELETE /v1/brake`.
    pub async fn brake(&self, on: bool) -> Result<BrakeResponse, ClientError> {
        let method = if on { Method::POST } else { Method::DELETE };
        self.call(method, "/v1/brake", None::<&()>).await
    }
}

/// A ledger line of `muninn ledger --format jsonl` (and the server's `format=jsonl`): the row
/// alone, without its id.
pub fn ledger_line(entry: &LedgerEntryBody) -> Result<String, ClientError> {
    serde_json::to_string(&entry.row).map_err(|e| ClientError::Decode {
        status: 200,
        message: e.to_string(),
    })
}

/// The pages of a Mind's ledger, asked for one at a time ([`ApiClient::ledger_pages`]).
#[derive(Debug)]
pub struct LedgerPages<'a> {
    client: &'a ApiClient,
    mind: &'a str,
    /// The next page's query: `after_id` the last row read.
    asked: LedgerParams,
    /// The caller's limit on the rows in all.
    limit: Option<i64>,
    /// Rows read so far.
    read: i64,
    /// Whether the last page has been read.
    done: bool,
}

impl LedgerPages<'_> {
    /// The next page's rows, `None` once the last page has been read (a page that came short
    /// of what was asked, or the caller's limit reached).
    pub async fn next(&mut self) -> Result<Option<Vec<LedgerEntryBody>>, ClientError> {
        if self.done {
            return Ok(None);
        }
        // A limit of 0 or less is sent as it is, for the server to refuse.
        let left = self.limit.map(|n| n - self.read);
        let asked = left.map_or(LEDGER_PAGE_LIMIT, |n| n.min(LEDGER_PAGE_LIMIT));
        self.asked.limit = Some(asked);
        let path = ApiClient::ledger_path(self.mind, &self.asked, "json");
        let page: LedgerResponse = self.client.call(Method::GET, &path, None::<&()>).await?;
        let full = page.rows.len() as i64 >= asked;
        self.asked.after_id = page.rows.last().map(|e| e.id).or(self.asked.after_id);
        self.read += page.rows.len() as i64;
        let reached = self.limit.is_some_and(|n| self.read >= n);
        self.done = !full || reached;
        Ok(Some(page.rows))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{ApiClient, ClientError};
    use crate::token::ApiToken;
    use crate::wire::TranscriptQuery;
    use muninn_core::records::Role;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// A host that accepts connections and reads requests but never answers (stopped with
    /// SIGSTOP, or wedged): its address.
    fn silent_host() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                held.push(stream);
            }
        });
        addr
    }

    /// A host stand-in for one request: it answers `200` with `declared` as the
    /// `Content-Length` and then holds the connection silent, or, with `None`, a chunked body of
    /// `mib` MiB; its address, and how many MiB it got written before the client hung up.
    fn oversized_host(declared: Option<u64>, mib: usize) -> (String, Arc<AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let written = Arc::new(AtomicUsize::new(0));
        let count = written.clone();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let _ = stream.read(&mut [0u8; 16 * 1024]);
            let length = match declared {
                Some(n) => format!("content-length: {n}"),
                None => "transfer-encoding: chunked".to_owned(),
            };
            let head =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}\r\n\r\n");
            if stream.write_all(head.as_bytes()).is_err() || declared.is_some() {
                std::thread::sleep(Duration::from_secs(60));
                return;
            }
            let mut piece = format!("{:x}\r\n", 1 << 20).into_bytes();
            piece.extend(std::iter::repeat_n(b' ', 1 << 20));
            piece.extend_from_slice(b"\r\n");
            for _ in 0..mib {
                if stream.write_all(&piece).is_err() {
                    return;
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
            let _ = stream.write_all(b"0\r\n\r\n");
        });
        (addr, written)
    }

    /// A host stand-in for one request that trickles its answer: `200`, a declared length of
    /// 10,000 bytes, then one byte every 100 ms (a proxy or a wedged host drip-feeding it).
    fn trickling_host() -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let _ = stream.read(&mut [0u8; 16 * 1024]);
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000\r\n\r\n[";
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            for _ in 0..10_000 {
                std::thread::sleep(Duration::from_millis(100));
                if stream.write_all(b" ").is_err() {
                    return;
                }
            }
        });
        addr
    }

    /// An answer that trickles in — never silent, never done — is cut at the call's deadline
    /// (the whole call's, not the silence between reads), naming the wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_that_trickles_is_cut_at_the_deadline() {
        let client = ApiClient::new(&trickling_host(), ApiToken::new("t"))
            .unwrap()
            .with_call_timeout(Duration::from_millis(800));
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(20), client.minds())
            .await
            .expect("the call was not cut at its deadline");
        let took = started.elapsed();
        assert!(
            matches!(&answer, Err(ClientError::Transport { message, .. })
                if message.contains("no answer within 800ms")),
            "{answer:?}"
        );
        assert!(
            took >= Duration::from_millis(800) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }

    /// An answer over the client's limit is refused at the limit, not read into memory whole;
    /// a declared length over it is refused before a byte of the body is waited for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_over_the_limit_is_refused_at_the_limit() {
        let too_large = |answer: &Result<_, ClientError>| matches!(answer, Err(ClientError::TooLarge { limit, .. }) if *limit == 1 << 20);
        let (addr, written) = oversized_host(None, 64);
        let client = ApiClient::new(&addr, ApiToken::new("t"))
            .unwrap()
            .with_answer_limit(1 << 20);
        let answer = client.minds().await;
        assert!(too_large(&answer), "{answer:?}");
        let mib = written.load(Ordering::Relaxed);
        assert!(
            mib < 64,
            "the client hung up before the whole answer ({mib} MiB written)"
        );

        let (addr, _) = oversized_host(Some(1 << 40), 0);
        let client = ApiClient::new(&addr, ApiToken::new("t"))
            .unwrap()
            .with_answer_limit(1 << 20);
        let answer = tokio::time::timeout(Duration::from_secs(5), client.minds())
            .await
            .expect("refused at once, not after the call's deadline");
        assert!(too_large(&answer), "{answer:?}");
    }

    /// A call to a host that never answers fails after the call's deadline (plus a long
    /// poll's own wait), naming the wait; it does not hang the CLI for ever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_host_that_never_answers_is_an_error_after_the_deadline() {
        let client = ApiClient::new(&silent_host(), ApiToken::new("t"))
            .unwrap()
            .with_call_timeout(Duration::from_millis(300));
        let started = Instant::now();
        let plain = tokio::time::timeout(Duration::from_secs(20), client.minds())
            .await
            .expect("answered within 20 s");
        let plain_took = started.elapsed();
        let started = Instant::now();
        let query = TranscriptQuery {
            wait_s: Some(1),
            ..TranscriptQuery::default()
        };
        let waiting = tokio::time::timeout(
            Duration::from_secs(20),
            client.transcript("vala", Role::Persona, &query),
        )
        .await
        .expect("answered within 20 s");
        let waiting_took = started.elapsed();
        for (answer, took, deadline) in [
            (plain.map(|_| ()), plain_took, Duration::from_millis(300)),
            (
                waiting.map(|_| ()),
                waiting_took,
                Duration::from_millis(1_300),
            ),
        ] {
            assert!(
                matches!(&answer, Err(ClientError::Transport { message, .. })
                    if message.contains("no answer within")),
                "{answer:?}"
            );
            assert!(
                took >= deadline && took < deadline + Duration::from_secs(5),
                "{took:?} for a deadline of {deadline:?}"
            );
        }
    }
}
