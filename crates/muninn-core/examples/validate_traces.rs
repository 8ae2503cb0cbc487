//! Validates the cache model on a directory of Claude Code transcripts (JSONL).
//!
//! `cargo run -p muninn-core --example validate_traces -- DIR [--json OUT] [--rows] [--no-share]`
//!
//! A throwaway loader, standing in for the importer until it lands: one request per `message.id`
//! (deduplicated across files, `<synthetic>` dropped), one trace per (file thread, model), the
//! request time is the earliest line of the response, `compacted` is set on the first main-thread
//! request after a `compact_boundary` line, `blocks_added` counts the content blocks since the
//! previous request of the file. It also notes which requests followed a background-task
//! notification, to explain disagreements the trace fields cannot.

use muninn_core::trace::{ThreadKind, Trace, TraceRequest, Usage};
use muninn_core::validate::{ValidateOptions, validate};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

fn parse_time(s: &str) -> Option<i64> {
    // 2026-02-11T20:36:45.618Z
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let ms = if b.get(19) == Some(&b'.') {
        num(20..23).unwrap_or(0)
    } else {
        0
    };
    // Days from civil (Howard Hinnant).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms)
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

struct Loaded {
    traces: Vec<Trace>,
    /// (trace id, index) of requests that followed a `<task-notification>` user message or an
    /// `/mcp` reconnection, with which.
    notified: HashMap<(String, usize), &'static str>,
}

fn load(dir: &Path) -> Result<Loaded, Box<dyn std::error::Error>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut seen: HashSet<String> = HashSet::new();
    let mut traces: BTreeMap<String, Trace> = BTreeMap::new();
    let mut notified = HashMap::new();
    for path in files {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let (thread, kind) = match name.split_once("__agent-") {
            Some((_, id)) if id.starts_with("acompact") => {
                (format!("agent-{id}"), ThreadKind::Compaction)
            }
            Some((_, id)) => (format!("agent-{id}"), ThreadKind::Subagent),
            None => ("main".to_string(), ThreadKind::Main),
        };
        let text = std::fs::read_to_string(&path)?;
        let mut blocks_since = 0u32;
        let mut compact_pending = false;
        let mut notification: Option<&'static str> = None;
        for line in text.lines() {
            let v: Value = serde_json::from_str(line)?;
            let ty = v.get("type").and_then(Value::as_str).unwrap_or_default();
            if ty == "system"
                && v.get("subtype").and_then(Value::as_str) == Some("compact_boundary")
            {
                compact_pending = true;
            }
            if ty != "user" && ty != "assistant" {
                continue;
            }
            let Some(msg) = v.get("message") else {
                continue;
            };
            let content = msg.get("content");
            let n = content
                .and_then(Value::as_array)
                .map_or(1, |a| a.len() as u32);
            if ty == "user" {
                blocks_since += n;
                let text = content.and_then(Value::as_str).unwrap_or_default();
                if text.starts_with("<task-notification>") {
                    notification = Some("task-notification");
                } else if text.contains("<command-name>/mcp</command-name>") {
                    notification = Some("mcp-reconnect");
                }
                continue;
            }
            let model = msg.get("model").and_then(Value::as_str).unwrap_or_default();
            let Some(id) = msg.get("id").and_then(Value::as_str) else {
                continue;
            };
            if model == "<synthetic>" || !seen.insert(id.to_string()) {
                blocks_since += n;
                continue;
            }
            let usage = msg.get("usage").cloned().unwrap_or(Value::Null);
            let cc = usage.get("cache_creation").cloned().unwrap_or(Value::Null);
            let (w5, w1) = if cc.is_object() {
                (
                    u(&cc, "ephemeral_5m_input_tokens"),
                    u(&cc, "ephemeral_1h_input_tokens"),
                )
            } else {
                (u(&usage, "cache_creation_input_tokens"), 0)
            };
            let session = v
                .get("sessionId")
                .and_then(Value::as_str)
                .unwrap_or(&name)
                .to_string();
            let at_ms = v
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(parse_time)
                .unwrap_or(0);
            let tid = format!("{session}/{thread}/{model}");
            let trace = traces.entry(tid.clone()).or_insert_with(|| Trace {
                id: tid.clone(),
                session: session.clone(),
                thread: thread.clone(),
                kind,
                model: model.to_string(),
                source: path.display().to_string(),
                requests: Vec::new(),
            });
            if let Some(note) = notification {
                notified.insert((tid, trace.requests.len()), note);
            }
            trace.requests.push(TraceRequest {
                at_ms,
                usage: Usage {
                    input: u(&usage, "input_tokens"),
                    cache_write_5m: w5,
                    cache_write_1h: w1,
                    cache_read: u(&usage, "cache_read_input_tokens"),
                    output: u(&usage, "output_tokens"),
                },
                boundary: false,
                compacted: compact_pending && kind == ThreadKind::Main,
                tools_changed: false,
                version_changed: false,
                interrupted_thinking: false,
                reasoning: false,
                blocks_added: blocks_since,
                provider_miss: None,
                tool_results: Default::default(),
                conversation: 0,
                forked_from: None,
                tool_results_at_ms: None,
            });
            compact_pending = false;
            notification = None;
            // The response's own blocks count towards the next request.
            blocks_since = n;
        }
    }
    let mut traces: Vec<Trace> = traces.into_values().collect();
    for t in &mut traces {
        t.requests.sort_by_key(|r| r.at_ms);
    }
    Ok(Loaded { traces, notified })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .ok_or("usage: validate_traces DIR [--json OUT] [--rows]")?;
    let loaded = load(Path::new(dir))?;
    // `--no-share`: keep every session's tools head private (an ablation of the shared head).
    let options = ValidateOptions {
        share_tools_head: !args.iter().any(|a| a == "--no-share"),
        ..ValidateOptions::default()
    };
    let report = validate(&loaded.traces, &options);
    for (label, side) in [("model", &report.model), ("naive", &report.naive)] {
        for (scope, a) in [("main", &side.main), ("all", &side.all)] {
            println!(
                "{label} {scope:4}: {}/{} agree = {:.2}%, read error {:.3}% ({} of {} tokens), disagreements {:?}",
                a.agree,
                a.requests,
                100.0 * a.agreement,
                100.0 * a.read_error,
                a.abs_error,
                a.recorded_read,
                a.disagreements
            );
        }
    }
    println!("model errors: {}", report.model_errors);
    let show_all = args.iter().any(|a| a == "--rows");
    for r in &report.rows {
        let bad = !r.cache_model.agree || !r.naive.agree;
        let big = r.cache_model.read.abs_diff(r.recorded_read) > 1000;
        if show_all || bad || big {
            let note = loaded
                .notified
                .get(&(r.trace.clone(), r.index))
                .copied()
                .unwrap_or_default();
            println!(
                "{:<60} #{:<3} gap={:>8} ref={:>6} rec={:>6} {:?} | model={:>6} {:?} {:?} | naive={:>6} {:?} {:?} {} {}",
                r.trace,
                r.index,
                r.gap_ms
                    .map_or("-".to_string(), |g| format!("{}s", g / 1000)),
                r.reference,
                r.recorded_read,
                r.recorded_class,
                r.cache_model.read,
                r.cache_model.class,
                r.cache_model.disagreement,
                r.naive.read,
                r.naive.class,
                r.naive.disagreement,
                if r.compacted { "compacted" } else { "" },
                note
            );
        }
    }
    if let Some(pos) = args.iter().position(|a| a == "--json")
        && let Some(out) = args.get(pos + 1)
    {
        std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
