//! Segments: numbered per role, one open at a time, with their session ids and memory.

use super::{assert_not_found, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_store::{Store, types::*};

pub(super) async fn segments(factory: &dyn StoreFactory) {
    let opened = open(factory, "segments").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    let self_first = step!(segments_number_from_zero_per_role(store, token));
    step!(starting_a_segment_ends_the_open_one(store, token));
    step!(a_segment_ends_once(store, token, self_first));
    store.close().await;
}

/// The first segment of each role is number 0, open, with the session id set on it later; an
/// empty memory is kept as empty, not none. Returns the Self's.
async fn segments_number_from_zero_per_role(store: &dyn Store, token: FencingToken) -> Segment {
    assert_eq!(
        ok(store.current_segment("m", Role::Persona).await, "none"),
        None
    );
    let first = ok(
        store
            .start_segment(
                "m",
                token,
                &NewSegment {
                    role: Role::Persona,
                    started_at_ms: 100,
                    rehydration_tokens: 5_000,
                    reason: "cold start".into(),
                    session_id: None,
                    memory: None,
                    spec_digest: None,
                },
            )
            .await,
        "start 0",
    );
    assert_eq!(first.number, 0);
    assert_eq!(first.ended_at_ms, None);
    let with_session = ok(
        store
            .set_segment_session("m", token, Role::Persona, 0, "sess-0")
            .await,
        "set session",
    );
    assert_eq!(with_session.session_id.as_deref(), Some("sess-0"));
    assert_eq!(with_session.memory, None, "no memory stays none");
    assert_eq!(with_session.spec_digest, None);
    // The Self's segments are numbered independently.
    let self_first = ok(
        store
            .start_segment(
                "m",
                token,
                &NewSegment {
                    role: Role::SelfRole,
                    started_at_ms: 150,
                    rehydration_tokens: 9_000,
                    reason: "brief".into(),
                    session_id: Some("self-sess".into()),
                    memory: Some(String::new()),
                    spec_digest: Some("self-digest".into()),
                },
            )
            .await,
        "start self 0",
    );
    assert_eq!(self_first.number, 0);
    assert_eq!(
        self_first.memory.as_deref(),
        Some(""),
        "empty memory is not none"
    );
    self_first
}

/// The next segment of a role ends the open one and keeps its memory byte for byte.
async fn starting_a_segment_ends_the_open_one(store: &dyn Store, token: FencingToken) {
    let second = ok(
        store
            .start_segment(
                "m",
                token,
                &NewSegment {
                    role: Role::Persona,
                    started_at_ms: 200,
                    rehydration_tokens: 4_000,
                    reason: "growth: read excess reached rebuild".into(),
                    session_id: Some("sess-1".into()),
                    // Memory is kept byte for byte: a restarted host rebuilds the segment's
                    // system prompt from it.
                    memory: Some("- (ari) likes \"rye\" bread\n- (bo) ßø 🦜\n".into()),
                    spec_digest: Some("0123456789abcdef".into()),
                },
            )
            .await,
        "start 1",
    );
    assert_eq!(second.number, 1);
    let all = ok(store.segments("m", Role::Persona).await, "list");
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[0].ended_at_ms,
        Some(200),
        "starting a segment ends the open one"
    );
    assert_eq!(all[0].session_id.as_deref(), Some("sess-0"));
    assert_eq!(all[1], second);
    assert_eq!(
        all[1].memory.as_deref(),
        Some("- (ari) likes \"rye\" bread\n- (bo) ßø 🦜\n")
    );
    assert_eq!(all[1].spec_digest.as_deref(), Some("0123456789abcdef"));
    let self_read = ok(store.current_segment("m", Role::SelfRole).await, "self");
    assert_eq!(self_read.and_then(|s| s.memory).as_deref(), Some(""));
    // A page of the newest, oldest first: the Persona's two, the last one, none.
    for (limit, expected) in [(5, vec![0, 1]), (1, vec![1]), (0, vec![])] {
        let page = ok(
            store.newest_segments("m", Role::Persona, None, limit).await,
            "newest",
        );
        let numbers: Vec<i64> = page.iter().map(|s| s.number).collect();
        assert_eq!(numbers, expected, "newest {limit}");
    }
    let page = ok(
        store.newest_segments("m", Role::Persona, None, 1).await,
        "newest",
    );
    assert_eq!(page, vec![second], "whole rows");
    // The page before a number: the segments below it, the newest of them.
    for (before, limit, expected) in [(1, 5, vec![0]), (0, 5, vec![]), (2, 1, vec![1])] {
        let page = ok(
            store
                .newest_segments("m", Role::Persona, Some(before), limit)
                .await,
            "before",
        );
        let numbers: Vec<i64> = page.iter().map(|s| s.number).collect();
        assert_eq!(numbers, expected, "before {before}, limit {limit}");
    }
}

/// A segment ends once (the first end time stays) and stays current; unknown segments are not
/// found.
async fn a_segment_ends_once(store: &dyn Store, token: FencingToken, self_first: Segment) {
    let ended = ok(
        store.end_segment("m", token, Role::Persona, 1, 300).await,
        "end",
    );
    assert_eq!(ended.ended_at_ms, Some(300));
    let again = ok(
        store.end_segment("m", token, Role::Persona, 1, 400).await,
        "end again",
    );
    assert_eq!(again.ended_at_ms, Some(300), "the first end time stays");
    assert_eq!(
        ok(store.current_segment("m", Role::Persona).await, "current"),
        Some(again)
    );
    assert_eq!(
        ok(
            store.current_segment("m", Role::SelfRole).await,
            "current self"
        ),
        Some(self_first)
    );
    assert_not_found(
        store.end_segment("m", token, Role::Persona, 9, 1).await,
        "unknown",
    );
    assert_not_found(
        store
            .set_segment_session("m", token, Role::Persona, 9, "x")
            .await,
        "unknown session",
    );
}
