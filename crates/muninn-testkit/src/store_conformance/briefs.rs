//! The brief queue: queued, claimed one at a time, finished as done or failed.

use super::{assert_invalid, assert_not_found, brief, mind_with_lease, ok, open};
use crate::StoreFactory;
use muninn_store::{Store, types::*};

pub(super) async fn briefs(factory: &dyn StoreFactory) {
    let opened = open(factory, "briefs").await;
    let store = opened.as_ref();
    let token = mind_with_lease(store, "m", "h").await;
    step!(briefs_queue_in_order(store, token));
    let done = step!(a_claimed_brief_finishes_once(store, token));
    let failed = step!(the_next_claim_takes_the_next_brief(store, token));
    step!(briefs_list_by_status(store, (done, failed)));
    store.close().await;
}

/// Briefs queue with gap-free seqs; an unknown Mind's is refused, an empty queue claims none.
async fn briefs_queue_in_order(store: &dyn Store, token: FencingToken) {
    assert_not_found(
        store
            .enqueue_brief("zz", &brief("x", BriefOrigin::Operator, 1))
            .await,
        "unknown",
    );
    assert_eq!(ok(store.claim_brief("m", token, 1).await, "empty"), None);
    let first = ok(
        store
            .enqueue_brief("m", &brief("fix CI", BriefOrigin::Operator, 10))
            .await,
        "q1",
    );
    let second = ok(
        store
            .enqueue_brief("m", &brief("write docs", BriefOrigin::Persona, 20))
            .await,
        "q2",
    );
    assert_eq!((first.seq, second.seq), (1, 2));
    assert_eq!(first.status, BriefStatus::Queued);
}

/// The oldest brief is claimed and runs; only a running brief finishes, once, as done or
/// failed. Returns it finished.
async fn a_claimed_brief_finishes_once(store: &dyn Store, token: FencingToken) -> Brief {
    let claimed = ok(store.claim_brief("m", token, 30).await, "claim");
    let claimed = claimed.unwrap_or_else(|| panic!("nothing claimed"));
    assert_eq!(claimed.seq, 1);
    assert_eq!(claimed.status, BriefStatus::Running);
    assert_eq!(claimed.started_at_ms, Some(30));
    assert_invalid(
        store
            .finish_brief("m", token, 2, BriefStatus::Done, "r", 31)
            .await,
        "finish a queued brief",
    );
    assert_invalid(
        store
            .finish_brief("m", token, 1, BriefStatus::Queued, "r", 31)
            .await,
        "finish as queued",
    );
    assert_not_found(
        store
            .finish_brief("m", token, 9, BriefStatus::Done, "r", 31)
            .await,
        "unknown",
    );
    let done = ok(
        store
            .finish_brief("m", token, 1, BriefStatus::Done, "merged", 40)
            .await,
        "done",
    );
    assert_eq!(done.status, BriefStatus::Done);
    assert_eq!(done.result.as_deref(), Some("merged"));
    assert_eq!(done.finished_at_ms, Some(40));
    assert_invalid(
        store
            .finish_brief("m", token, 1, BriefStatus::Failed, "again", 41)
            .await,
        "finish twice",
    );
    done
}

/// The next claim takes the next brief, then none is left to claim; it fails. Returns it
/// failed.
async fn the_next_claim_takes_the_next_brief(store: &dyn Store, token: FencingToken) -> Brief {
    let next = ok(store.claim_brief("m", token, 50).await, "claim 2");
    assert_eq!(next.as_ref().map(|b| b.seq), Some(2));
    assert_eq!(next.map(|b| b.origin), Some(BriefOrigin::Persona));
    assert_eq!(
        ok(store.claim_brief("m", token, 51).await, "none queued"),
        None
    );
    let failed = ok(
        store
            .finish_brief("m", token, 2, BriefStatus::Failed, "no result", 60)
            .await,
        "fail",
    );
    assert_eq!(failed.status, BriefStatus::Failed);
    failed
}

/// Every brief lists in seq order, whole, and filtered by status.
async fn briefs_list_by_status(store: &dyn Store, (done, failed): (Brief, Brief)) {
    ok(
        store
            .enqueue_brief("m", &brief("third", BriefOrigin::Operator, 70))
            .await,
        "q3",
    );
    let all = ok(store.briefs("m", None, 10).await, "all");
    assert_eq!(all.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(all[0], done);
    let queued = ok(
        store.briefs("m", Some(BriefStatus::Queued), 10).await,
        "queued",
    );
    assert_eq!(queued.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![3]);
    let finished = ok(
        store.briefs("m", Some(BriefStatus::Failed), 10).await,
        "failed",
    );
    assert_eq!(finished, vec![failed]);
}
