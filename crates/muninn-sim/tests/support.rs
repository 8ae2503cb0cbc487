//! Shared helpers: an in-process simulator on an ephemeral port with a frozen clock, a backend
//! wired to it with a manual clock and a recording sleeper, and an independent recomputation of
//! the usage the cache model predicts for recorded requests.

use muninn_anthropic::backend::AnthropicBackend;
use muninn_anthropic::client::{AnthropicClient, ClientConfig};
use muninn_anthropic::prompt::shape;
use muninn_anthropic::secret::ApiKey;
use muninn_anthropic::wire::MessagesRequest;
use muninn_backend::clock::{ManualClock, RecordingSleeper};
use muninn_core::cache::{CacheRules, CacheState};
use muninn_core::price::PriceTable;
use muninn_core::trace::Usage;
use muninn_sim::sim::{RecordedRequest, SimConfig};
use muninn_sim::{SimHandle, spawn};
use std::sync::Arc;

/// The frozen start of virtual time.
pub const T0: i64 = 1_796_000_000_000;

pub async fn sim_with(config: SimConfig) -> SimHandle {
    spawn("127.0.0.1:0".parse().unwrap(), config).await.unwrap()
}

pub async fn sim() -> SimHandle {
    sim_with(SimConfig {
        frozen_at_ms: Some(T0),
        ..Default::default()
    })
    .await
}

pub struct Wired {
    pub backend: AnthropicBackend,
    pub clock: ManualClock,
    pub sleeper: RecordingSleeper,
}

pub fn client(h: &SimHandle, sleeper: &RecordingSleeper, max_retries: u32) -> AnthropicClient {
    let mut config = ClientConfig::new(h.base_url(), ApiKey::new("sk-test-secret-123").unwrap());
    config.retry.max_retries = max_retries;
    AnthropicClient::new(config, Arc::new(sleeper.clone())).unwrap()
}

pub fn wired(h: &SimHandle) -> Wired {
    let clock = ManualClock::new(T0);
    let sleeper = RecordingSleeper::default();
    let backend = AnthropicBackend::new(
        client(h, &sleeper, 8),
        Arc::new(clock.clone()),
        PriceTable::embedded(),
    );
    Wired {
        backend,
        clock,
        sleeper,
    }
}

/// Recomputes, with a fresh cache model, the usage of every answered messages request in
/// `records` (in order, at their recorded times) — independently of the server's code path.
pub fn recompute(records: &[RecordedRequest]) -> Vec<Usage> {
    let prices = PriceTable::embedded();
    let rules = CacheRules::default();
    let mut cache = CacheState::new();
    records
        .iter()
        .filter(|r| r.path == "/v1/messages" && r.usage.is_some())
        .map(|r| {
            let shaped = shape(&r.body).unwrap();
            let min = prices.model(&shaped.model).unwrap().min_cacheable;
            let outcome = cache.apply(&shaped.prompt(), r.at_ms, min, &rules).unwrap();
            let request: MessagesRequest = serde_json::from_value(r.body.clone()).unwrap();
            let seed = shaped.checkpoints.last().map_or(0, |c| c.fingerprint);
            outcome.usage(muninn_sim::reply::reply(&request, seed).output_tokens)
        })
        .collect()
}

/// A system prompt of about `n` thousand tokens, unique to `tag`.
pub fn long_system(tag: &str, n: usize) -> String {
    let body: String = (0..n * 125).map(|i| format!("clause{i} stays. ")).collect();
    format!("You are {tag}. {body}")
}

/// `n` trivial tools, `tool0` to `tool{n-1}`.
pub fn tool_specs(n: usize) -> Vec<muninn_backend::ToolSpec> {
    (0..n)
        .map(|i| muninn_backend::ToolSpec {
            name: format!("tool{i}"),
            description: format!("does thing {i}"),
            input_schema: serde_json::json!({"type": "object"}),
        })
        .collect()
}

/// The recorded `/v1/messages` requests (not `count_tokens`), oldest first.
pub fn message_records(h: &SimHandle) -> Vec<RecordedRequest> {
    h.sim
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .collect()
}
