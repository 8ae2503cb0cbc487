//! Bounds on what comes in: every API field over its limit is a `400` naming the field and the
//! limit, settings cannot wrap, and configuration numbers past their ceilings fail the load.

use crate::limits::start;
use muninn_api::limits::{
    CONTEXT_MAX_BYTES, CONTEXT_MAX_LINES, ROOM_MAX_BYTES, SOURCE_ID_MAX_BYTES, TEXT_MAX_BYTES,
};
use muninn_host::config::{ApiConfig, Config, ConfigError};
use serde_json::{Value, json};

async fn send(
    server: &crate::limits::Limited,
    method: reqwest::Method,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    let response = reqwest::Client::new()
        .request(method, format!("http://{}{path}", server.addr))
        .bearer_auth(&server.token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn delivery() -> Value {
    json!({"room": "#swarm", "sender": "@ada", "text": "hello", "source_id": "e1"})
}

/// A 400 `limit_exceeded` whose message names `field` and `limit`.
fn assert_limit(answer: &(u16, Value), field: &str, limit: usize) {
    let (status, body) = answer;
    assert_eq!(*status, 400, "{body}");
    assert_eq!(body["error"]["type"], "limit_exceeded", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{field}: "))
            && message.contains(&format!("limit of {limit} ")),
        "{message}"
    );
}

/// The delivery with `key` set to `value`.
fn with(key: &str, value: Value) -> Value {
    let mut body = delivery();
    body[key] = value;
    body
}

/// Each delivery with one field over its limit, the field and the limit its 400 must name.
fn delivery_fields_over_their_limits() -> Vec<(Value, &'static str, usize)> {
    let long = |n: usize| "x".repeat(n);
    let line = |text: &str| json!({"id": "e0", "sender": "@bo", "text": text});
    vec![
        (
            with("room", json!(format!("#{}", long(ROOM_MAX_BYTES)))),
            "room",
            ROOM_MAX_BYTES,
        ),
        (with("sender", json!(long(256))), "sender", 255),
        (
            with("source_id", json!(long(SOURCE_ID_MAX_BYTES + 1))),
            "source_id",
            SOURCE_ID_MAX_BYTES,
        ),
        (
            with("text", json!(long(TEXT_MAX_BYTES + 1))),
            "text",
            TEXT_MAX_BYTES,
        ),
        (
            with("context", json!(vec![line("hi"); CONTEXT_MAX_LINES + 1])),
            "context",
            CONTEXT_MAX_LINES,
        ),
        (
            with(
                "context",
                json!([{"id": long(256), "sender": "@bo", "text": "hi"}]),
            ),
            "context[0].id",
            255,
        ),
        (
            with(
                "context",
                json!(vec![line(&long(CONTEXT_MAX_BYTES / 4)); 4]),
            ),
            "context",
            CONTEXT_MAX_BYTES,
        ),
    ]
}

#[tokio::test]
async fn every_delivery_field_over_its_limit_is_a_400_naming_it() {
    let server = start(ApiConfig::default()).await;
    let post = reqwest::Method::POST;
    let path = "/v1/minds/vala/deliveries";
    let (status, _) = send(&server, post.clone(), path, &delivery()).await;
    assert_eq!(status, 201, "the baseline is accepted");

    for (body, field, limit) in delivery_fields_over_their_limits() {
        assert_limit(
            &send(&server, post.clone(), path, &body).await,
            field,
            limit,
        );
    }
    // A megabyte room name is over the body limit before any field is looked at.
    let (status, body) = send(
        &server,
        post.clone(),
        path,
        &with("room", json!("x".repeat(1 << 20))),
    )
    .await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (413, json!("payload_too_large"))
    );

    let brief = json!({"text": "x".repeat(muninn_api::limits::BRIEF_MAX_BYTES + 1)});
    let answer = send(&server, post.clone(), "/v1/minds/vala/briefs", &brief).await;
    assert_limit(&answer, "text", muninn_api::limits::BRIEF_MAX_BYTES);
    let ack = format!("/v1/minds/vala/outbox/{}/ack", "x".repeat(300));
    assert_limit(
        &send(&server, post, &ack, &json!({})).await,
        "request_id",
        255,
    );
}

/// `turn_limit: 4294967296` once wrapped to 0 and stopped the Mind; now it is refused, as is
/// any number past its ceiling, and the stored settings are unchanged.
#[tokio::test]
async fn settings_that_would_wrap_are_refused() {
    let server = start(ApiConfig::default()).await;
    let path = "/v1/minds/vala/settings";
    let put = reqwest::Method::PUT;
    for (field, value, limit) in [
        ("turn_limit", 4_294_967_296_i64, 1_000_usize),
        ("spend_window_ms", i64::MAX, 366 * 86_400_000),
        ("spend_cap_micro_usd", i64::MAX, 1_000_000_000_000),
    ] {
        let body = json!({ field: value });
        assert_limit(&send(&server, put.clone(), path, &body).await, field, limit);
    }
    let (status, stored) = send(&server, reqwest::Method::GET, path, &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(stored["turn_limit"], Value::Null, "{stored}");
    let (status, _) = send(&server, put, path, &json!({"turn_limit": 1000})).await;
    assert_eq!(status, 200, "the ceiling itself is allowed");
}

const BASE: &str = r##"
data_dir = "data"
listen = "127.0.0.1:0"

[[mind]]
id = "vala"
doctrine_text = "Be brief."
"##;

fn load(extra_top: &str, extra_mind: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    // A table (`[api]`) goes after the Mind, a top-level key before everything.
    let text = if extra_top.starts_with('[') {
        format!("{BASE}{extra_mind}\n{extra_top}\n")
    } else {
        format!("{extra_top}\n{BASE}{extra_mind}\n")
    };
    let path = dir.path().join("muninn.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path))
}

#[test]
fn configuration_numbers_past_their_ceilings_fail_the_load_naming_the_field() {
    assert!(load("", "").is_ok());
    let cases: &[(&str, &str, &str)] = &[
        ("lease_ttl_ms = 9223372036854775807", "", "lease_ttl_ms"),
        ("", "turns_per_wake = 100000", "mind[0].turns_per_wake"),
        (
            "",
            "spend_window_s = 18446744073709551615",
            "mind[0].spend_window_s",
        ),
        (
            "",
            "max_output_tokens = 1000000000000",
            "mind[0].max_output_tokens",
        ),
        ("", "ceiling_tokens = 9000000000", "mind[0].ceiling_tokens"),
        ("", "memory_tokens = 9000000000", "mind[0].memory_tokens"),
        (
            "",
            "spend_cap_micro_usd = 9223372036854775807",
            "mind[0].spend_cap_micro_usd",
        ),
        ("[api]\nmax_connections = 0", "", "api.max_connections"),
        (
            "[api]\nheader_read_timeout_s = 0",
            "",
            "api.header_read_timeout_s",
        ),
        (
            "[api]\nbody_read_timeout_s = 100000",
            "",
            "api.body_read_timeout_s",
        ),
        ("[api]\nmax_body_bytes = 1", "", "api.max_body_bytes"),
        (
            "[backend]\nattempt_timeout_s = 100000",
            "",
            "backend.attempt_timeout_s",
        ),
    ];
    for (top, mind, field) in cases {
        let error = load(top, mind).unwrap_err();
        assert_eq!(error.fields(), vec![*field], "{top} {mind}: {error}");
        assert!(error.to_string().contains(field), "{error}");
    }
    // Past the type itself: refused by the parser, naming the value and the type.
    let error = load("", "turns_per_wake = 4294967296")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("4294967296") && error.contains("u32"),
        "{error}"
    );
}
