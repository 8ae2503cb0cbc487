//! The simulated model: a pure, deterministic function from a request to a reply.
//!
//! The same request always gets the same reply. The rules, first match wins, all looking at the
//! **last `user` message** (a `role: "system"` message after it, as the Claude Code CLI sends,
//! is skipped):
//!
//! 1. **Compaction** — its text contains one of [`COMPACTION_MARKERS`] (the Claude Code CLI's
//!    summary instruction): an `<analysis>` block then a `<summary>` naming the first user
//!    request, the number of messages and the last user text.
//! 2. **Structured output** — a tool named `StructuredOutput` is offered (the CLI's
//!    `--json-schema`): if the message has text, a call of that tool whose input is generated
//!    from its `input_schema` ([`muninn_backend::schema::generate`], schema-valid); if it holds
//!    only tool results, the text `Done.`.
//! 3. **Tool results** — the message holds `tool_result` blocks and no text: a text reply quoting
//!    the first result.
//! 4. **Tool call** — tools are offered and the text names one exactly (case-sensitive, as a
//!    whole word) together with one of the words `use`, `call`, `run` or `invoke`: a short text
//!    then a call of that tool with a generated input; `stop_reason: "tool_use"`.
//! 5. **Text** — `Reply to turn N: '<text>'`, where N counts the user messages and the text is
//!    the message's first 200 characters.
//!
//! Output tokens are counted with [`muninn_core::tokenize::count`]: a text block its text, a
//! tool call its name plus its input's canonical JSON. When they exceed `max_tokens`, the reply
//! becomes its text cut to fit, with `stop_reason: "max_tokens"`.

use muninn_anthropic::prompt::canonical_string;
use muninn_anthropic::wire::{Content, ContentBlock, MessagesRequest, Role};
use muninn_backend::schema;
use muninn_core::money::Tokens;
use muninn_core::tokenize::count;
use serde_json::{Value, json};

/// Texts that mark a request as the Claude Code CLI's compaction request.
pub const COMPACTION_MARKERS: &[&str] = &[
    "an <analysis> block followed by a <summary> block",
    "Your task is to create a detailed summary of the conversation",
];

/// The Claude Code CLI's structured-output tool name.
pub const STRUCTURED_OUTPUT: &str = "StructuredOutput";

/// A reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Its content blocks.
    pub content: Vec<ContentBlock>,
    /// `end_turn`, `tool_use` or `max_tokens`.
    pub stop_reason: &'static str,
    /// Output tokens.
    pub output_tokens: Tokens,
}

/// Output tokens of reply blocks (see the module docs).
pub fn output_tokens(content: &[ContentBlock]) -> Tokens {
    let n: Tokens = content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text, .. } => count(text),
            ContentBlock::ToolUse { name, input, .. } => {
                count(name) + count(&canonical_string(input))
            }
            _ => 0,
        })
        .sum();
    n.max(1)
}

fn texts_of(content: &Content) -> (Vec<String>, Vec<String>) {
    match content {
        Content::Text(s) => (vec![s.clone()], Vec::new()),
        Content::Blocks(blocks) => {
            let mut texts = Vec::new();
            let mut results = Vec::new();
            for b in blocks {
                match b {
                    ContentBlock::Text { text, .. } => texts.push(text.clone()),
                    ContentBlock::ToolResult { content, .. } => results.push(match content {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Array(items)) => items
                            .iter()
                            .filter_map(|i| i.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join(" "),
                        _ => String::new(),
                    }),
                    _ => {}
                }
            }
            (texts, results)
        }
    }
}

fn first_chars(s: &str, n: usize) -> String {
    let cut: String = s.chars().take(n).collect();
    if cut.len() < s.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

fn mentions(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .any(|w| w == name)
}

/// The reply to `request`. `id_seed` makes tool-call ids unique per conversation (the caller
/// passes the prompt's fingerprint), so the reply stays a function of the request.
pub fn reply(request: &MessagesRequest, id_seed: u64) -> Reply {
    let user_messages: Vec<&Content> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| &m.content)
        .collect();
    let (texts, results) = user_messages
        .last()
        .map(|c| texts_of(c))
        .unwrap_or_default();
    let text = texts.join("\n");
    let tool_id = format!("toolu_sim_{id_seed:016x}");

    let content = if COMPACTION_MARKERS.iter().any(|m| text.contains(m)) {
        let first = user_messages
            .first()
            .map(|c| texts_of(c).0.join(" "))
            .unwrap_or_default();
        let previous = user_messages
            .len()
            .checked_sub(2)
            .and_then(|i| user_messages.get(i))
            .map(|c| texts_of(c).0.join(" "))
            .unwrap_or_default();
        vec![ContentBlock::text(format!(
            "<analysis>The conversation has {} messages.</analysis>\n<summary>1. Primary Request and Intent: {}\n2. Most recent user message: {}\n3. Pending tasks: none recorded.</summary>",
            request.messages.len(),
            first_chars(&first, 200),
            first_chars(&previous, 200),
        ))]
    } else if let Some(tool) = request.tools.iter().find(|t| t.name == STRUCTURED_OUTPUT) {
        if texts.iter().any(|t| !t.trim().is_empty()) {
            let schema_value = tool
                .input_schema
                .clone()
                .unwrap_or(json!({"type": "object"}));
            vec![ContentBlock::ToolUse {
                id: tool_id,
                name: STRUCTURED_OUTPUT.to_string(),
                input: schema::generate(&schema_value),
                cache_control: None,
            }]
        } else {
            vec![ContentBlock::text("Done.")]
        }
    } else if texts.is_empty() && !results.is_empty() {
        vec![ContentBlock::text(format!(
            "Tool result received: {}",
            first_chars(&results[0], 80)
        ))]
    } else if let Some(tool) = request.tools.iter().find(|t| {
        mentions(&text, &t.name)
            && text.split(|c: char| !c.is_alphanumeric()).any(|w| {
                matches!(
                    w.to_ascii_lowercase().as_str(),
                    "use" | "call" | "run" | "invoke"
                )
            })
    }) {
        let schema_value = tool
            .input_schema
            .clone()
            .unwrap_or(json!({"type": "object"}));
        vec![
            ContentBlock::text(format!("I will use the {} tool.", tool.name)),
            ContentBlock::ToolUse {
                id: tool_id,
                name: tool.name.clone(),
                input: schema::generate(&schema_value),
                cache_control: None,
            },
        ]
    } else if user_messages.is_empty() {
        vec![ContentBlock::text("Hello.")]
    } else {
        vec![ContentBlock::text(format!(
            "Reply to turn {}: '{}'",
            user_messages.len(),
            first_chars(&text, 200)
        ))]
    };

    let stop_reason = if content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    {
        "tool_use"
    } else {
        "end_turn"
    };
    let tokens = output_tokens(&content);
    if tokens <= request.max_tokens {
        return Reply {
            content,
            stop_reason,
            output_tokens: tokens,
        };
    }
    // Too long: the text, cut at a word boundary to fit.
    let full: String = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut cut = String::new();
    for word in full.split_inclusive(' ') {
        if count(&format!("{cut}{word}")) > request.max_tokens {
            break;
        }
        cut.push_str(word);
    }
    if cut.is_empty() {
        // Not even one word fits: a single character, so the reply is never empty.
        cut = full
            .chars()
            .next()
            .map(String::from)
            .unwrap_or_else(|| ".".to_string());
    }
    let content = vec![ContentBlock::text(cut)];
    Reply {
        output_tokens: output_tokens(&content),
        content,
        stop_reason: "max_tokens",
    }
}
