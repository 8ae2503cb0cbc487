//! Imports the given paths and prints what came out: requests, traces per kind and model,
//! warnings, throughput and peak memory (`VmHWM` from `/proc/self/status`, Linux only).
//!
//! `cargo run --release -p muninn-import --example import_stats -- [-v] ~/.claude/projects`
//! (`-v` also lists every trace).

use muninn_import::{ImportOptions, import_paths};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut verbose = false;
    let mut paths: Vec<PathBuf> = Vec::new();
    for arg in std::env::args_os().skip(1) {
        if arg == "-v" {
            verbose = true;
        } else {
            paths.push(PathBuf::from(arg));
        }
    }
    if paths.is_empty() {
        return Err("usage: import_stats <path>...".into());
    }
    let rss_before = peak_rss_kib();
    let started = Instant::now();
    let import = import_paths(&paths, &ImportOptions::default(), &mut |_, _| {})?;
    let elapsed = started.elapsed().as_secs_f64();

    let mut by_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut by_model: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for t in &import.traces {
        let k = by_kind.entry(format!("{:?}", t.kind)).or_default();
        k.0 += 1;
        k.1 += t.requests.len();
        let m = by_model.entry(&t.model).or_default();
        m.0 += 1;
        m.1 += t.requests.len();
    }
    let s = &import.stats;
    println!(
        "files        {} (skipped {}, unreadable {})",
        s.files, s.files_skipped, s.files_unreadable
    );
    println!("lines        {}", s.lines);
    println!("bytes        {}", s.bytes);
    println!("requests     {}", s.requests);
    println!("traces       {}", import.traces.len());
    for (kind, (traces, requests)) in &by_kind {
        println!("  {kind:<12} {traces:>4} traces {requests:>6} requests");
    }
    for (model, (traces, requests)) in &by_model {
        println!("  {model:<28} {traces:>4} traces {requests:>6} requests");
    }
    let requests = import.traces.iter().flat_map(|t| &t.requests);
    let boundaries = requests.clone().filter(|r| r.boundary).count();
    let compacted = requests.clone().filter(|r| r.compacted).count();
    let blocks: u64 = requests.map(|r| u64::from(r.blocks_added)).sum();
    println!("boundaries   {boundaries}");
    println!("compacted    {compacted}");
    println!("blocks added {blocks}");
    println!("duplicates   {}", s.duplicates_dropped);
    if verbose {
        for t in &import.traces {
            let boundaries = t.requests.iter().filter(|r| r.boundary).count();
            println!(
                "  {:<70} {:<10} {:>4} requests {:>3} boundaries ttl {:?}",
                t.id,
                format!("{:?}", t.kind),
                t.requests.len(),
                boundaries,
                t.whole_trace_ttl()
            );
        }
    }
    println!("synthetic    {}", s.synthetic_dropped);
    println!("warnings     {}", import.warnings.len());
    for w in import.warnings.iter().take(20) {
        println!("  {w}");
    }
    println!("elapsed      {:.3} s", elapsed);
    println!("throughput   {:.1} MB/s", s.bytes as f64 / 1e6 / elapsed);
    if let (Some(before), Some(peak)) = (rss_before, peak_rss_kib()) {
        println!(
            "peak RSS     {:.1} MiB (before import {:.1} MiB)",
            peak as f64 / 1024.0,
            before as f64 / 1024.0
        );
    }
    Ok(())
}
