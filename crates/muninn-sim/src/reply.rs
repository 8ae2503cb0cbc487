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
//!    only tool results, the text `Done.`. When the schema is a Persona's reply (`say[]` of
//!    `room` and `text`, `remember[]`) and the message holds delivery lines as muninn renders
//!    them (`[#room, direct, to you] sender: text`), the reply answers like a Mind
//!    ([`answer_like_a_mind`]): for each room addressed, in order of first appearance, one
//!    readable sentence ([`sentence`]) to the sender of the room's last line, in that room —
//!    `@dm` for a direct message, when the schema offers it — and one note, about the first
//!    sender, of who wrote where (not the words, which stay in the conversation). A value the
//!    schema refuses falls back to the generated one. A message whose text carries
//!    [`TEXT_ANSWER_MARKER`] is answered by rule 6 instead (a model that answers in text though
//!    asked for a structured value: the CLI then nudges it once more).
//! 3. **Tool loop** — the message holds `tool_result` blocks and no text, the user text that
//!    opened the loop (the last user message with text) carries the marker
//!    `[sim: tool rounds N]`, and fewer than N assistant messages since that text called a tool:
//!    the tool the previous assistant message called is called again, with a generated input.
//!    This gives a deterministic tool loop of N rounds (a long Claude Code run); once a user
//!    message of the loop carries text as well (a line the CLI absorbed mid-loop), rules 4–6
//!    answer it instead, which ends the loop.
//!    **Scripted tool loop** (checked first): the opening text carries `[sim: tool calls <JSON
//!    array>]`, each entry `{"name": …, "input": …}` of an offered tool. Answering the opening
//!    text itself, or a message that holds only tool results, the k-th assistant message since
//!    the opening text calls entry k (one `tool_use` block, no text) while entries remain. This
//!    plays the model's side of a tool loop with inputs the caller chose (a host's read-only
//!    tools over a real workspace: which files, which path escapes); once the script is spent,
//!    rule 4 answers and the loop ends.
//! 4. **Tool results** — the message holds `tool_result` blocks and no text: a text reply quoting
//!    the first result.
//! 5. **Tool call** — tools are offered and the text names one exactly (case-sensitive, as a
//!    whole word) together with one of the words `use`, `call`, `run` or `invoke`: a short text
//!    then a call of that tool with a generated input; `stop_reason: "tool_use"`.
//! 6. **Text** — `Reply to turn N: '<text>'`, where N counts the user messages and the text is
//!    the message's first 200 characters.
//!
//! Output tokens are counted with [`muninn_core::tokenize::count`]: a text block its text, a
//! tool call its name plus its input's canonical JSON. When they exceed `max_tokens`, the reply
//! becomes its text cut to fit, with `stop_reason: "max_tokens"`.

use muninn_anthropic::prompt::canonical_string;
use muninn_anthropic::wire::{Content, ContentBlock, MessagesRequest, Role, Tool};
use muninn_backend::schema;
use muninn_core::money::Tokens;
use muninn_core::tokenize::count;
use serde_json::{Value, json};

/// Texts that mark a request as the Claude Code CLI's compaction request.
pub const COMPACTION_MARKERS: &[&str] = &[
    "an <analysis> block followed by a <summary> block",
    "Your task is to create a detailed summary of the conversation",
];

/// The marker a user text opens a tool loop with: `[sim: tool rounds N]` (see the module docs).
pub const TOOL_ROUNDS_MARKER: &str = "[sim: tool rounds ";

/// The marker a user text scripts a tool loop with: `[sim: tool calls <JSON array>]` (see the
/// module docs, rule 3).
pub const TOOL_CALLS_MARKER: &str = "[sim: tool calls ";

/// The marker a user text asks for a text answer with even where the structured-output tool is
/// offered (see the module docs, rule 2).
pub const TEXT_ANSWER_MARKER: &str = "[sim: answer in text]";

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
            ContentBlock::Compaction { content, .. } => count(content),
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

/// N of a `[sim: tool rounds N]` marker in `text`.
fn tool_rounds(text: &str) -> Option<usize> {
    let rest = &text[text.find(TOOL_ROUNDS_MARKER)? + TOOL_ROUNDS_MARKER.len()..];
    rest[..rest.find(']')?].trim().parse().ok()
}

/// A tool loop so far: the text of its opening user message (the last with text) and, for each
/// assistant message since then that called a tool, the first tool it called.
fn loop_so_far(request: &MessagesRequest) -> Option<(String, Vec<&str>)> {
    let opener = request.messages.iter().rposition(|m| {
        m.role == Role::User && texts_of(&m.content).0.iter().any(|t| !t.trim().is_empty())
    })?;
    let text = texts_of(&request.messages[opener].content).0.join("\n");
    let calls = request.messages[opener..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .filter_map(|m| match &m.content {
            Content::Blocks(blocks) => blocks.iter().find_map(|b| match b {
                ContentBlock::ToolUse { name, .. } => Some(name.as_str()),
                _ => None,
            }),
            Content::Text(_) => None,
        })
        .collect();
    Some((text, calls))
}

/// The next call of a `[sim: tool rounds N]` loop, if the loop is still running: the tool the
/// previous assistant message called, when fewer than N assistant messages since the opening
/// text called a tool.
fn next_loop_call(request: &MessagesRequest) -> Option<(String, Value)> {
    let (text, calls) = loop_so_far(request)?;
    let rounds = tool_rounds(&text)?;
    let last = *calls.last()?;
    if calls.len() >= rounds {
        return None;
    }
    let tool = request.tools.iter().find(|t| t.name == last)?;
    let schema_value = tool
        .input_schema
        .clone()
        .unwrap_or(json!({"type": "object"}));
    Some((tool.name.clone(), schema::generate(&schema_value)))
}

/// The entries of a `[sim: tool calls <JSON array>]` script in `text`: the array is read as the
/// first JSON value after the marker (so `]` inside it needs no escaping).
fn tool_script(text: &str) -> Option<Vec<(String, Value)>> {
    let rest = &text[text.find(TOOL_CALLS_MARKER)? + TOOL_CALLS_MARKER.len()..];
    let array = serde_json::Deserializer::from_str(rest)
        .into_iter::<Value>()
        .next()?
        .ok()?;
    array
        .as_array()?
        .iter()
        .map(|e| {
            Some((
                e.get("name")?.as_str()?.to_string(),
                e.get("input")?.clone(),
            ))
        })
        .collect()
}

/// The next call of a scripted tool loop (rule 3), if the script has one left: entry k, where
/// k counts the assistant messages since the opening text that called a tool. Only the opening
/// text itself, or a message of tool results alone, continues the script.
fn next_scripted_call(request: &MessagesRequest) -> Option<(String, Value)> {
    // The opener is the last user message with text, so any later user message holds tool
    // results alone: the script goes on.
    let (text, calls) = loop_so_far(request)?;
    let (name, input) = tool_script(&text)?.into_iter().nth(calls.len())?;
    request
        .tools
        .iter()
        .any(|t| t.name == name)
        .then_some((name, input))
}

/// A delivery line as muninn's renderer writes it: `[<room>(, direct)?(, to you)?] <sender>:
/// <text>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeliveryLine<'a> {
    room: &'a str,
    direct: bool,
    sender: &'a str,
    text: &'a str,
}

fn delivery_line(line: &str) -> Option<DeliveryLine<'_>> {
    let rest = line.strip_prefix('[')?;
    let (tags, said) = rest.split_once("] ")?;
    let mut tags = tags.split(", ");
    let room = tags.next().filter(|r| !r.is_empty() && !r.contains(' '))?;
    let mut direct = false;
    for tag in tags {
        match tag {
            "direct" => direct = true,
            "to you" => {}
            _ => return None,
        }
    }
    let (sender, text) = said.split_once(": ")?;
    (!sender.contains(' ')).then_some(DeliveryLine {
        room,
        direct,
        sender,
        text,
    })
}

/// A name to address `sender` by: `@ada:example.org` → `Ada`.
fn addressed(sender: &str) -> String {
    let name = sender.trim_start_matches('@');
    let name = name.split(':').next().unwrap_or(name);
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "friend".to_string(),
    }
}

/// A readable, deterministic answer to `said` by `sender` (the choice of phrasing is a hash of
/// the text, so the same message always gets the same sentence).
pub fn sentence(sender: &str, said: &str) -> String {
    let name = addressed(sender);
    let quoted = first_chars(said.trim(), 80);
    let hash = said.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let pick = (hash % 3) as usize;
    if said.trim_end().ends_with('?') {
        [
            format!("Good question, {name}. You asked \"{quoted}\" — I am keeping the session warm and will answer it properly once I have looked."),
            format!("{name}, you asked \"{quoted}\". Give me a moment to look; I will come back with what I find."),
            format!("I hear you, {name}: \"{quoted}\" I have the thread and will answer it shortly."),
        ][pick]
            .clone()
    } else {
        [
            format!("Noted, {name}: \"{quoted}\" I will keep it in mind."),
            format!(
                "Thank you, {name}. I have written down \"{quoted}\" and will carry it forward."
            ),
            format!("{name}, I have it: \"{quoted}\" Tell me if there is more."),
        ][pick]
            .clone()
    }
}

/// Fills a generated Persona reply (see the module docs, rule 2) the way a Mind would: one
/// sentence per room addressed in `text` (to the sender of the room's last line; `@dm` for a
/// direct message when the room enum offers it; a room the enum does not offer is not answered),
/// and one note about the first sender saying who wrote where. Anything else is left as
/// generated; a message without a delivery line in an offered room leaves `reply` as it was, and
/// so does a result the schema would refuse.
pub fn answer_like_a_mind(schema_value: &Value, text: &str, reply: &mut Value) {
    let lines: Vec<DeliveryLine<'_>> = text.lines().filter_map(delivery_line).collect();
    let Some(first) = lines.first() else {
        return;
    };
    let rooms: Vec<&str> = schema_value
        .pointer("/properties/say/items/properties/room/enum")
        .and_then(Value::as_array)
        .map(|e| e.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let target = |line: &DeliveryLine<'_>| -> Option<String> {
        let room = if line.direct && rooms.contains(&"@dm") {
            "@dm"
        } else {
            line.room
        };
        (rooms.is_empty() || rooms.contains(&room)).then(|| room.to_string())
    };
    let mut says: Vec<(String, String)> = Vec::new();
    for line in &lines {
        let Some(room) = target(line) else { continue };
        let answer = sentence(line.sender, line.text);
        match says.iter_mut().find(|(r, _)| *r == room) {
            Some(say) => say.1 = answer,
            None => says.push((room, answer)),
        }
    }
    let mut answered = reply.clone();
    if let Some(say) = answered.get_mut("say").and_then(Value::as_array_mut)
        && !says.is_empty()
        && say
            .first()
            .is_some_and(|s| s.get("room").is_some() && s.get("text").is_some())
    {
        *say = says
            .into_iter()
            .map(|(room, text)| json!({"room": room, "text": text}))
            .collect();
    }
    if let Some(notes) = answered.get_mut("remember").and_then(Value::as_array_mut)
        && let Some(note) = notes.first_mut().and_then(Value::as_object_mut)
    {
        // Who spoke and where, not what: the words stay in the conversation, so a new segment's
        // memory does not carry the old one's text.
        let place = if first.direct {
            "a direct message".to_string()
        } else {
            first.room.to_string()
        };
        let said = format!("{} wrote to me in {place}.", addressed(first.sender));
        note.insert("text".to_string(), json!(said));
        note.insert("about".to_string(), json!([first.sender]));
        notes.truncate(1);
    }
    if schema::validate(schema_value, &answered).is_ok() {
        *reply = answered;
    }
}

/// The contents of the request's user messages, in order.
fn user_contents(request: &MessagesRequest) -> Vec<&Content> {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| &m.content)
        .collect()
}

/// The summary of a compaction (rule 1, and the simulator's on-demand compaction): an
/// `<analysis>` block then a `<summary>` naming the first user request, the number of messages
/// and the user text before the last.
pub fn compaction_summary(request: &MessagesRequest) -> String {
    let user_messages = user_contents(request);
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
    format!(
        "<analysis>The conversation has {} messages.</analysis>\n<summary>1. Primary Request and Intent: {}\n2. Most recent user message: {}\n3. Pending tasks: none recorded.</summary>",
        request.messages.len(),
        first_chars(&first, 200),
        first_chars(&previous, 200),
    )
}

/// The reply to `request`. `id_seed` makes tool-call ids unique per conversation (the caller
/// passes the prompt's fingerprint), so the reply stays a function of the request.
pub fn reply(request: &MessagesRequest, id_seed: u64) -> Reply {
    // `max_tokens: 0` (a keep-warm ping): nothing is generated.
    if request.max_tokens == 0 {
        return Reply {
            content: Vec::new(),
            stop_reason: "max_tokens",
            output_tokens: 0,
        };
    }
    let content = content_for(request, id_seed);
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
    cut_to_fit(&content, request.max_tokens)
}

/// What the simulated model says, by the first that applies: a compaction summary when asked
/// for one; a structured answer when the structured-output tool is offered; the next scripted
/// or looping tool call; an acknowledgement of tool results; a call of a tool the user named;
/// else a greeting or an echo of the turn.
fn content_for(request: &MessagesRequest, id_seed: u64) -> Vec<ContentBlock> {
    let user_messages = user_contents(request);
    let (texts, results) = user_messages
        .last()
        .map(|c| texts_of(c))
        .unwrap_or_default();
    let text = texts.join("\n");
    let tool_id = format!("toolu_sim_{id_seed:016x}");

    if COMPACTION_MARKERS.iter().any(|m| text.contains(m)) {
        vec![ContentBlock::text(compaction_summary(request))]
    } else if let Some(tool) = request.tools.iter().find(|t| t.name == STRUCTURED_OUTPUT)
        && !text.contains(TEXT_ANSWER_MARKER)
    {
        structured_answer(tool, &texts, &text, tool_id)
    } else if let Some((name, input)) = next_scripted_call(request).or_else(|| {
        (texts.is_empty() && !results.is_empty())
            .then(|| next_loop_call(request))
            .flatten()
    }) {
        vec![ContentBlock::ToolUse {
            id: tool_id,
            name,
            input,
            cache_control: None,
            extra: serde_json::Map::new(),
        }]
    } else if texts.is_empty() && !results.is_empty() {
        vec![ContentBlock::text(format!(
            "Tool result received: {}",
            first_chars(&results[0], 80)
        ))]
    } else if let Some(tool) = named_tool(request, &text) {
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
                extra: serde_json::Map::new(),
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
    }
}

/// A call of the structured-output tool with an input that fits its schema, answering `text`;
/// a turn with no text gets a plain "Done." instead.
fn structured_answer(
    tool: &Tool,
    texts: &[String],
    text: &str,
    tool_id: String,
) -> Vec<ContentBlock> {
    if !texts.iter().any(|t| !t.trim().is_empty()) {
        return vec![ContentBlock::text("Done.")];
    }
    let schema_value = tool
        .input_schema
        .clone()
        .unwrap_or(json!({"type": "object"}));
    let mut input = schema::generate(&schema_value);
    answer_like_a_mind(&schema_value, text, &mut input);
    vec![ContentBlock::ToolUse {
        id: tool_id,
        name: STRUCTURED_OUTPUT.to_string(),
        input,
        cache_control: None,
        extra: serde_json::Map::new(),
    }]
}

/// The offered tool the user names in `text` next to a verb asking for it ("use", "call",
/// "run", "invoke").
fn named_tool<'r>(request: &'r MessagesRequest, text: &str) -> Option<&'r Tool> {
    request.tools.iter().find(|t| {
        mentions(text, &t.name)
            && text.split(|c: char| !c.is_alphanumeric()).any(|w| {
                matches!(
                    w.to_ascii_lowercase().as_str(),
                    "use" | "call" | "run" | "invoke"
                )
            })
    })
}

/// A reply too long for `max_tokens`: its text, cut at a word boundary to fit.
fn cut_to_fit(content: &[ContentBlock], max_tokens: Tokens) -> Reply {
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
        if count(&format!("{cut}{word}")) > max_tokens {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_persona_reply_answers_each_room_where_it_was_addressed() {
        let schema = json!({"type": "object", "properties": {
            "say": {"type": "array", "items": {"type": "object", "properties": {
                "room": {"type": "string", "enum": ["#swarm", "#burn", "@dm"]},
                "text": {"type": "string", "minLength": 1}}, "required": ["room", "text"]}},
            "remember": {"type": "array", "maxItems": 8, "items": {"type": "string"}}},
            "required": ["say", "remember"]});
        let text = "[notice: the doctrine changed; from now on it reads]\nBe brief.\n\n  (#burn) @bo:hs: context, not addressed\n[#burn] @ann:hs: first\n[#swarm, to you] @bo:hs: hello: there\n[#burn] @ann:hs: second\n[!x:hs] @cy:hs: a room not allowed\n";
        let answered = |schema: &Value, text: &str| {
            let mut value = schema::generate(schema);
            answer_like_a_mind(schema, text, &mut value);
            value
        };
        let value = answered(&schema, text);
        assert_eq!(
            value["say"],
            json!([
                {"room": "#burn", "text": sentence("@ann:hs", "second")},
                {"room": "#swarm", "text": sentence("@bo:hs", "hello: there")},
            ])
        );
        assert_eq!(value["remember"], schema::generate(&schema)["remember"]);
        let direct = answered(&schema, "[!dm:hs, direct] @ann:hs: psst\n");
        assert_eq!(
            direct["say"],
            json!([{"room": "@dm", "text": sentence("@ann:hs", "psst")}])
        );
        // Not a Persona's schema, or nothing addressed in an allowed room: generated as before.
        let plain = json!({"type": "object"});
        assert_eq!(answered(&plain, text), schema::generate(&plain));
        assert_eq!(answered(&schema, "just text"), schema::generate(&schema));
    }

    fn request(messages: Value) -> MessagesRequest {
        serde_json::from_value(json!({
            "model": "claude-opus-5-5", "max_tokens": 500,
            "tools": [{"name": "Read", "description": "reads",
                       "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                                        "required": ["file_path"]}}],
            "messages": messages,
        }))
        .unwrap()
    }

    fn call(id: &str) -> Value {
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Read", "input": {}}]})
    }

    fn result(id: &str) -> Value {
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]})
    }

    #[test]
    fn a_persona_reply_is_a_sentence_in_the_room_it_was_addressed_in() {
        let schema = json!({
            "type": "object",
            "properties": {
                "say": {"type": "array", "items": {"type": "object", "properties": {
                    "room": {"enum": ["#swarm", "#burn", "@dm"]}, "text": {"type": "string", "minLength": 1}},
                    "required": ["room", "text"]}},
                "remember": {"type": "array", "maxItems": 8, "items": {"type": "object", "properties": {
                    "text": {"type": "string"}, "about": {"type": "array", "items": {"type": "string"}},
                    "salience": {"type": "integer", "minimum": 0, "maximum": 10}},
                    "required": ["text", "about", "salience"]}}
            },
            "required": ["say", "remember"]
        });
        let mut reply = schema::generate(&schema);
        let text = "  (#burn) bo: earlier\n[#burn, to you] @bo:example.org: what is the plan?\n[#swarm] ari: and here";
        answer_like_a_mind(&schema, text, &mut reply);
        assert_eq!(schema::validate(&schema, &reply), Ok(()));
        assert_eq!(reply["say"][0]["room"], "#burn");
        let said = reply["say"][0]["text"].as_str().unwrap();
        assert!(
            said.contains("Bo") && said.contains("what is the plan?"),
            "{said}"
        );
        assert_eq!(reply["remember"][0]["about"], json!(["@bo:example.org"]));
        // The same message, the same sentence.
        let mut again = schema::generate(&schema);
        answer_like_a_mind(&schema, text, &mut again);
        assert_eq!(again, reply);
        // A direct message is answered in @dm.
        let mut dm = schema::generate(&schema);
        answer_like_a_mind(&schema, "[@ada, direct] @ada: psst", &mut dm);
        assert_eq!(dm["say"][0]["room"], "@dm");
        // A room the schema does not offer: its first room.
        let mut elsewhere = schema::generate(&schema);
        answer_like_a_mind(&schema, "[#other] cy: hi", &mut elsewhere);
        assert_eq!(elsewhere["say"][0]["room"], "#swarm");
    }

    /// The text-answer marker makes the model answer in text though the structured-output tool
    /// is offered (a model the CLI has to nudge); without it the same request is a tool call.
    #[test]
    fn the_text_answer_marker_answers_in_text_beside_the_structured_output_tool() {
        let asked = |text: &str| -> MessagesRequest {
            serde_json::from_value(json!({
                "model": "claude-opus-5-5", "max_tokens": 500,
                "tools": [{"name": STRUCTURED_OUTPUT, "description": "answer",
                           "input_schema": {"type": "object"}}],
                "messages": [{"role": "user", "content": text}],
            }))
            .unwrap()
        };
        let marked = reply(&asked(&format!("hello {TEXT_ANSWER_MARKER}")), 1);
        assert!(
            matches!(&marked.content[..], [ContentBlock::Text { text, .. }] if text.starts_with("Reply to turn 1")),
            "{marked:?}"
        );
        let plain = reply(&asked("hello"), 1);
        assert!(
            matches!(&plain.content[..], [ContentBlock::ToolUse { name, .. }] if name == STRUCTURED_OUTPUT),
            "{plain:?}"
        );
    }

    #[test]
    fn a_tool_loop_runs_its_rounds_then_answers() {
        let opener = json!({"role": "user", "content": "use Read please [sim: tool rounds 3]"});
        let first = reply(&request(json!([opener])), 1);
        assert_eq!(first.stop_reason, "tool_use");
        // Rounds 2 and 3 call the tool again; after the third result the loop answers in text.
        let mut messages = vec![opener.clone()];
        for (i, expected) in ["tool_use", "tool_use", "end_turn"].into_iter().enumerate() {
            let id = format!("t{i}");
            messages.push(call(&id));
            messages.push(result(&id));
            let r = reply(&request(Value::Array(messages.clone())), i as u64);
            assert_eq!(r.stop_reason, expected, "after {} rounds", i + 1);
        }
        // A text absorbed into the loop ends it at once.
        let mut absorbed = vec![opener, call("a")];
        absorbed.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
            {"type": "text", "text": "wrap up now"}]}));
        let r = reply(&request(Value::Array(absorbed)), 9);
        assert_eq!(r.stop_reason, "end_turn");
        assert!(
            matches!(&r.content[0], ContentBlock::Text { text, .. } if text.contains("wrap up now"))
        );
        // Without the marker a tool result is quoted, as before.
        let plain = json!([{"role": "user", "content": "use Read"}, call("b"), result("b")]);
        assert_eq!(reply(&request(plain), 2).stop_reason, "end_turn");
    }

    #[test]
    fn a_scripted_tool_loop_calls_each_entry_in_order_then_answers() {
        let opener = json!({"role": "user", "content":
            "look [sim: tool calls [{\"name\": \"Read\", \"input\": {\"file_path\": \"a]b\"}}, {\"name\": \"Read\", \"input\": {\"file_path\": \"c\"}}, {\"name\": \"Nope\", \"input\": {}}]] thanks"});
        let called = |r: &Reply| match r.content.as_slice() {
            [ContentBlock::ToolUse { name, input, .. }] => Some((name.clone(), input.clone())),
            _ => None,
        };
        // The opening text itself calls the first entry, with its input as scripted.
        let first = reply(&request(json!([opener])), 1);
        assert_eq!(first.stop_reason, "tool_use");
        assert_eq!(
            called(&first),
            Some(("Read".to_string(), json!({"file_path": "a]b"})))
        );
        let mut messages = vec![opener.clone(), call("t0"), result("t0")];
        let second = reply(&request(Value::Array(messages.clone())), 2);
        assert_eq!(
            called(&second),
            Some(("Read".to_string(), json!({"file_path": "c"})))
        );
        // An entry naming a tool not offered ends the script: the result is quoted.
        messages.extend([call("t1"), result("t1")]);
        let third = reply(&request(Value::Array(messages)), 3);
        assert_eq!(third.stop_reason, "end_turn");
        // A text within the loop (a flush asked for) is answered, not scripted.
        let absorbed = json!([opener, call("a"), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
            {"type": "text", "text": "flush now"}]}]);
        assert_eq!(reply(&request(absorbed), 4).stop_reason, "end_turn");
    }
}
