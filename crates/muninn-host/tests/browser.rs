//! The dashboard in a real browser: Debian's headless Chromium, driven by its chromedriver over
//! WebDriver (plain HTTP from reqwest). The host ran the scripted workload and its runner is
//! live; the browser logs in with the token, the page's figures equal the ledger's, a click on
//! the brake brakes the Mind (the page says so after its reload), and the page is saved as
//! `docs/dashboard.png` for docs/host.md. The caps form, typed into and saved, writes the caps,
//! and shows the API's conflict when they changed underneath.

use crate::dashboard::{Served, TOKEN};
use crate::runtime::ledger;
use base64::Engine;
use muninn_testkit::peers::{Browser, chromium};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One WebDriver call: a JSON body (if any) in, the JSON answer out (`Null` if unreadable).
async fn wire(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<&Value>,
) -> Value {
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    match request.send().await {
        Ok(r) => {
            serde_json::from_slice(&r.bytes().await.unwrap_or_default()).unwrap_or(Value::Null)
        }
        Err(_) => Value::Null,
    }
}

/// One chromedriver and one browser session, both ended on drop.
struct Driver {
    http: reqwest::Client,
    base: String,
    port: u16,
    session: String,
    /// Killed when the driver drops, after `Drop` ended the session.
    _child: Killed,
    _profile: tempfile::TempDir,
}

/// chromedriver, killed when dropped (also when the session could not be made).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Driver {
    async fn start(browser: &Browser) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Killed(
            Command::new(&browser.chromedriver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = wire(&http, reqwest::Method::GET, format!("{base}/status"), None).await;
            if status["value"]["ready"] == true {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser.chromium,
                "args": Browser::args(profile.path()),
            },
        }}});
        let created = wire(
            &http,
            reqwest::Method::POST,
            format!("{base}/session"),
            Some(&capabilities),
        )
        .await;
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        Driver {
            http,
            base,
            port,
            session,
            _child: child,
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let answer = wire(&self.http, method, url, body.as_ref()).await;
        assert!(answer["value"].get("error").is_none(), "{path}: {answer}");
        answer["value"].clone()
    }

    async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT].as_str().unwrap().to_string()
    }

    async fn text(&self, css: &str) -> String {
        let element = self.find(css).await;
        let text = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                None,
            )
            .await;
        text.as_str().unwrap().to_string()
    }

    async fn attribute(&self, css: &str, name: &str) -> String {
        let element = self.find(css).await;
        let path = format!("/element/{element}/attribute/{name}");
        let value = self.call(reqwest::Method::GET, &path, None).await;
        value.as_str().unwrap_or_default().to_string()
    }

    async fn click(&self, css: &str) {
        let element = self.find(css).await;
        let path = format!("/element/{element}/click");
        self.call(reqwest::Method::POST, &path, Some(json!({})))
            .await;
    }

    /// Replaces an input's value with `text`, typed as a person would.
    async fn fill(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        let clear = format!("/element/{element}/clear");
        self.call(reqwest::Method::POST, &clear, Some(json!({})))
            .await;
        let value = format!("/element/{element}/value");
        self.call(reqwest::Method::POST, &value, Some(json!({"text": text})))
            .await;
    }

    async fn screenshot(&self) -> Vec<u8> {
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap()
    }

    /// Polls `css`'s text until `done` holds.
    async fn wait_text(&self, css: &str, done: impl Fn(&str) -> bool) -> String {
        self.wait_for(css, "text", done).await
    }

    /// Polls `css`'s attribute `name` until `done` holds.
    async fn wait_attribute(&self, css: &str, name: &str, done: impl Fn(&str) -> bool) -> String {
        self.wait_for(css, &format!("attribute/{name}"), done).await
    }

    /// Polls `GET /element/{id}/<what>` of `css` until `done` holds.
    async fn wait_for(&self, css: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // The page may be between its unload and its reload: look again.
            let session = format!("{}/session/{}", self.base, self.session);
            let query = json!({"using": "css selector", "value": css});
            let found = wire(
                &self.http,
                reqwest::Method::POST,
                format!("{session}/element"),
                Some(&query),
            )
            .await;
            if let Some(element) = found["value"][ELEMENT].as_str() {
                let url = format!("{session}/element/{element}/{what}");
                let text = wire(&self.http, reqwest::Method::GET, url, None).await;
                if let Some(text) = text["value"].as_str()
                    && done(text)
                {
                    return text.to_string();
                }
            }
            assert!(Instant::now() < deadline, "{css} never changed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Driver {
    /// Ends the session — chromedriver then quits the browser it started (killing chromedriver
    /// alone would leave the browser running) — and then chromedriver (its field's drop). Plain
    /// blocking HTTP, so it also runs when a failed assertion unwinds.
    fn drop(&mut self) {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session, self.port
            );
            let _ = stream.write_all(request.as_bytes());
            let _ = stream.read_to_end(&mut Vec::new());
        }
        // Then the fields drop: chromedriver is killed.
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let served = Served::start(true).await;
    let driver = Driver::start(&browser).await;
    let base = &served.base;

    // Logged in with the token, the browser holds the cookie and lands on the overview.
    driver
        .goto(&format!("{base}/dashboard/login?token={TOKEN}"))
        .await;
    assert!(driver.text("#minds").await.contains("vala"));
    driver.goto(&format!("{base}/dashboard/minds/vala")).await;

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
    let cost: i64 = rows.iter().map(|r| r.cost.0).sum();
    assert_eq!(driver.text("#turns").await, turns.to_string());
    assert_eq!(
        driver.attribute("#total-cost", "data-value").await,
        cost.to_string()
    );
    let shown = driver.text("#total-cost").await;
    assert_eq!(
        shown,
        format!("${:.4}", cost as f64 / 1e6),
        "as people read it"
    );
    assert!(driver.text("#state").await.starts_with("IDLE until"));
    assert_eq!(driver.text("#pending").await, "0");
    // The charts rendered with their lines (the SVG is in the page, drawn by the browser).
    assert!(
        driver
            .text("#chart-cumulative")
            .await
            .contains("rebuild every turn")
    );

    let png = driver.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"));
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("dashboard.png"), &png).unwrap();

    // The brake, clicked: the API brakes the Mind, the page reloads and says so.
    driver.click("#brake-toggle").await;
    driver
        .wait_text("#state", |t| t.starts_with("BRAKED"))
        .await;
    assert!(served.w.host.store.settings("vala").await.unwrap().brake);
    assert_eq!(driver.text("#brake-toggle").await, "Release the brake");
    // Released again from the page.
    driver.click("#brake-toggle").await;
    driver.wait_text("#brake-toggle", |t| t == "Brake").await;
    assert!(!served.w.host.store.settings("vala").await.unwrap().brake);
    drop(driver);
    served.stop().await;
}

/// The caps form in the browser: a turn limit typed and saved reaches the store, and the page,
/// reloaded, shows it; then, with the caps changed underneath (another operator), the page's
/// next save is refused with the conflict message, nothing written; read again, it goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caps_form_saves_and_shows_a_conflict() {
    let Some(browser) = chromium() else { return };
    let served = Served::start(false).await;
    let driver = Driver::start(&browser).await;
    let base = &served.base;
    let store = &served.w.host.store;
    driver
        .goto(&format!("{base}/dashboard/login?token={TOKEN}"))
        .await;
    driver.goto(&format!("{base}/dashboard/minds/vala")).await;
    const TURNS: &str = "#caps-form input[name=turns]";
    const CAP: &str = "#caps-form input[name=cap]";
    const SAVE: &str = "#caps-form button[type=submit]";

    driver.fill(TURNS, "7").await;
    driver.click(SAVE).await;
    // Saved, the page reloads and was rendered from the caps written.
    driver
        .wait_attribute(TURNS, "data-read", |read| read == "7")
        .await;
    let settings = store.settings("vala").await.unwrap();
    assert_eq!((settings.turn_limit, settings.spend_cap), (Some(7), None));

    // Another operator sets the turn limit; the page still shows 7.
    let theirs = muninn_store::Caps {
        turn_limit: Some(9),
        ..muninn_store::Caps::default()
    };
    store.put_caps("vala", &theirs, None, 0).await.unwrap();
    driver.fill(CAP, "2").await;
    driver.click(SAVE).await;
    let shown = driver
        .wait_text("#caps-form .error", |t| !t.is_empty())
        .await;
    assert!(
        shown.starts_with("the caps changed since they were read"),
        "{shown}"
    );
    let settings = store.settings("vala").await.unwrap();
    assert_eq!(
        (settings.turn_limit, settings.spend_cap),
        (Some(9), None),
        "nothing written"
    );

    // Read again (the page reloaded by hand), the same edit keeps theirs.
    driver.goto(&format!("{base}/dashboard/minds/vala")).await;
    assert_eq!(driver.attribute(TURNS, "value").await, "9");
    driver.fill(CAP, "2").await;
    driver.click(SAVE).await;
    driver
        .wait_attribute(CAP, "data-read", |read| read == "2000000")
        .await;
    let settings = store.settings("vala").await.unwrap();
    assert_eq!(
        (settings.turn_limit, settings.spend_cap),
        (Some(9), Some(muninn_core::money::MicroUsd(2_000_000)))
    );
    drop(driver);
    served.stop().await;
}
