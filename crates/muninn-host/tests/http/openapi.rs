//! The checked-in OpenAPI document against the routes served and the status fields sent.

use super::*;
use pretty_assertions::assert_eq;

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
    s.host.telemetry.transport_gaps_cut(
        "vala",
        "matrix",
        muninn_api::wire::TransportGapsCut {
            count: 2,
            last_room: "!busy:example.org".into(),
            last_at_ms: s.clock.now(),
            last_events_read: 5_000,
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
    assert_eq!(served["transport"]["gaps_cut"]["count"], 2, "{served}");
    check(&served["transport"]["gaps_cut"], "TransportGapsCut");
}
