//! How many requests per second `sim-api` sustains over loopback, non-streaming and streaming.
//!
//! `cargo bench -p muninn-sim --bench throughput`. Parameters (environment):
//! `MUNINN_BENCH_REQUESTS` (per mode, default 4000), `MUNINN_BENCH_CONCURRENCY` (client tasks,
//! default 8), `MUNINN_BENCH_SYSTEM_KB` (system prompt size, default 8). Each task runs its own
//! append-only conversation (a unique system prompt, one breakpoint on it and one moving on the
//! last message, trimmed to the last 8 turns so request size stays bounded), so the server does
//! the full work per request: parse, map to checkpoints, cache model, reply, serialise. The
//! client runs in the same process and shares the machine's cores, so the figure is a floor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_sim::sim::SimConfig;
use serde_json::{Value, json};
use std::time::Instant;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn body(task: usize, turn: usize, system: &str, stream: bool) -> Value {
    let mut messages = Vec::new();
    let first = turn.saturating_sub(8);
    for t in first..=turn {
        if t > first {
            messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("Reply to turn {}: 'task {task} turn {}'", t - first, t - 1)}]}));
        }
        messages.push(json!({"role": "user", "content": format!("task {task} turn {t}")}));
    }
    if let Some(Value::Object(last)) = messages.last_mut() {
        let text = last["content"].clone();
        last.insert(
            "content".into(),
            json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]),
        );
    }
    json!({
        "model": "claude-opus-5-5", "max_tokens": 256, "stream": stream,
        "system": [{"type": "text", "text": format!("task {task}. {system}"), "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    })
}

async fn run(
    base: &str,
    requests: usize,
    concurrency: usize,
    system_kb: usize,
    stream: bool,
) -> f64 {
    let client = reqwest::Client::new();
    let system: String = "Keep the doctrine. ".repeat(system_kb * 1024 / 19);
    let per_task = requests / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let client = client.clone();
        let url = format!("{base}/v1/messages");
        let system = system.clone();
        tasks.push(tokio::spawn(async move {
            for turn in 0..per_task {
                let b = body(task, turn, &system, stream).to_string();
                let r = client
                    .post(&url)
                    .header("x-api-key", "sk-bench")
                    .header("anthropic-version", "2023-06-01")
                    .body(b)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 200);
                let text = r.text().await.unwrap();
                assert!(text.contains("Reply to turn"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (per_task * concurrency) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let requests = env_or("MUNINN_BENCH_REQUESTS", 4000);
    let concurrency = env_or("MUNINN_BENCH_CONCURRENCY", 8).max(1);
    let system_kb = env_or("MUNINN_BENCH_SYSTEM_KB", 8);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        muninn_anthropic::client::install_ring_provider();
        for stream in [false, true] {
            // A fresh server per mode, so both start from an empty cache.
            let h = muninn_sim::spawn("127.0.0.1:0".parse().unwrap(), SimConfig::default())
                .await
                .unwrap();
            let rps = run(&h.base_url(), requests, concurrency, system_kb, stream).await;
            println!(
                "sim-api {}: {rps:.0} requests/s ({} requests, {concurrency} concurrent clients, {system_kb} KiB system prompt, {} cores, loopback, client in-process)",
                if stream { "streaming" } else { "non-streaming" },
                requests / concurrency * concurrency,
                std::thread::available_parallelism().map_or(0, |n| n.get()),
            );
            h.stop().await.unwrap();
        }
    });
}
