//! The dashboard over HTTP: a host that ran the scripted workload of `telemetry.rs` on the
//! in-process simulator, served on loopback. Its figures equal the ledger's, its comparison
//! equals `muninn replay` on the ledger's export, it takes the token as a cookie (never echoing
//! it), and every query parameter is bounded. (`browser.rs` drives it in a real browser.)

use crate::runtime::{World, ledger, mind, mind_toml, runner, world_with};
use crate::telemetry::{WORKLOAD_MIND, workload};
use muninn_api::ApiToken;
use muninn_core::cache::CacheRules;
use muninn_core::decide::Policy;
use muninn_core::replay::{Assumptions, Plan, ReplayConfig, replay_trace};
use muninn_host::http::serve;
use muninn_host::runtime::run_mind;

/// The token the served host takes.
pub(crate) const TOKEN: &str = "dashboard-test-token-0123456789abcdef";

/// A host that ran the scripted workload, its API and dashboard on loopback.
pub(crate) struct Served {
    pub(crate) w: World,
    pub(crate) base: String,
    stop: tokio::sync::watch::Sender<bool>,
    runner: Option<tokio::task::JoinHandle<Result<(), muninn_host::runtime::RuntimeError>>>,
}

impl Served {
    /// Runs the workload, then serves; with `live`, the Mind's runner goes on running (idle,
    /// on the frozen clock) so its state is live.
    pub(crate) async fn start(live: bool) -> Served {
        let w = world_with(&format!("[[mind]]\n{}", mind_toml(WORKLOAD_MIND))).await;
        let mut r = runner(&w, mind(WORKLOAD_MIND), "host-a");
        workload(&w, &mut r).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut api_stopped = stopped.clone();
        tokio::spawn(serve(
            w.host.clone(),
            ApiToken::new(TOKEN),
            listener,
            async move {
                let _ = api_stopped.changed().await;
            },
        ));
        let runner = live.then(|| tokio::spawn(run_mind(r, stopped)));
        muninn_anthropic::client::install_ring_provider();
        Served {
            w,
            base,
            stop,
            runner,
        }
    }

    /// Stops the server and the runner.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(runner) = self.runner.take() {
            runner.await.unwrap().unwrap();
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `data-value` of the figure with `id` in a page.
fn figure(html: &str, id: &str) -> String {
    let start = html
        .find(&format!(r#"id="{id}" data-value=""#))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let rest = &html[start + id.len() + 18..];
    rest[..rest.find('"').unwrap()].to_string()
}

#[tokio::test]
async fn the_dashboard_takes_the_token_as_a_cookie_it_never_shows() {
    let served = Served::start(false).await;
    let http = client();
    let base = &served.base;
    let page = format!("{base}/dashboard/minds/vala");

    // Without the token: to the login page. A wrong token sets nothing.
    let r = http.get(&page).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/dashboard/login");
    let r = http
        .get(format!("{base}/dashboard/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .get(format!("{base}/dashboard/login?token=wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let r = http
        .get(format!("{base}/dashboard/login?token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/dashboard");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert_eq!(
        cookie,
        format!("muninn_token={TOKEN}; HttpOnly; SameSite=Strict; Path=/")
    );
    let cookie = format!("muninn_token={TOKEN}");
    // The login form posts too.
    let r = http
        .post(format!("{base}/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);

    let html = http
        .get(&page)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains(r#"id="turns""#));
    assert!(!html.contains(TOKEN), "the page carries the token");
    // The API takes the cookie only with the dashboard's header.
    let api = format!("{base}/v1/minds/vala/settings");
    let r = http
        .get(&api)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(&api)
        .header("cookie", &cookie)
        .header("x-muninn-dashboard", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    served.stop().await;
}

#[tokio::test]
async fn the_figures_and_segments_are_the_ledgers() {
    let served = Served::start(false).await;
    let http = client();
    let base = &served.base;
    let page = format!("{base}/dashboard/minds/vala");
    let html = http
        .get(&page)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rows = ledger(&served.w).await;
    let turns = rows
        .iter()
        .filter(|r| {
            r.boundary
                && r.decided
                    .as_ref()
                    .is_some_and(|d| d.kind == muninn_core::ledger::RowKind::Request)
        })
        .count();
    assert_eq!(figure(&html, "turns"), turns.to_string());
    assert_eq!(figure(&html, "requests"), rows.len().to_string());
    let cost: i64 = rows.iter().map(|r| r.cost.0).sum();
    assert_eq!(figure(&html, "total-cost"), cost.to_string());
    for chart in [
        "chart-cumulative",
        "chart-per-turn",
        "chart-prefix",
        "chart-segments",
    ] {
        assert!(html.contains(&format!(r#"<svg id="{chart}""#)), "{chart}");
    }
    assert!(html.contains(r#"id="brake-toggle""#) && html.contains(r#"id="caps-form""#));
    // Every segment is listed, each closed one with why it ended.
    let segments = served
        .w
        .host
        .store
        .segments("vala", muninn_store::Role::Persona)
        .await
        .unwrap();
    assert!(segments.len() >= 2, "the workload refreshes: {segments:?}");
    assert!(html.contains("why it ended"));
    // The bearer header works as well; the overview lists the Mind.
    let overview = http
        .get(format!("{base}/dashboard"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(overview.contains(r#"href="/dashboard/minds/vala""#));

    served.stop().await;
}

/// What the dashboard says rebuild-every-turn and never-refresh would have cost is what
/// `muninn replay` says on the Mind's ledger export, under the Mind's own assumptions.
#[tokio::test]
async fn the_comparison_is_the_replay_of_the_ledger_export() {
    let served = Served::start(false).await;
    let rows = ledger(&served.w).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.jsonl");
    let lines: Vec<String> = rows
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let import = muninn_import::import_paths(
        std::slice::from_ref(&path),
        &muninn_import::ImportOptions::default(),
        &mut |_, _| {},
    )
    .unwrap();
    let m = mind(WORKLOAD_MIND);
    let assumptions = Assumptions {
        rehydrate_tokens: m.memory_tokens,
        min_segment_requests: m.min_segment,
        ceiling_tokens: m.ceiling_tokens,
        ttl: Some(m.tail_ttl),
        head_ttl: Some(m.head_ttl),
        ..Assumptions::default()
    };
    let prices = muninn_core::price::PriceTable::embedded();
    let rules = CacheRules::default();
    let total = |policy| -> i64 {
        import
            .traces
            .iter()
            .map(|t| {
                let config = ReplayConfig {
                    price: prices.model(&t.model).unwrap(),
                    assumptions: &assumptions,
                    rules: &rules,
                };
                replay_trace(t, Plan::Online(policy), &config, &mut |_| {})
                    .cost
                    .0
            })
            .sum()
    };
    let html = client()
        .get(format!("{}/dashboard/minds/vala", served.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rebuild = total(Policy::Rebuild);
    let never = total(Policy::Never);
    assert!(rebuild > 0 && never > 0);
    assert_eq!(figure(&html, "rebuild-cost"), rebuild.to_string());
    assert_eq!(figure(&html, "never-cost"), never.to_string());
    served.stop().await;
}

#[tokio::test]
async fn every_query_parameter_is_bounded_and_filters_the_ledger() {
    let served = Served::start(false).await;
    let http = client();
    let get = |query: String| {
        let http = http.clone();
        let url = format!("{}/dashboard/minds/vala?{query}", served.base);
        async move {
            let r = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let long = "x".repeat(65);
    for (query, why) in [
        (format!("decision={long}"), "longer than 64"),
        (
            "limit=0".to_string(),
            "limit must be a number from 1 to 1000",
        ),
        (
            "limit=5000".to_string(),
            "limit must be a number from 1 to 1000",
        ),
        (
            "role=admin".to_string(),
            "role must be one of persona, self",
        ),
        ("since=yesterday".to_string(), "since must be a duration"),
        (
            "refresh=1".to_string(),
            "refresh must be a number from 5 to 3600",
        ),
        ("bogus=1".to_string(), "unknown field"),
        (
            format!("decision=a&{}", "role=&".repeat(200)),
            "longer than 1024",
        ),
    ] {
        let (status, body) = get(query.clone()).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(why), "{query}: {body}");
    }
    let rows = ledger(&served.w).await;
    let pings = rows
        .iter()
        .filter(|r| r.role == "persona" && r.decision.starts_with("ping:"))
        .count();
    assert!(pings > 0);
    let (status, body) = get("role=persona&kind=ping&limit=1&since=30d".to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!(
            r#"id="ledger-count">{pings} of {} rows match; newest first, showing 1 from 1."#,
            rows.len()
        )),
        "{body}"
    );
    served.stop().await;
}

/// The caps form carries no brake (saving caps from a page rendered before `muninn brake on`
/// released it), and the brake button sends nothing but the brake to the Mind's brake route
/// (it carried the caps as rendered, undoing a caps change made since).
#[tokio::test]
async fn the_caps_form_sends_no_brake_and_the_brake_button_no_caps() {
    let served = Served::start(false).await;
    let html = client()
        .get(format!("{}/dashboard/minds/vala", served.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let form = |id: &str| {
        let start = html.find(&format!(r#"id="{id}""#)).expect(id);
        let end = start + html[start..].find("</form>").expect("</form>");
        html[start..end].to_owned()
    };
    let caps = form("caps-form");
    assert!(!caps.contains(r#"data-json="brake""#), "{caps}");
    let brake = form("brake-form");
    assert!(!brake.contains("data-json"), "{brake}");
    assert!(
        brake.contains(r#"data-api="/v1/minds/vala/brake" data-method="POST""#),
        "{brake}"
    );
    served.stop().await;
}
