//! Unit tests of the wire types: how they serialise, as the ledger stores them.

use super::*;
use serde_json::json;

/// The ledger's `events` hold these objects: their shape is a stored format.
#[test]
fn session_events_serialise_as_the_ledger_stores_them() {
    let usage = Usage {
        input: 1,
        cache_write_5m: 2,
        cache_write_1h: 0,
        cache_read: 3,
        output: 4,
    };
    let cases = [
        (
            SessionEvent::Relaunched {
                session_id: "s".into(),
            },
            json!({"type": "relaunched", "session_id": "s"}),
        ),
        (
            SessionEvent::Parked {
                session_id: "s".into(),
                pid: 7,
                rss_kib: None,
            },
            json!({"type": "parked", "session_id": "s", "pid": 7, "rss_kib": null}),
        ),
        (
            SessionEvent::Unparked {
                session_id: "s".into(),
            },
            json!({"type": "unparked", "session_id": "s"}),
        ),
        (
            SessionEvent::Reseeded {
                old_session_id: "a".into(),
                new_session_id: "b".into(),
                reason: "gone".into(),
                seed_tokens: 42,
            },
            json!({"type": "reseeded", "old_session_id": "a", "new_session_id": "b",
                   "reason": "gone", "seed_tokens": 42}),
        ),
        (
            SessionEvent::Forked {
                from: "a".into(),
                to: "b".into(),
            },
            json!({"type": "forked", "from": "a", "to": "b"}),
        ),
        (
            SessionEvent::Compacted {
                session_id: "s".into(),
                trigger: "auto".into(),
                pre_tokens: Some(975_028),
                post_tokens: None,
                outside: true,
                usage: Some(usage),
            },
            json!({"type": "compacted", "session_id": "s", "trigger": "auto",
                   "pre_tokens": 975028, "post_tokens": null, "outside": true,
                   "usage": serde_json::to_value(usage).unwrap()}),
        ),
        (
            SessionEvent::ResumedSegment {
                segment: 3,
                fork: false,
                items: 12,
                at_ms: 1_000,
            },
            json!({"type": "resumed_segment", "segment": 3, "fork": false, "items": 12,
                   "at_ms": 1000}),
        ),
        (
            SessionEvent::CompactFailed {
                error: "this backend cannot compact".into(),
            },
            json!({"type": "compact_failed", "error": "this backend cannot compact"}),
        ),
    ];
    for (event, expected) in cases {
        assert_eq!(serde_json::to_value(&event).unwrap(), expected);
        assert_eq!(
            serde_json::from_value::<SessionEvent>(expected).unwrap(),
            event
        );
    }
}

#[test]
fn unsupported_names_the_capability() {
    let e = BackendError::Unsupported {
        capability: Capability::Compact,
    };
    assert_eq!(e.to_string(), "this backend cannot compact");
    assert_eq!(
        BackendError::Unsupported {
            capability: Capability::CustomTools
        }
        .to_string(),
        "this backend cannot offer custom tools"
    );
}
