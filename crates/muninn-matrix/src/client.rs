//! A Matrix Client-Server API client: the dozen calls the connector makes, over reqwest
//! (rustls with the `ring` provider, as the workspace configures; loopback HTTP needs no TLS but
//! the builder wants a provider installed).
//!
//! Every call has a deadline (a `/sync` long poll its own timeout plus a margin) and a size
//! limit on its answer ([`SYNC_ANSWER_MAX_BYTES`], [`ANSWER_MAX_BYTES`]), maps a non-2xx answer to [`MatrixError::Refused`] with the homeserver's `errcode` and
//! `retry_after_ms`, and never puts the access token or a request body into an error or a log
//! line: the token travels only in the `Authorization` header, and errors are built from the
//! status, the error body and a short description of the call.

use crate::error::MatrixError;
use crate::wire::*;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// The deadline of a call that is not a long poll, and what a `/sync` long poll may take
/// beyond its own `timeout` before it counts as lost. It bounds the whole call, from connecting
/// to the answer's last byte, so a homeserver or proxy that trickles its answer cannot hold the
/// connector past it either.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer to a call that is not `/sync`, bytes. The largest one asked for is a
/// `/messages` page: 100 events, each at most the 64 KiB the spec allows an event.
pub const ANSWER_MAX_BYTES: usize = 16 * 1024 * 1024;

/// The largest `/sync` answer, bytes. The filter bounds each room's timeline
/// (`timeline_limit` events of at most 64 KiB each) but not the number of rooms; an answer
/// over this is refused (a retryable [`MatrixError::TooLarge`], shown in the account's
/// health) rather than read into memory whole: lower `timeline_limit` if it persists.
pub const SYNC_ANSWER_MAX_BYTES: usize = 64 * 1024 * 1024;

/// A client of one homeserver, logged in as one account once [`MatrixClient::with_token`] gave
/// it a token. Cheap to clone: clones share the connection pool and the token, so a token
/// replaced after a new login ([`MatrixClient::replace_token`]) is the one every clone sends.
#[derive(Clone)]
pub struct MatrixClient {
    http: reqwest::Client,
    base: Url,
    token: Arc<RwLock<Token>>,
    /// [`CALL_TIMEOUT`] unless set otherwise.
    call_timeout: Duration,
}

/// The access token clones share, and how many times it was replaced.
#[derive(Default)]
struct Token {
    text: Option<Arc<str>>,
    generation: u64,
}

impl std::fmt::Debug for MatrixClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixClient")
            .field("base", &self.base.as_str())
            .field("logged_in", &self.token().is_some())
            .finish_non_exhaustive()
    }
}

/// `dir` of `/messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Older events first (`b`).
    Backward,
    /// Newer events first (`f`).
    Forward,
}

impl MatrixClient {
    /// A client of the homeserver at `homeserver` (`https://matrix.example.org`, or
    /// `http://127.0.0.1:8008` on loopback), not logged in.
    pub fn new(homeserver: &str) -> Result<MatrixClient, MatrixError> {
        let base = Url::parse(homeserver)
            .map_err(|e| MatrixError::Config(format!("homeserver URL {homeserver:?}: {e}")))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(MatrixError::Config(format!(
                "homeserver URL {homeserver:?} must be http:// or https://"
            )));
        }
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("muninn-matrix/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| MatrixError::Config(format!("building the HTTP client: {e}")))?;
        Ok(MatrixClient {
            http,
            base,
            token: Arc::default(),
            call_timeout: CALL_TIMEOUT,
        })
    }

    /// This client with `timeout` as each call's deadline beyond its long poll's wait (instead
    /// of [`CALL_TIMEOUT`]).
    pub fn with_call_timeout(mut self, timeout: Duration) -> MatrixClient {
        self.call_timeout = timeout;
        self
    }

    /// This client with `token` as its access token (its own: clones of it share it, the
    /// client it was made from keeps its own).
    pub fn with_token(mut self, token: &str) -> MatrixClient {
        self.token = Arc::new(RwLock::new(Token {
            text: Some(Arc::from(token)),
            generation: 0,
        }));
        self
    }

    /// Replaces the access token of this client and every clone of it (after a new login).
    pub fn replace_token(&self, token: &str) {
        let mut shared = self.token.write().unwrap_or_else(PoisonError::into_inner);
        shared.text = Some(Arc::from(token));
        shared.generation = shared.generation.wrapping_add(1);
    }

    /// Whether `token` is the token in use (a credential read again that did not change is no
    /// new token).
    pub fn has_token(&self, token: &str) -> bool {
        self.token().is_some_and(|t| &*t == token)
    }

    /// How many times the token was replaced: read before a call, it tells whether a token the
    /// homeserver refused is still the one in use (or was replaced meanwhile).
    pub fn token_generation(&self) -> u64 {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
    }

    /// The token now (a poisoned lock still holds a valid token: nothing panics holding it).
    fn token(&self) -> Option<Arc<str>> {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .text
            .clone()
    }

    /// `/_matrix/client/v3/<segments…>?<query>`, each segment percent-encoded.
    fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Url, MatrixError> {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|()| MatrixError::Config(format!("homeserver URL {}", self.base)))?;
            path.pop_if_empty()
                .extend(["_matrix", "client", "v3"])
                .extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    /// One call within the call timeout ([`CALL_TIMEOUT`]), its answer read up to [`ANSWER_MAX_BYTES`]: `body` as
    /// JSON, the answer decoded as `T`; `what` names it in errors.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        what: &str,
    ) -> Result<T, MatrixError> {
        self.call_within(method, url, body, what, self.call_timeout, ANSWER_MAX_BYTES)
            .await
    }

    /// [`call`](Self::call) within `timeout`, its answer read up to `max_bytes` (a long poll).
    async fn call_within<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        what: &str,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<T, MatrixError> {
        let mut request = self.http.request(method, url).timeout(timeout);
        if let Some(token) = self.token() {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let unreachable =
            |e: reqwest::Error| MatrixError::Unreachable(format!("{what}: {}", cause(e)));
        let mut response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let too_large = || MatrixError::TooLarge {
            what: what.to_owned(),
            limit: max_bytes,
        };
        // A declared length over the limit is refused before a byte of it is read; an
        // undeclared one (chunked) is read only up to the limit. Either way the connection is
        // dropped with the rest unread.
        if response
            .content_length()
            .is_some_and(|n| n > max_bytes as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if bytes.len() + chunk.len() > max_bytes {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let error: ErrorBody = serde_json::from_slice(&bytes).unwrap_or_default();
            return Err(MatrixError::Refused {
                what: what.to_owned(),
                status: status.as_u16(),
                errcode: error.errcode,
                message: error.error,
                retry_after_ms: error.retry_after_ms,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| MatrixError::Decode {
            what: what.to_owned(),
            message: e.to_string(),
        })
    }

    /// A JSON body.
    fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, MatrixError> {
        serde_json::to_vec(value).map_err(|e| MatrixError::Config(format!("request body: {e}")))
    }

    /// Logs in with a password as `device_id` (a fixed device: the same one on every login).
    pub async fn login(
        &self,
        user: &str,
        password: &str,
        device_id: &str,
    ) -> Result<LoginResponse, MatrixError> {
        let body = Self::json(&LoginRequest {
            kind: "m.login.password",
            identifier: UserIdentifier {
                kind: "m.id.user",
                user,
            },
            password,
            device_id,
            initial_device_display_name: "muninn",
        })?;
        let url = self.url(&["login"], &[])?;
        self.call(Method::POST, url, Some(body), "login").await
    }

    /// Who the access token belongs to.
    pub async fn whoami(&self) -> Result<WhoamiResponse, MatrixError> {
        let url = self.url(&["account", "whoami"], &[])?;
        self.call(Method::GET, url, None, "whoami").await
    }

    /// `/sync` after `since` (none: an initial sync), with an inline `filter`, waiting up to
    /// `timeout` for something new.
    pub async fn sync(
        &self,
        since: Option<&str>,
        filter: &str,
        timeout: Duration,
    ) -> Result<SyncResponse, MatrixError> {
        let timeout_ms = timeout.as_millis().to_string();
        let mut query = vec![("filter", filter), ("timeout", timeout_ms.as_str())];
        if let Some(since) = since {
            query.push(("since", since));
        }
        let url = self.url(&["sync"], &query)?;
        self.call_within(
            Method::GET,
            url,
            None,
            "sync",
            timeout + self.call_timeout,
            SYNC_ANSWER_MAX_BYTES,
        )
        .await
    }

    /// One page of a room's events from `from` in `dir`, stopping at `to` if given, at most
    /// `limit`, only the event types in `filter`.
    pub async fn messages(
        &self,
        room: &str,
        from: &str,
        to: Option<&str>,
        dir: Direction,
        limit: u32,
        filter: &str,
    ) -> Result<MessagesResponse, MatrixError> {
        let limit = limit.to_string();
        let dir = match dir {
            Direction::Backward => "b",
            Direction::Forward => "f",
        };
        let mut query = vec![
            ("from", from),
            ("dir", dir),
            ("limit", limit.as_str()),
            ("filter", filter),
        ];
        if let Some(to) = to {
            query.push(("to", to));
        }
        let url = self.url(&["rooms", room, "messages"], &query)?;
        let what = format!("messages of {room}");
        self.call(Method::GET, url, None, &what).await
    }

    /// Sends a text message with transaction id `txn`: a repeat of the same `txn` from the
    /// same device is the same event (the homeserver keeps the mapping for about a day).
    pub async fn send_text(
        &self,
        room: &str,
        txn: &str,
        text: &str,
    ) -> Result<String, MatrixError> {
        let body = Self::json(&TextMessage {
            msgtype: "m.text",
            body: text,
        })?;
        let url = self.url(&["rooms", room, "send", "m.room.message", txn], &[])?;
        let what = format!("send {txn} to {room}");
        let sent: SendResponse = self.call(Method::PUT, url, Some(body), &what).await?;
        Ok(sent.event_id)
    }

    /// Joins a room by id or alias (idempotent); returns its room id.
    pub async fn join(&self, room: &str) -> Result<String, MatrixError> {
        self.join_via(room, None).await
    }

    /// Joins a room by id or alias through `via`, a server in the room (`server_name`: a room
    /// id names no server that is sure to be in it).
    pub async fn join_via(&self, room: &str, via: Option<&str>) -> Result<String, MatrixError> {
        let query: Vec<(&str, &str)> = via.map(|s| ("server_name", s)).into_iter().collect();
        let url = self.url(&["join", room], &query)?;
        let what = format!("join {room}");
        let joined: RoomIdResponse = self
            .call(Method::POST, url, Some(b"{}".to_vec()), &what)
            .await?;
        Ok(joined.room_id)
    }

    /// The room id an alias (`#name:server`) points at.
    pub async fn resolve_alias(&self, alias: &str) -> Result<String, MatrixError> {
        let url = self.url(&["directory", "room", alias], &[])?;
        let what = format!("resolve {alias}");
        let resolved: RoomIdResponse = self.call(Method::GET, url, None, &what).await?;
        Ok(resolved.room_id)
    }

    /// The rooms the account is in.
    pub async fn joined_rooms(&self) -> Result<Vec<String>, MatrixError> {
        let url = self.url(&["joined_rooms"], &[])?;
        let rooms: JoinedRoomsResponse = self.call(Method::GET, url, None, "joined_rooms").await?;
        Ok(rooms.joined_rooms)
    }

    /// How many members have joined `room`.
    pub async fn joined_member_count(&self, room: &str) -> Result<usize, MatrixError> {
        let url = self.url(&["rooms", room, "joined_members"], &[])?;
        let what = format!("members of {room}");
        let members: JoinedMembersResponse = self.call(Method::GET, url, None, &what).await?;
        Ok(members.joined.len())
    }

    /// The content of `room`'s state event of `kind` with the empty state key (`None`: the
    /// room has none, such as `m.room.tombstone` of a room never upgraded).
    pub async fn state(&self, room: &str, kind: &str) -> Result<Option<Value>, MatrixError> {
        let url = self.url(&["rooms", room, "state", kind, ""], &[])?;
        let what = format!("{kind} of {room}");
        match self.call::<Value>(Method::GET, url, None, &what).await {
            Ok(value) => Ok(Some(value)),
            Err(MatrixError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The user's account data of `kind` (`None` if never set).
    pub async fn account_data(&self, user: &str, kind: &str) -> Result<Option<Value>, MatrixError> {
        let url = self.url(&["user", user, "account_data", kind], &[])?;
        let what = format!("account data {kind}");
        match self.call::<Value>(Method::GET, url, None, &what).await {
            Ok(value) => Ok(Some(value)),
            Err(MatrixError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces the user's account data of `kind`.
    pub async fn set_account_data(
        &self,
        user: &str,
        kind: &str,
        content: &Value,
    ) -> Result<(), MatrixError> {
        let url = self.url(&["user", user, "account_data", kind], &[])?;
        let what = format!("set account data {kind}");
        let _: Value = self
            .call(Method::PUT, url, Some(Self::json(content)?), &what)
            .await?;
        Ok(())
    }
}

/// A transport failure in words, with its causes: reqwest's own text is only "error decoding
/// response body" or "error sending request"; why (the call's deadline, a refused connection)
/// is further down its source chain, and the account's health must say it. Without the URL,
/// whose query holds the filter and the sync position; reqwest's errors and their sources
/// never hold header values, so the token cannot leak here.
fn cause(e: reqwest::Error) -> String {
    let timed_out = e.is_timeout();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    if timed_out && !text.contains("timed out") {
        text.push_str(" (timed out)");
    }
    text
}
