//! Wire types of the provider's own context tools (`shared/reference/anthropic-api-context-features.md`):
//! on-demand server compaction (beta [`COMPACTION_BETA`]), threshold-mode server compaction
//! (edit [`COMPACT`], beta [`THRESHOLD_COMPACTION_BETA`]), tool-result and thinking clearing
//! (beta [`CONTEXT_MANAGEMENT_BETA`], edits [`CLEAR_TOOL_USES`] and [`CLEAR_THINKING`]), and the
//! per-iteration usage that carries a compaction's own tokens.
//!
//! The billing trap these types exist for: a compaction's tokens appear **only** in
//! `usage.iterations[]` (entries of type `compaction`); the top-level counts exclude them (they
//! are 0 for an on-demand compaction, and those of the `message` iteration alone for a
//! threshold compaction that went on to answer). [`super::Usage::to_core`] adds them, so a ledger fed
//! from it never under-counts.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The beta that enables on-demand compaction (top-level `compaction`).
pub const COMPACTION_BETA: &str = "compact-2026-09-04";

/// The beta that enables `context_management` edits.
pub const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";

/// The type of the tool-result clearing edit.
pub const CLEAR_TOOL_USES: &str = "clear_tool_uses_20250919";

/// The type of the thinking clearing edit (must be listed first among the edits).
pub const CLEAR_THINKING: &str = "clear_thinking_20251015";

/// The type of the threshold-mode compaction edit.
pub const COMPACT: &str = "compact_20260112";

/// The beta that enables threshold-mode compaction (edit [`COMPACT`]). It is not the
/// on-demand [`COMPACTION_BETA`].
pub const THRESHOLD_COMPACTION_BETA: &str = "compact-2026-01-12";

/// The longest `compaction.instructions` the API accepts, in characters.
pub const MAX_COMPACTION_INSTRUCTIONS_CHARS: usize = 16_384;

/// The `stop_reason` of a reply that is a compaction.
pub const STOP_COMPACTION: &str = "compaction";

/// A request's top-level `compaction`: summarise the conversation now, on the provider side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionRequest {
    /// Always `summarize`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Replaces the provider's default summary prompt (at most
    /// [`MAX_COMPACTION_INSTRUCTIONS_CHARS`] characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl CompactionRequest {
    /// A `summarize` compaction with optional instructions.
    pub fn summarize(instructions: Option<String>) -> CompactionRequest {
        CompactionRequest {
            kind: "summarize".to_string(),
            instructions,
        }
    }
}

/// A request's `context_management`: edits the provider applies to the prompt before the model
/// reads it. Not combinable with [`CompactionRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextManagementRequest {
    /// The edits, in the order the provider applies them.
    pub edits: Vec<ContextEdit>,
}

/// One context edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ContextEdit {
    /// Clear old tool results (and optionally their calls' inputs).
    #[serde(rename = "clear_tool_uses_20250919")]
    ClearToolUses(ClearToolUses),
    /// Clear the thinking blocks of all but the latest assistant turns.
    #[serde(rename = "clear_thinking_20251015")]
    ClearThinking(ClearThinking),
    /// Summarise the conversation on the provider side once the prompt passes a threshold.
    #[serde(rename = "compact_20260112")]
    Compact(CompactEdit),
    /// An edit this crate does not know, kept verbatim.
    #[serde(untagged)]
    Unknown(Value),
}

/// `clear_thinking_20251015`: the thinking blocks of every assistant turn but the last
/// `keep` ones are dropped from the prompt. The API wants it listed first among the edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClearThinking {
    /// The turns whose thinking is kept (default: the last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<ThinkingKeep>,
}

impl ClearThinking {
    /// The documented default: the thinking of the last assistant turn is kept.
    pub const DEFAULT_KEEP_TURNS: u64 = 1;

    /// The assistant turns whose thinking is kept, newest first (`None`: all of them).
    pub fn kept_turns(&self) -> Option<u64> {
        match self.keep {
            None => Some(Self::DEFAULT_KEEP_TURNS),
            Some(ThinkingKeep::Turns(t)) => Some(t.value),
            Some(ThinkingKeep::All(_)) => None,
        }
    }
}

/// What [`ClearThinking`] keeps: `{"type": "thinking_turns", "value": N}` or `"all"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ThinkingKeep {
    /// The last N assistant turns' thinking.
    Turns(ThinkingTurns),
    /// Every turn's thinking (nothing is cleared: the cache is never broken).
    All(KeepAll),
}

impl ThinkingKeep {
    /// The last `n` turns.
    pub fn turns(n: u64) -> ThinkingKeep {
        ThinkingKeep::Turns(ThinkingTurns {
            kind: ThinkingTurnsKind::ThinkingTurns,
            value: n,
        })
    }
}

/// `{"type": "thinking_turns", "value": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkingTurns {
    /// Always `thinking_turns`.
    #[serde(rename = "type")]
    pub kind: ThinkingTurnsKind,
    /// How many turns.
    pub value: u64,
}

/// The one kind of [`ThinkingTurns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThinkingTurnsKind {
    /// `thinking_turns`.
    #[serde(rename = "thinking_turns")]
    ThinkingTurns,
}

/// The string `"all"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeepAll {
    /// `all`.
    #[serde(rename = "all")]
    All,
}

/// `compact_20260112` (beta [`THRESHOLD_COMPACTION_BETA`]): once the prompt passes `trigger`,
/// the provider summarises the conversation into a signed `compaction` block, put first in the
/// reply, and answers from the summary — or stops there with `stop_reason: "compaction"` when
/// `pause_after_compaction`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompactEdit {
    /// The prompt size past which the conversation is compacted (default 150,000 input
    /// tokens, at least [`CompactEdit::MIN_TRIGGER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<EditAmount>,
    /// Stop after the compaction block instead of answering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause_after_compaction: bool,
    /// Replaces the provider's default summary prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl CompactEdit {
    /// The documented default trigger, in input tokens.
    pub const DEFAULT_TRIGGER: u64 = 150_000;
    /// The smallest trigger the API accepts, in input tokens.
    pub const MIN_TRIGGER: u64 = 50_000;

    /// The trigger in input tokens.
    pub fn trigger_tokens(&self) -> u64 {
        self.trigger.map_or(Self::DEFAULT_TRIGGER, |a| a.value)
    }
}

/// An amount in an edit: `{"type": "input_tokens" | "tool_uses", "value": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditAmount {
    /// What is counted: `input_tokens` or `tool_uses`.
    #[serde(rename = "type")]
    pub kind: AmountKind,
    /// How many.
    pub value: u64,
}

/// What an [`EditAmount`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmountKind {
    /// Prompt tokens.
    InputTokens,
    /// Tool uses.
    ToolUses,
}

impl EditAmount {
    /// `n` input tokens.
    pub fn tokens(n: u64) -> EditAmount {
        EditAmount {
            kind: AmountKind::InputTokens,
            value: n,
        }
    }

    /// `n` tool uses.
    pub fn tool_uses(n: u64) -> EditAmount {
        EditAmount {
            kind: AmountKind::ToolUses,
            value: n,
        }
    }
}

/// `clear_tool_uses_20250919`: once the prompt reaches `trigger`, the results of all but the
/// last `keep` tool uses are replaced by a placeholder — if that clears at least
/// `clear_at_least` tokens (so that a clear is worth breaking the cache).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClearToolUses {
    /// The prompt size that triggers the edit (default 100,000 input tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<EditAmount>,
    /// Tool uses kept, newest first (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<EditAmount>,
    /// The least a clear must free to be applied (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_at_least: Option<EditAmount>,
    /// Tools whose uses are never cleared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_tools: Vec<String>,
    /// Whether the calls' inputs are cleared too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_tool_inputs: bool,
}

impl ClearToolUses {
    /// The documented default trigger, in input tokens.
    pub const DEFAULT_TRIGGER: u64 = 100_000;
    /// The documented default number of tool uses kept.
    pub const DEFAULT_KEEP: u64 = 3;

    /// The trigger in input tokens.
    pub fn trigger_tokens(&self) -> u64 {
        self.trigger.map_or(Self::DEFAULT_TRIGGER, |a| a.value)
    }

    /// The tool uses kept.
    pub fn keep_uses(&self) -> u64 {
        self.keep.map_or(Self::DEFAULT_KEEP, |a| a.value)
    }

    /// The least a clear must free, in input tokens.
    pub fn at_least_tokens(&self) -> u64 {
        self.clear_at_least.map_or(0, |a| a.value)
    }
}

/// A response's `context_management`: the edits the provider applied to this request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContextManagementResponse {
    /// Each applied edit (an edit whose trigger was not reached is absent).
    #[serde(default)]
    pub applied_edits: Vec<AppliedEdit>,
}

/// One applied edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedEdit {
    /// The edit's type (`clear_tool_uses_20250919`, `clear_thinking_20251015`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Tool uses whose results were cleared (a tool-result clear's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cleared_tool_uses: u64,
    /// Assistant turns whose thinking was cleared (a thinking clear's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cleared_thinking_turns: u64,
    /// Prompt tokens the clear removed.
    #[serde(default)]
    pub cleared_input_tokens: u64,
}

/// One entry of `usage.iterations[]`: the usage of one sampling pass inside a request. A
/// `compaction` entry is billed on top of the top-level counts; a `message` entry repeats them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageIteration {
    /// `compaction` or `message` (others kept verbatim).
    #[serde(rename = "type")]
    pub kind: String,
    /// Uncached prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Prompt tokens written to the cache (the sum of the `cache_creation` split).
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// The write split by TTL, as on the top level: the pass writes the prefix the request's
    /// breakpoints mark, at their TTLs. Without it, every written token is a 5-minute write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation: Option<super::CacheCreation>,
    /// Fields this crate does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl UsageIteration {
    /// Whether this entry is billed on top of the top-level usage (every kind but `message`,
    /// which repeats the top-level counts).
    pub fn billed_separately(&self) -> bool {
        self.kind != "message"
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
