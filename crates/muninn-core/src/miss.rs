//! One vocabulary of cache-miss causes, and its mapping onto the two other vocabularies a user
//! meets: the provider's own diagnosis (`diagnostics.cache_miss_reason` of the Messages API, beta
//! `cache-diagnosis-2026-04-07`) and the causes Claude Code's `/usage` names.
//!
//! | muninn ([`MissCause`]) | provider ([`ProviderMissReason`]) | Claude Code `/usage` |
//! |---|---|---|
//! | `cold_start` | `previous_message_not_found`, or no comparison (first turn) | — |
//! | `ttl_expiry` | no divergence | `ttl_expired_5m` |
//! | `model_change` | `model_changed` | — |
//! | `tools_change` | `tools_changed` | `tools_changed` |
//! | `system_change` | `system_changed` | `system_prompt_changed` |
//! | `messages_change` | `messages_changed` | — |
//! | `tools_or_system_change` (one of the two) | `tools_changed` or `system_changed` | — |
//! | `prefix_change` (level unknown) | any `*_changed` | — |
//! | `eviction_or_unknown` | no divergence | `likely_server_side` |
//!
//! The provider's diagnosis is *structural*: it compares the request with the one named by
//! `previous_message_id` and says where they first diverge, whether or not the cache hit. A
//! request that appends to its predecessor has no divergence; a TTL expiry or an eviction then
//! shows only in the usage. So a cause is checked against a label at the provider's
//! granularity ([`ProviderClass`]): a change at the same level, or no divergence.
//! `previous_message_not_found`, `unavailable` and a pending comparison are not labels.
//!
//! This module is pure.

use crate::money::Tokens;
use serde::{Deserialize, Serialize};

/// Why a request did not read the prefix it could have read (muninn's vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissCause {
    /// Nothing was cached for this model yet.
    ColdStart,
    /// The matching entry existed but its TTL had run out.
    TtlExpiry,
    /// Entries existed, but none matched this prompt's prefix (the content changed), at a level
    /// not known (traces that record usage but not the requests).
    PrefixChange,
    /// The model predicted a hit the provider did not report (eviction, routing, or unknown).
    EvictionOrUnknown,
    /// The request went to another model than its predecessor (the cache is per model).
    ModelChange,
    /// The tool definitions changed (invalidates tools, system and messages).
    ToolsChange,
    /// The system prompt changed (invalidates system and messages).
    SystemChange,
    /// The message history diverged from its predecessor's (a rewrite, a compaction, a new
    /// segment).
    MessagesChange,
    /// The tool definitions or the system prompt changed, which of the two not known: a read
    /// that found nothing of a head that was warm (see `validate`'s `shortfall_cause`).
    ToolsOrSystemChange,
}

impl MissCause {
    /// How many causes there are (the size of a per-cause counter array).
    pub const COUNT: usize = 9;

    /// Every cause, in counter order (`cause as usize`).
    pub const ALL: [MissCause; MissCause::COUNT] = [
        MissCause::ColdStart,
        MissCause::TtlExpiry,
        MissCause::PrefixChange,
        MissCause::EvictionOrUnknown,
        MissCause::ModelChange,
        MissCause::ToolsChange,
        MissCause::SystemChange,
        MissCause::MessagesChange,
        MissCause::ToolsOrSystemChange,
    ];

    /// The cause's name as it is stored and printed.
    pub const fn as_str(self) -> &'static str {
        match self {
            MissCause::ColdStart => "cold_start",
            MissCause::TtlExpiry => "ttl_expiry",
            MissCause::PrefixChange => "prefix_change",
            MissCause::EvictionOrUnknown => "eviction_or_unknown",
            MissCause::ModelChange => "model_change",
            MissCause::ToolsChange => "tools_change",
            MissCause::SystemChange => "system_change",
            MissCause::MessagesChange => "messages_change",
            MissCause::ToolsOrSystemChange => "tools_or_system_change",
        }
    }

    /// The provider's class of this cause (see the module docs), `None` for a cold start
    /// (the provider has nothing to compare with).
    pub const fn provider_class(self) -> Option<ProviderClass> {
        match self {
            MissCause::ColdStart => None,
            MissCause::TtlExpiry | MissCause::EvictionOrUnknown => {
                Some(ProviderClass::NoDivergence)
            }
            MissCause::ModelChange => Some(ProviderClass::Changed(Level::Model)),
            MissCause::ToolsChange => Some(ProviderClass::Changed(Level::Tools)),
            MissCause::SystemChange => Some(ProviderClass::Changed(Level::System)),
            MissCause::MessagesChange => Some(ProviderClass::Changed(Level::Messages)),
            MissCause::ToolsOrSystemChange => Some(ProviderClass::Changed(Level::ToolsOrSystem)),
            MissCause::PrefixChange => Some(ProviderClass::Changed(Level::Unknown)),
        }
    }

    /// The cause a level of divergence names.
    pub const fn of_level(level: Level) -> MissCause {
        match level {
            Level::Model => MissCause::ModelChange,
            Level::Tools => MissCause::ToolsChange,
            Level::System => MissCause::SystemChange,
            Level::Messages => MissCause::MessagesChange,
            Level::ToolsOrSystem => MissCause::ToolsOrSystemChange,
            Level::Unknown => MissCause::PrefixChange,
        }
    }

    /// The cause Claude Code's `/usage` names (`tools_changed`, `system_prompt_changed`,
    /// `ttl_expired_5m`, `likely_server_side`), `None` for any other text.
    pub fn from_claude_code(text: &str) -> Option<MissCause> {
        match text {
            "tools_changed" => Some(MissCause::ToolsChange),
            "system_prompt_changed" => Some(MissCause::SystemChange),
            "ttl_expired_5m" => Some(MissCause::TtlExpiry),
            "likely_server_side" => Some(MissCause::EvictionOrUnknown),
            _ => None,
        }
    }

    /// The name Claude Code's `/usage` gives this cause, where it has one.
    pub const fn claude_code_name(self) -> Option<&'static str> {
        match self {
            MissCause::ToolsChange => Some("tools_changed"),
            MissCause::SystemChange => Some("system_prompt_changed"),
            MissCause::TtlExpiry => Some("ttl_expired_5m"),
            MissCause::EvictionOrUnknown => Some("likely_server_side"),
            _ => None,
        }
    }
}

impl std::fmt::Display for MissCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a request first diverged from its predecessor, in the cache hierarchy's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Another model.
    Model,
    /// The tool definitions.
    Tools,
    /// The system prompt.
    System,
    /// The message history.
    Messages,
    /// The tool definitions or the system prompt, not known which: both lie before the first
    /// breakpoint a Claude Code request carries.
    ToolsOrSystem,
    /// Somewhere, at a level not known.
    Unknown,
}

/// `diagnostics.cache_miss_reason.type`, as the provider spells it. A type this build does not
/// know decodes as [`ProviderMissReason::Other`], never as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderMissReason {
    /// The model differs from the previous message's.
    ModelChanged,
    /// The system prompt differs.
    SystemChanged,
    /// The tool definitions differ.
    ToolsChanged,
    /// The message history diverges.
    MessagesChanged,
    /// The provider holds no fingerprint of the previous message (never sent with diagnostics,
    /// expired, another workspace).
    PreviousMessageNotFound,
    /// The diagnosis could not be made.
    Unavailable,
    /// The comparison found no divergence (the response's `diagnostics` was `null` although
    /// asked for with a previous message id).
    NoDivergence,
    /// `{"cache_miss_reason": null}`: the comparison was still running when the response was
    /// written.
    Pending,
    /// A reason type this build does not know.
    #[serde(other)]
    Other,
}

impl ProviderMissReason {
    /// Parses the wire's `type` string ([`ProviderMissReason::Other`] for an unknown one).
    pub fn from_wire(text: &str) -> ProviderMissReason {
        serde_json::from_value(serde_json::Value::String(text.to_owned()))
            .unwrap_or(ProviderMissReason::Other)
    }

    /// The wire's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProviderMissReason::ModelChanged => "model_changed",
            ProviderMissReason::SystemChanged => "system_changed",
            ProviderMissReason::ToolsChanged => "tools_changed",
            ProviderMissReason::MessagesChanged => "messages_changed",
            ProviderMissReason::PreviousMessageNotFound => "previous_message_not_found",
            ProviderMissReason::Unavailable => "unavailable",
            ProviderMissReason::NoDivergence => "no_divergence",
            ProviderMissReason::Pending => "pending",
            ProviderMissReason::Other => "other",
        }
    }

    /// The reason a level of divergence gives on the wire (`None` for no divergence). A level
    /// not known exactly is spelt as the first reason it may be: tools for tools-or-system,
    /// messages for unknown (what `muninn sim-api` never has to spell: it knows its prompts).
    pub const fn of_level(level: Option<Level>) -> ProviderMissReason {
        match level {
            None => ProviderMissReason::NoDivergence,
            Some(Level::Model) => ProviderMissReason::ModelChanged,
            Some(Level::Tools) | Some(Level::ToolsOrSystem) => ProviderMissReason::ToolsChanged,
            Some(Level::System) => ProviderMissReason::SystemChanged,
            Some(Level::Messages) | Some(Level::Unknown) => ProviderMissReason::MessagesChanged,
        }
    }

    /// The class of a conclusive label; `None` for reasons that label nothing (not found,
    /// unavailable, pending, unknown).
    pub const fn class(self) -> Option<ProviderClass> {
        match self {
            ProviderMissReason::ModelChanged => Some(ProviderClass::Changed(Level::Model)),
            ProviderMissReason::ToolsChanged => Some(ProviderClass::Changed(Level::Tools)),
            ProviderMissReason::SystemChanged => Some(ProviderClass::Changed(Level::System)),
            ProviderMissReason::MessagesChanged => Some(ProviderClass::Changed(Level::Messages)),
            ProviderMissReason::NoDivergence => Some(ProviderClass::NoDivergence),
            _ => None,
        }
    }
}

/// The provider's diagnosis of one request, as recorded beside muninn's cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProviderMiss {
    /// The reason.
    pub reason: ProviderMissReason,
    /// `cache_missed_input_tokens` of a `*_changed` reason: a magnitude (the tokens of the
    /// previous request past the divergence), not a billing figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_tokens: Option<Tokens>,
}

/// The granularity at which a cause and a provider label are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderClass {
    /// The request is structurally its predecessor plus new content.
    NoDivergence,
    /// It diverged at this level.
    Changed(Level),
}

/// Whether muninn's cause (`None`: the request read all it could) agrees with the provider's
/// label; `None` when the label labels nothing (see [`ProviderMissReason::class`]) or the cause
/// is a cold start. A cause of unknown level agrees with a change at any level, a change of
/// tools or system with either.
pub fn agrees(cause: Option<MissCause>, label: &ProviderMiss) -> Option<bool> {
    let theirs = label.reason.class()?;
    let ours = match cause {
        None => ProviderClass::NoDivergence,
        Some(c) => c.provider_class()?,
    };
    Some(match (ours, theirs) {
        (ProviderClass::Changed(Level::Unknown), ProviderClass::Changed(_)) => true,
        (
            ProviderClass::Changed(Level::ToolsOrSystem),
            ProviderClass::Changed(Level::Tools | Level::System),
        ) => true,
        (a, b) => a == b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_vocabularies_map_onto_one() {
        for cause in MissCause::ALL {
            assert_eq!(MissCause::ALL[cause as usize], cause);
            let text = serde_json::to_value(cause).ok();
            assert_eq!(text.as_ref().and_then(|t| t.as_str()), Some(cause.as_str()));
            if let Some(name) = cause.claude_code_name() {
                assert_eq!(MissCause::from_claude_code(name), Some(cause));
            }
        }
        for level in [Level::Model, Level::Tools, Level::System, Level::Messages] {
            let label = ProviderMiss {
                reason: ProviderMissReason::of_level(Some(level)),
                missed_tokens: Some(10),
            };
            assert_eq!(agrees(Some(MissCause::of_level(level)), &label), Some(true));
            assert_eq!(agrees(None, &label), Some(false));
            assert_eq!(agrees(Some(MissCause::PrefixChange), &label), Some(true));
            assert_eq!(
                agrees(Some(MissCause::ToolsOrSystemChange), &label),
                Some(matches!(level, Level::Tools | Level::System))
            );
        }
        let none = ProviderMiss {
            reason: ProviderMissReason::NoDivergence,
            missed_tokens: None,
        };
        assert_eq!(agrees(None, &none), Some(true));
        assert_eq!(agrees(Some(MissCause::TtlExpiry), &none), Some(true));
        assert_eq!(agrees(Some(MissCause::SystemChange), &none), Some(false));
        assert_eq!(agrees(Some(MissCause::ColdStart), &none), None);
        let pending = ProviderMiss {
            reason: ProviderMissReason::Pending,
            missed_tokens: None,
        };
        assert_eq!(agrees(None, &pending), None);
        assert_eq!(
            ProviderMissReason::from_wire("brand_new_reason"),
            ProviderMissReason::Other
        );
        assert_eq!(
            ProviderMissReason::from_wire("tools_changed"),
            ProviderMissReason::ToolsChanged
        );
    }
}
