//! The Anthropic backend end to end against `sim-api`: growth of cache reads, TTL expiry on the
//! virtual clock, every injected error retried with the right delay or surfaced, the honoured
//! TTL, and the key kept out of everything recorded. One module per job: the cache
//! ([`cache`]), refusals retried or surfaced ([`retries`]), attempts cut short and billed
//! ([`cuts`]), and what goes over the wire ([`wire`]).

mod cache;
mod cuts;
mod retries;
mod wire;

use crate::support::long_system;
use muninn_backend::SessionSpec;
use muninn_core::cache::Ttl;
use muninn_sim::sim::{Fault, FaultKind};

fn spec(tag: &str, system_ttl: Ttl) -> SessionSpec {
    SessionSpec {
        model: "claude-opus-5-5".to_string(),
        system: vec![long_system(tag, 2), "Be brief.".to_string()],
        tools: Vec::new(),
        output_schema: None,
        system_ttl,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 512,
    }
}

fn fault(kind: FaultKind, times: u32) -> Fault {
    Fault { kind, times }
}
