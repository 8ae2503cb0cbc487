//! The prompt-window guard: a batch whose prompt cannot fit the model's window is never sent —
//! not under a spend cap, not without one. A batch too large is cut, by muninn's count or after
//! the provider refused it as too long; a single delivery no request can hold is set aside as
//! undeliverable (acknowledged, its room told once, recorded with the sizes, counted in status)
//! and the mail behind it flows on.

use crate::runtime::{World, mind, post, runner, set_cap, spent, world, world_on_sim};
use muninn_api::ApiToken;
use muninn_api::client::ApiClient;
use muninn_core::price::{EMBEDDED_PRICES, PriceTable};
use muninn_host::http::serve;
use muninn_host::runtime::{MindRunner, RuntimeError, Step};
use muninn_sim::inprocess::SimBackend;
use muninn_sim::sim::SimConfig;
use muninn_store::{OutboxMessage, Role, TranscriptKind};

/// A world whose provider (the simulator) gives every model a 40,000-token window, where the
/// host's price table says 200,000: muninn's count says a request fits that the provider
/// refuses with a 400 "prompt is too long", as the real API does when an estimate is short.
async fn world_with_a_smaller_provider_window() -> World {
    let prices = EMBEDDED_PRICES.replace("context_window = 200000", "context_window = 40000");
    let sim = SimConfig {
        prices: PriceTable::parse(&prices, "test").unwrap(),
        ..SimConfig::default()
    };
    world_on_sim("", |store| store, sim).await
}

/// Deliveries `vala` set aside, as `GET /v1/minds/vala` serves it (what `muninn status` shows).
async fn served_undeliverable(w: &World) -> u64 {
    let token = ApiToken::new("window-test-token");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(w.host.clone(), token.clone(), listener, async {
        let _ = stopped.await;
    }));
    let client = ApiClient::new(&addr.to_string(), token).unwrap();
    client.mind("vala").await.unwrap().undeliverable
}

/// Steps `r` (at most `steps` times, a second apart) until it is idle: the `acked_through` of
/// each Persona turn, every one valid, and how many steps the provider refused as too long.
/// Any other outcome fails the test.
async fn answer_until_idle(
    w: &World,
    r: &mut MindRunner<SimBackend>,
    steps: usize,
) -> (Vec<i64>, u32) {
    let (mut acked, mut refusals) = (Vec::new(), 0);
    for _ in 0..steps {
        r.woken();
        match r.step().await {
            Ok(Step::PersonaTurn {
                acked_through,
                valid,
            }) => {
                assert!(valid);
                acked.push(acked_through);
            }
            Ok(Step::Idle { .. }) => break,
            Err(RuntimeError::Backend(e)) if e.to_string().contains("prompt is too long") => {
                refusals += 1;
            }
            other => panic!("after turns acking through {acked:?}: {other:?}"),
        }
        w.sim.advance_clock(1_000);
    }
    (acked, refusals)
}

/// The outbox messages for `vala` not yet sent, oldest first.
async fn outbox(w: &World) -> Vec<OutboxMessage> {
    w.host.store.unacked_outbox("vala", 1_000).await.unwrap()
}

/// The Persona transcript's notices that set a delivery aside.
async fn set_aside_notices(w: &World) -> Vec<serde_json::Value> {
    let items = w
        .host
        .store
        .transcript_tail("vala", Role::Persona, 100)
        .await
        .unwrap();
    items
        .into_iter()
        .filter(|i| i.kind == TranscriptKind::Notice)
        .filter_map(|i| i.body.get("undeliverable").cloned())
        .collect()
}

/// One delivery of ~2.4M tokens (twelve 200k windows; the API bounds a delivery far below
/// this, the store and other intakes do not), then a short one in the same room: one batch.
/// The large one is never sent (not under a spend cap, not without one): it is set aside —
/// acknowledged, its room told once, recorded with the sizes, counted in status — and the short
/// one is answered at the next turn. It used to be refused with `PromptTooLarge` at every retry,
/// the short one behind it never answered.
#[tokio::test]
async fn a_delivery_too_large_for_any_request_is_set_aside_and_the_mail_behind_it_answered() {
    let w = world().await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let huge = "the quick brown fox jumps over the lazy dog ".repeat(220_000);
    let big = post(&w, "e1", "#swarm", "ari", &huge).await;
    let small = post(&w, "e2", "#swarm", "bo", "and a short question after it").await;
    // A $5 cap in force: the guard acts before any pricing is needed.
    set_cap(&w, Some(5_000_000)).await;
    let step = r.step().await.unwrap();
    assert_eq!(
        step,
        Step::PersonaTurn {
            acked_through: big,
            valid: false
        }
    );
    assert!(w.sim.requests().is_empty(), "nothing was sent for it");
    assert_eq!(spent(&w).await, 0);
    let told = outbox(&w).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        told[0].request_id,
        format!("vala-{big}-{big}-undeliverable")
    );
    assert_eq!(told[0].room, "#swarm");
    assert!(told[0].text.contains("too large"), "{}", told[0].text);
    let notices = set_aside_notices(&w).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let notice = &notices[0];
    assert_eq!(notice["seq"], big);
    assert_eq!(notice["source_id"], "e1");
    let window = notice["context_window"].as_u64().unwrap();
    assert!(
        notice["prompt_tokens"].as_u64().unwrap() > window,
        "{notice}"
    );
    assert!(
        notice["prompt_tokens"].as_u64().unwrap() > 2_000_000,
        "{notice}"
    );
    assert_eq!(notice["text_bytes"], huge.len());
    assert!(notice["provider"].is_null(), "{notice}");
    assert_eq!(served_undeliverable(&w).await, 1);
    // Without a cap: the short delivery is answered, alone, and nothing more is set aside.
    set_cap(&w, None).await;
    r.woken();
    let step = r.step().await.unwrap();
    assert_eq!(
        step,
        Step::PersonaTurn {
            acked_through: small,
            valid: true
        }
    );
    let sent = w.sim.requests();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].body.to_string().len() < 200_000,
        "the huge text was not sent"
    );
    let told = outbox(&w).await;
    assert_eq!(
        told.iter()
            .filter(|m| m.request_id.ends_with("-undeliverable"))
            .count(),
        1,
        "{told:?}"
    );
    assert_eq!(served_undeliverable(&w).await, 1);
    assert!(matches!(r.step().await.unwrap(), Step::Idle { .. }));
}

/// Four deliveries of ~10k tokens in one room, one batch muninn counts at ~45k tokens of a 200k
/// window; the provider's window is 40k and it refuses the batch with a 400 "prompt is too
/// long". The batch is cut (and the session rebuilt) after each refusal until the provider
/// takes it: every delivery is answered once, in order, after a few refusals. The whole batch
/// used to be re-sent at every retry and refused for ever.
#[tokio::test]
async fn a_batch_the_provider_refuses_as_too_long_is_cut_and_every_delivery_answered_once() {
    let w = world_with_a_smaller_provider_window().await;
    let mut r = runner(&w, mind("model = 'claude-sonnet-4-5'"), "host-a");
    r.register().await.unwrap();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(1_000);
    let mut seqs = Vec::new();
    for i in 1..=4 {
        seqs.push(post(&w, &format!("e{i}"), "#swarm", "ari", &long).await);
    }
    let (acked, refusals) = answer_until_idle(&w, &mut r, 12).await;
    assert_eq!(
        acked.last(),
        Some(&seqs[3]),
        "acked {acked:?} after {refusals} refusals"
    );
    assert!((1..=3).contains(&refusals), "{refusals}");
    assert!(acked.windows(2).all(|p| p[0] < p[1]), "{acked:?}");
    // Each delivery answered in exactly one turn: the answered batches' seq ranges (request
    // ids `vala-<first>-<max>-<index>`) tile the mailbox, and nothing was set aside.
    let mut ranges: Vec<(i64, i64)> = outbox(&w)
        .await
        .iter()
        .map(|m| {
            let parts: Vec<&str> = m.request_id.split('-').collect();
            assert_eq!(parts.len(), 4, "{}", m.request_id);
            (parts[1].parse().unwrap(), parts[2].parse().unwrap())
        })
        .collect();
    ranges.dedup();
    let mut next = seqs[0];
    for (from, max) in &ranges {
        assert_eq!(*from, next, "{ranges:?}");
        next = max + 1;
    }
    assert_eq!(next, seqs[3] + 1, "{ranges:?}");
    assert!(set_aside_notices(&w).await.is_empty());
}

/// One delivery of ~45k tokens, which muninn counts as fitting a 200k window, refused by the
/// provider (a 40k window) as too long at a segment's start — where nothing more can be cut:
/// it is set aside at once with the provider's message, its room told once, and the next
/// delivery answered. It used to be re-sent and refused at every retry, for ever.
#[tokio::test]
async fn a_delivery_the_provider_refuses_alone_is_set_aside_once() {
    let w = world_with_a_smaller_provider_window().await;
    let mut r = runner(&w, mind("model = 'claude-sonnet-4-5'"), "host-a");
    r.register().await.unwrap();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(4_500);
    let big = post(&w, "e1", "@ada", "@ada", &long).await;
    let mut steps = Vec::new();
    for _ in 0..4 {
        r.woken();
        let step = r.step().await;
        let idle = matches!(step, Ok(Step::Idle { .. }));
        steps.push(step.map_err(|e| e.to_string()));
        if idle {
            break;
        }
        w.sim.advance_clock(1_000);
    }
    assert_eq!(
        steps.first(),
        Some(&Ok(Step::PersonaTurn {
            acked_through: big,
            valid: false
        })),
        "{steps:?}"
    );
    let told = outbox(&w).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        told[0].request_id,
        format!("vala-{big}-{big}-undeliverable")
    );
    assert_eq!(told[0].room, "@ada");
    // muninn's count said it fits: the notice gives the provider's refusal, not that count
    // against the window as if it were over it.
    assert!(
        told[0].text.contains("provider refused it as too long")
            && !told[0].text.contains("against my model's window"),
        "{}",
        told[0].text
    );
    let notices = set_aside_notices(&w).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let provider = notices[0]["provider"].as_str().unwrap_or_default();
    assert!(provider.contains("prompt is too long"), "{provider}");
    assert_eq!(w.sim.requests().len(), 1, "sent once, refused once");
    let small = post(&w, "e2", "@ada", "@ada", "a short one").await;
    r.woken();
    assert_eq!(
        r.step().await.unwrap(),
        Step::PersonaTurn {
            acked_through: small,
            valid: true
        }
    );
}

/// A refresh at the ceiling, its first request refused once (a 401): the retry is the new
/// segment's start and is sized as one — the layers, the rehydration and the message — not as
/// the message appended to the old segment's prefix, which with it would pass the window and
/// leave the batch refused on every retry.
#[tokio::test]
async fn the_retry_of_a_refreshs_first_request_is_sized_on_the_new_segment() {
    use muninn_host::runtime::Step;
    use muninn_sim::sim::{Fault, FaultKind};
    let w = world().await;
    // A model with a 200k window; the ceiling below it.
    let m = mind("model = 'claude-sonnet-4-5'\nturns_per_wake = 1\nceiling_tokens = 150000");
    let mut r = runner(&w, m, "host-a");
    r.register().await.unwrap();
    let words = |n| "the quick brown fox jumps over the lazy dog ".repeat(n);
    post(&w, "e1", "#swarm", "ari", &words(12_000)).await;
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::PersonaTurn { .. }), "{step:?}");
    w.sim.advance_clock(2_000);
    post(&w, "e2", "#swarm", "ari", &words(5_000)).await;
    w.sim.push_faults([Fault {
        kind: FaultKind::Unauthorized,
        times: 1,
    }]);
    let error = r.step().await.unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");
    w.sim.advance_clock(1_000);
    let step = r.step().await.unwrap();
    assert!(matches!(step, Step::PersonaTurn { .. }), "{step:?}");
    let rows = crate::runtime::ledger(&w).await;
    let decisions: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| (r.segment, r.decision.as_str()))
        .collect();
    assert_eq!(decisions, [(0, "start:start"), (1, "start:retried")]);
}

/// Twenty deliveries in one room, each near the API's 64 KiB bound (~14k tokens): one batch of
/// ~280k tokens, beyond a 200k window. The batch is halved until it fits and the rest answered
/// in the next turns — every delivery once, in order — where the whole batch used to be refused
/// at every retry and the Mind stuck on it for good.
#[tokio::test]
async fn a_batch_too_large_for_the_window_is_cut_and_every_delivery_answered_once() {
    let w = world().await;
    let mut r = runner(&w, mind("model = 'claude-sonnet-4-5'"), "host-a");
    r.register().await.unwrap();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(1_400);
    assert!(
        long.len() < muninn_api::limits::TEXT_MAX_BYTES,
        "{}",
        long.len()
    );
    let mut seqs = Vec::new();
    for i in 1..=20 {
        seqs.push(post(&w, &format!("e{i}"), "#swarm", "ari", &long).await);
    }
    let (first, last) = (seqs[0], seqs[19]);
    let (acked, refusals) = answer_until_idle(&w, &mut r, 40).await;
    assert_eq!(
        refusals, 0,
        "muninn's own count cuts the batch: the provider refuses none"
    );
    assert_eq!(acked.last(), Some(&last), "{acked:?}");
    assert!(
        acked.len() > 1 && acked.windows(2).all(|p| p[0] < p[1]),
        "{acked:?}"
    );
    // Each delivery in exactly one turn: the answered batches' seq ranges (outbox request ids
    // `vala-<first>-<max>-<index>`) tile the mailbox.
    let outbox = w.host.store.unacked_outbox("vala", 1_000).await.unwrap();
    let mut ranges: Vec<(i64, i64)> = outbox
        .iter()
        .map(|m| {
            let parts: Vec<&str> = m.request_id.split('-').collect();
            (parts[1].parse().unwrap(), parts[2].parse().unwrap())
        })
        .collect();
    ranges.dedup();
    let mut next = first;
    for (from, max) in &ranges {
        assert_eq!(*from, next, "{ranges:?}");
        next = max + 1;
    }
    assert_eq!(next, last + 1, "{ranges:?}");
    assert_eq!(ranges.len(), acked.len(), "{ranges:?} {acked:?}");
}

/// A delivery set aside whose commit the store refuses once: the record is held and committed
/// at the next step — one notice in its room, one acknowledgement — and a host that takes the
/// Mind over afterwards finds nothing left to do: the notice is neither lost nor sent twice.
#[tokio::test]
async fn a_delivery_set_aside_is_told_once_across_a_failed_commit_and_a_takeover() {
    let (w, faults) = crate::runtime::faulty_world("").await;
    let mut r = runner(&w, mind(""), "host-a");
    r.register().await.unwrap();
    let huge = "the quick brown fox jumps over the lazy dog ".repeat(220_000);
    let big = post(&w, "e1", "#swarm", "ari", &huge).await;
    faults.fail_commits(1);
    let error = r.step().await.unwrap_err();
    assert!(matches!(error, RuntimeError::Held(_)), "{error}");
    assert!(outbox(&w).await.is_empty());
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 0);
    let step = r.step().await.unwrap();
    assert_eq!(
        step,
        Step::PersonaTurn {
            acked_through: big,
            valid: false
        }
    );
    assert!(matches!(r.step().await.unwrap(), Step::Idle { .. }));
    drop(r);
    w.sim
        .advance_clock(muninn_host::runtime::LEASE_TTL_MS + 1_000);
    let mut next = runner(&w, mind(""), "host-b");
    next.register().await.unwrap();
    assert!(matches!(next.step().await.unwrap(), Step::Idle { .. }));
    let told = outbox(&w).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        told[0].request_id,
        format!("vala-{big}-{big}-undeliverable")
    );
    assert_eq!(set_aside_notices(&w).await.len(), 1);
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), big);
    assert!(w.sim.requests().is_empty(), "nothing was ever sent");
}

/// A delivery that fits a new segment but not the open one (its prefix, the delivery and the
/// reply's bound pass the window while the prefix and the delivery stay under the ceiling, so
/// the decider appends): the session is rebuilt in a new segment and the delivery answered
/// there. It used to be refused with `PromptTooLarge` at every retry, for ever.
#[tokio::test]
async fn a_delivery_that_fits_only_a_new_segment_is_answered_in_one() {
    let w = world().await;
    let m = mind("model = 'claude-sonnet-4-5'\npolicy = 'never'\nmax_output_tokens = 64000");
    let mut r = runner(&w, m, "host-a");
    r.register().await.unwrap();
    let words = |n| "the quick brown fox jumps over the lazy dog ".repeat(n);
    post(&w, "e1", "#swarm", "ari", &words(8_000)).await;
    assert!(matches!(
        r.step().await.unwrap(),
        Step::PersonaTurn { valid: true, .. }
    ));
    w.sim.advance_clock(1_000);
    let second = post(&w, "e2", "#swarm", "ari", &words(4_000)).await;
    r.woken();
    let step = r.step().await.map_err(|e| e.to_string());
    assert_eq!(
        step,
        Ok(Step::PersonaTurn {
            acked_through: second,
            valid: true
        })
    );
    let decisions: Vec<(u64, String)> = crate::runtime::ledger(&w)
        .await
        .iter()
        .map(|r| (r.segment, r.decision.clone()))
        .collect();
    assert_eq!(
        decisions,
        [
            (0, "start:start".to_string()),
            (1, "start:rebuilt from the transcript".to_string())
        ]
    );
    assert!(set_aside_notices(&w).await.is_empty());
}

/// A reply bound that leaves no room in the window for any prompt (`max_output_tokens` at the
/// model's whole window): no delivery can fit, however short, so none is the delivery's fault.
/// Nothing is set aside — the turn is refused as too large (`retrying`, loud), nothing sent,
/// nothing acknowledged — where every delivery used to be set aside in turn, acknowledged
/// unread, each sender told their one-line message was too large.
#[tokio::test]
async fn no_delivery_is_set_aside_when_the_layers_leave_no_room_for_any() {
    let w = world().await;
    let m = mind("model = 'claude-sonnet-4-5'\nmax_output_tokens = 200000");
    let mut r = runner(&w, m, "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "#swarm", "ari", "hello").await;
    post(&w, "e2", "#swarm", "bo", "anyone there?").await;
    for _ in 0..3 {
        r.woken();
        let step = r.step().await;
        assert!(
            matches!(step, Err(RuntimeError::PromptTooLarge { .. })),
            "{step:?}"
        );
        w.sim.advance_clock(1_000);
    }
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 0);
    assert!(outbox(&w).await.is_empty());
    assert!(set_aside_notices(&w).await.is_empty());
    assert_eq!(served_undeliverable(&w).await, 0);
    assert!(w.sim.requests().is_empty());
}

/// A provider whose window the Mind's layers alone overflow (the simulator gives every model
/// 1,000 tokens): it refuses a one-line DM at a segment's start as too long. The prompt is
/// too long because of what precedes the delivery (layers, memory, a CLI's own system
/// prompt), so the delivery is not set aside: the Mind retries with the provider's error,
/// nothing acknowledged, no notice. Each short delivery used to be set aside at its first
/// refusal, its sender told it was too large, until the mailbox was empty and nothing read.
#[tokio::test]
async fn a_short_delivery_the_provider_refuses_for_its_prefix_is_not_set_aside() {
    let prices = EMBEDDED_PRICES.replace("context_window = 200000", "context_window = 1000");
    let sim = SimConfig {
        prices: PriceTable::parse(&prices, "test").unwrap(),
        ..SimConfig::default()
    };
    let w = world_on_sim("", |store| store, sim).await;
    let mut r = runner(&w, mind("model = 'claude-sonnet-4-5'"), "host-a");
    r.register().await.unwrap();
    post(&w, "e1", "@ada", "@ada", "hello").await;
    for _ in 0..2 {
        r.woken();
        let step = r.step().await;
        assert!(
            matches!(&step, Err(RuntimeError::Backend(e)) if e.to_string().contains("prompt is too long")),
            "{step:?}"
        );
        w.sim.advance_clock(1_000);
    }
    assert_eq!(w.host.store.ack_position("vala").await.unwrap(), 0);
    assert!(outbox(&w).await.is_empty());
    assert!(set_aside_notices(&w).await.is_empty());
}
