//! Memory notes: newest first, by sender, by text search, and the size limit.

use super::{assert_invalid, mind_with_lease, note, ok, open};
use crate::StoreFactory;
use muninn_store::types::MemoryNote;
use muninn_store::{FencingToken, Store};

pub(super) async fn memory(factory: &dyn StoreFactory) {
    let store = open(factory, "memory").await;
    let token = mind_with_lease(store.as_ref(), "m", "h").await;
    // Each part adds to the notes the ones before it left (the counts below rely on it).
    newest_by_sender_and_by_search(store.as_ref(), token).await;
    the_size_bound_counts_bytes(store.as_ref(), token).await;
    search_folds_ascii_case_only(store.as_ref(), token).await;
    store.close().await;
}

/// Three notes read back newest first, by who they are about, and by a search whose LIKE
/// wildcards are literal.
async fn newest_by_sender_and_by_search(store: &dyn Store, token: FencingToken) {
    let notes = vec![
        note(
            &["@ann:x", "@bob:x"],
            3,
            "Ann and Bob run the Tuesday build",
            100,
        ),
        note(&["@bob:x"], 5, "Bob prefers short answers", 200),
        note(&[], 1, "The burn rate is 100% on Fridays", 300),
    ];
    let ids = ok(store.add_memory("m", token, &notes).await, "add");
    assert!(ids.windows(2).all(|w| w[0] < w[1]));

    let newest = ok(store.memory_newest("m", 10).await, "newest");
    assert_eq!(
        newest.iter().map(|n| n.created_at_ms).collect::<Vec<_>>(),
        vec![300, 200, 100]
    );
    assert_eq!(
        newest[2].about,
        vec!["@ann:x", "@bob:x"],
        "about keeps its order"
    );
    assert_eq!(newest[2].salience, 3);
    assert_eq!(newest[2].source, "batch-1");
    assert_eq!(newest[2].mind, "m");
    assert_eq!(newest[2].id, ids[0]);
    assert_eq!(ok(store.memory_newest("m", 1).await, "newest 1").len(), 1);

    let bob: Vec<i64> = ok(store.memory_about("m", "@bob:x", 10).await, "about bob")
        .iter()
        .map(|n| n.created_at_ms)
        .collect();
    assert_eq!(bob, vec![200, 100]);
    assert_eq!(
        ok(store.memory_about("m", "@nobody", 10).await, "nobody"),
        vec![]
    );

    let found = ok(store.memory_search("m", "BOB", 10).await, "search");
    assert_eq!(found.len(), 2, "search is case-insensitive");
    let percent = ok(store.memory_search("m", "100%", 10).await, "search percent");
    assert_eq!(percent.len(), 1, "LIKE wildcards in the needle are literal");
    assert_eq!(
        ok(store.memory_search("m", "_", 10).await, "underscore"),
        vec![]
    );
}

/// The 1000-byte bound counts bytes, not characters; a batch with one note over it writes none.
async fn the_size_bound_counts_bytes(store: &dyn Store, token: FencingToken) {
    let exactly = "é".repeat(500);
    ok(
        store
            .add_memory("m", token, &[note(&[], 1, &exactly, 400)])
            .await,
        "1000 bytes",
    );
    let over = format!("{exactly}x");
    assert_invalid(
        store
            .add_memory(
                "m",
                token,
                &[note(&[], 1, "fine", 500), note(&[], 1, &over, 501)],
            )
            .await,
        "1001 bytes",
    );
    assert_eq!(
        ok(store.memory_newest("m", 10).await, "after invalid").len(),
        4,
        "a batch with one bad note writes none"
    );
}

/// Search folds ASCII case only, on every backend: a non-ASCII letter matches itself, in the
/// case it was written in.
async fn search_folds_ascii_case_only(store: &dyn Store, token: FencingToken) {
    let written = "Über den Wolken, ÉCOLE";
    ok(
        store
            .add_memory("m", token, &[note(&[], 1, written, 600)])
            .await,
        "non-ASCII",
    );
    let texts = |found: Vec<MemoryNote>| found.into_iter().map(|n| n.text).collect::<Vec<_>>();
    for needle in ["Über", "ÜBER den", "ÉCOLE", "wolken, É"] {
        assert_eq!(
            texts(ok(store.memory_search("m", needle, 10).await, needle)),
            vec![written],
            "{needle:?} finds the note"
        );
    }
    for needle in ["über", "école"] {
        assert_eq!(
            texts(ok(store.memory_search("m", needle, 10).await, needle)),
            Vec::<String>::new(),
            "{needle:?}: non-ASCII letters are not case-folded"
        );
    }
}
