//! The dashboard: server-rendered HTML pages with inline SVG charts, served by `muninn serve`
//! beside the API. No build step and no framework: the pages are written here, and one small
//! script (`html.rs`) sends the brake and caps forms to the `/v1` API.
//!
//! | page | what |
//! |---|---|
//! | `GET /dashboard` | every Mind: state, pending deliveries, spend against its cap, lease; the brake for all |
//! | `GET /dashboard/minds/{mind}?role&kind&decision&since&limit&offset&refresh` | one Mind: live state (running, idle until, braked, capped, retrying with the last error, pending deliveries), figures, brake and caps controls, cumulative cost against rebuild-every-turn and never-refresh on the same turns, cost per turn, prefix against the ceiling, segments on a timeline with why each ended, decisions, and the ledger filtered by the query |
//! | `GET`/`POST /dashboard/login` | `?token=` or a form: sets the cookie, then to `/dashboard` |
//! | `GET /dashboard/logout` | clears the cookie |
//!
//! # Access
//!
//! Every page takes the API token: as the bearer header, or as the cookie the login page sets
//! from it (`HttpOnly`, `SameSite=Strict`, never put in a page, a URL it builds or a log). The
//! controls call the API with that cookie and the `X-Muninn-Dashboard` header (see
//! [`crate::http`]). Every query parameter is at most [`MAX_PARAM_CHARS`] characters and the
//! query at most [`MAX_QUERY_CHARS`]; unknown parameters are refused.

mod data;
pub(crate) mod html;
mod page;
mod svg;

use crate::Host;
use crate::http::ApiError;
use axum::Router;
use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{Form, Path, Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use muninn_api::ApiToken;
use muninn_core::ledger::LedgerRow;
use serde::Deserialize;
use std::sync::Arc;

/// The login page, which needs no token.
pub const LOGIN_PATH: &str = "/dashboard/login";
/// The cookie holding the token.
pub const COOKIE: &str = "muninn_token";
/// The longest query parameter value.
pub const MAX_PARAM_CHARS: usize = 64;
/// The longest query string.
pub const MAX_QUERY_CHARS: usize = 1024;
/// The longest token the login page takes.
const MAX_TOKEN_CHARS: usize = 512;
/// Ledger rows shown by default, and at most.
const DEFAULT_ROWS: usize = 100;
const MAX_SHOWN_ROWS: usize = 1_000;

#[derive(Clone)]
struct DashState {
    host: Host,
    token: Arc<ApiToken>,
}

/// The dashboard's pages as a router (behind the API's token check, which lets the login page
/// through).
pub(crate) fn router(host: Host, token: Arc<ApiToken>) -> Router {
    Router::new()
        .route("/dashboard", get(overview))
        .route("/dashboard/minds/{mind}", get(mind_page))
        .route(LOGIN_PATH, get(login_get).post(login_post))
        .route("/dashboard/logout", get(logout))
        .with_state(DashState { host, token })
}

/// Whether `path` is one of the dashboard's (which take the cookie, and send a visitor without
/// a token to the login page).
pub(crate) fn is_dashboard_path(path: &str) -> bool {
    path == "/dashboard" || path.starts_with("/dashboard/")
}

/// The token in the dashboard's cookie, if the request has one.
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Where a visitor without a token goes.
pub(crate) fn to_login() -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, LOGIN_PATH)]).into_response()
}

async fn overview(State(state): State<DashState>) -> Result<Response, ApiError> {
    let host = &state.host;
    let mut ids: Vec<String> = host.config.minds.iter().map(|m| m.id.clone()).collect();
    ids.extend(host.store.minds().await?.into_iter().map(|m| m.id));
    ids.sort();
    ids.dedup();
    let mut lines = Vec::with_capacity(ids.len());
    for id in &ids {
        lines.push(page::MindLine {
            status: crate::http::mind_status(host, id).await?,
            live: host.telemetry.mind(id),
            mailbox: host.store.mailbox(id).await?,
        });
    }
    Ok(Html(page::overview(&lines, host.clock.now_ms())).into_response())
}

/// The query of a Mind's page, as given: every value is checked for length before it is read.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MindQuery {
    role: Option<String>,
    kind: Option<String>,
    decision: Option<String>,
    since: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
    refresh: Option<String>,
}

/// A filter on one of a few fixed values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter(Option<&'static str>);

impl Filter {
    fn parse(value: Option<&str>, allowed: &[&'static str], name: &str) -> Result<Filter, String> {
        match value.filter(|v| !v.is_empty()) {
            None => Ok(Filter(None)),
            Some(v) => match allowed.iter().find(|a| **a == v) {
                Some(a) => Ok(Filter(Some(a))),
                None => Err(format!("{name} must be one of {}", allowed.join(", "))),
            },
        }
    }
    fn admits(&self, value: &str) -> bool {
        self.0.is_none_or(|v| v == value)
    }
    /// Whether the filter is set to `value`.
    pub(crate) fn is(&self, value: &str) -> bool {
        self.0 == Some(value)
    }
}

/// Which ledger rows a Mind's page shows.
#[derive(Debug, Clone)]
pub(crate) struct LedgerFilter {
    pub(crate) role: Filter,
    pub(crate) kind: Filter,
    /// Rows whose decision text contains this.
    pub(crate) decision: Option<String>,
    /// Rows within this long of the newest.
    pub(crate) since_ms: Option<i64>,
    pub(crate) since_text: Option<String>,
    pub(crate) limit: usize,
    pub(crate) offset: usize,
    /// Reload the page every so many seconds.
    pub(crate) refresh_s: Option<u32>,
}

impl LedgerFilter {
    fn parse(query: &MindQuery) -> Result<LedgerFilter, String> {
        for (name, value) in [
            ("role", &query.role),
            ("kind", &query.kind),
            ("decision", &query.decision),
            ("since", &query.since),
            ("limit", &query.limit),
            ("offset", &query.offset),
            ("refresh", &query.refresh),
        ] {
            if value
                .as_ref()
                .is_some_and(|v| v.chars().count() > MAX_PARAM_CHARS)
            {
                return Err(format!(
                    "{name} is longer than {MAX_PARAM_CHARS} characters"
                ));
            }
        }
        let number = |name: &str,
                      value: &Option<String>,
                      range: std::ops::RangeInclusive<usize>| {
            match value.as_deref().filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => match v.parse::<usize>() {
                    Ok(n) if range.contains(&n) => Ok(Some(n)),
                    _ => Err(format!(
                        "{name} must be a number from {} to {}",
                        range.start(),
                        range.end()
                    )),
                },
            }
        };
        let since = query.since.as_deref().filter(|v| !v.is_empty());
        let since_ms = match since {
            None => None,
            // jiff's friendly format ("30m", "1h 30m", "2d"); a day counts as 24 hours.
            Some(text) => match text
                .parse::<jiff::Span>()
                .and_then(|s| s.to_duration(jiff::SpanRelativeTo::days_are_24_hours()))
            {
                Ok(d) if d.is_positive() => Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                _ => return Err("since must be a duration such as 30m, 1h or 2d".to_string()),
            },
        };
        Ok(LedgerFilter {
            role: Filter::parse(query.role.as_deref(), &["persona", "self"], "role")?,
            kind: Filter::parse(
                query.kind.as_deref(),
                &["request", "ping", "head_ping", "flush"],
                "kind",
            )?,
            decision: query.decision.clone().filter(|d| !d.is_empty()),
            since_ms,
            since_text: since.map(str::to_owned),
            limit: number("limit", &query.limit, 1..=MAX_SHOWN_ROWS)?.unwrap_or(DEFAULT_ROWS),
            offset: number("offset", &query.offset, 0..=data::MAX_ROWS)?.unwrap_or(0),
            refresh_s: number("refresh", &query.refresh, 5..=3600)?.map(|n| n as u32),
        })
    }

    /// Whether `row` passes (`newest`: the newest row's time, which `since` counts back from).
    pub(crate) fn matches(&self, row: &LedgerRow, newest: i64) -> bool {
        let labels = crate::telemetry::RowLabels::of(row);
        self.role.admits(&row.role)
            && self.kind.admits(labels.kind)
            && self
                .decision
                .as_ref()
                .is_none_or(|d| row.decision.contains(d.as_str()))
            && self
                .since_ms
                .is_none_or(|s| row.at_ms >= newest.saturating_sub(s))
    }
}

async fn mind_page(
    State(state): State<DashState>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    query: Result<Query<MindQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(mind) = path?;
    if raw.as_ref().is_some_and(|q| q.len() > MAX_QUERY_CHARS) {
        return Err(ApiError::bad_request(format!(
            "the query is longer than {MAX_QUERY_CHARS} characters"
        )));
    }
    let Query(query) = query?;
    let filter = LedgerFilter::parse(&query).map_err(ApiError::bad_request)?;
    let view = data::MindView::load(&state.host, &mind).await?;
    let now = state.host.clock.now_ms();
    Ok(Html(page::mind(&view, &filter, now)).into_response())
}

/// The login form's and `?token=`'s field.
#[derive(Debug, Default, Deserialize)]
struct Login {
    token: Option<String>,
}

async fn login_get(
    State(state): State<DashState>,
    query: Result<Query<Login>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(login)) => login_with(&state, login.token),
        Err(_) => login_page(StatusCode::BAD_REQUEST, Some("unreadable query")),
    }
}

async fn login_post(
    State(state): State<DashState>,
    form: Result<Form<Login>, FormRejection>,
) -> Response {
    match form {
        Ok(Form(login)) => login_with(&state, login.token),
        Err(_) => login_page(StatusCode::BAD_REQUEST, Some("unreadable form")),
    }
}

/// Sets the cookie and goes to the overview when `token` is the API token; the form again
/// otherwise. The token is compared in constant time and never echoed.
fn login_with(state: &DashState, token: Option<String>) -> Response {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return login_page(StatusCode::OK, None);
    };
    let cookie_safe = token.len() <= MAX_TOKEN_CHARS
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'));
    if !cookie_safe || !state.token.matches(token.as_bytes()) {
        return login_page(StatusCode::UNAUTHORIZED, Some("that is not the API token"));
    }
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/dashboard")]).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn login_page(status: StatusCode, problem: Option<&str>) -> Response {
    let problem = problem.map_or(String::new(), |p| {
        format!(r#"<p class="error">{}</p>"#, html::esc(p))
    });
    let body = format!(
        r#"<section><h2>Log in</h2><p>The dashboard takes the host's API token (<code>&lt;data_dir&gt;/api-token</code>).</p>{problem}<form method="post" action="{LOGIN_PATH}"><input type="password" name="token" size="66" maxlength="{MAX_TOKEN_CHARS}" autocomplete="current-password"> <button type="submit">Log in</button></form></section>"#
    );
    (status, Html(html::layout("Log in", &body, None))).into_response()
}

async fn logout() -> Response {
    let mut response = to_login();
    let clear = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
