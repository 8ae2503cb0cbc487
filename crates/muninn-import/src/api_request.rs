//! A Messages API request body (`POST /v1/messages`), decoded into what the `api_log` reader
//! takes from it ([`RequestBody`]) as it streams past: no part of the request is kept whole.
//!
//! The reader needs every block's exact identity (to tell a continued conversation from a
//! rewritten one), so each block is hashed: its JSON with the `cache_control` marker removed,
//! keys in sorted order (the canonical form `serde_json::Value` writes). Decoding the request
//! into a `Value` tree first and copying its blocks to strip the markers took 10 to 15 times
//! the line's size in memory (a 57 MB line of short tool results: 868 MB). Here one block at a
//! time is a `Value`, and a message's canonical bytes are hashed as they are written (only the
//! head's, `tools` and `system`, are buffered, as they may come in either order): memory is a
//! small multiple of the line, whatever its blocks' sizes.
//!
//! The fingerprints are those of the whole-`Value` decoding, byte for byte: a thread's name
//! (`head-<hash>`) is one.

use crate::json::Str;
use muninn_core::cache::BytesHasher;
use muninn_core::trace::ToolResults;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::io::Write;

/// What the importer takes from a request's body.
#[derive(Debug)]
pub(crate) struct RequestBody {
    /// `model`.
    pub model: Option<String>,
    /// `metadata.user_id` (Claude Code puts the session there).
    pub user_id: Option<String>,
    /// The blocks' fingerprints and counts.
    pub shape: Shape,
}

/// The fingerprints and counts of a request's blocks.
#[derive(Debug)]
pub(crate) struct Shape {
    /// The fingerprint of `tools` and `system`, markers removed.
    pub head: u64,
    /// Each message's fingerprint, markers removed and a plain-string `content` read as one
    /// text block.
    pub messages: Vec<u64>,
    /// The tool results of each message, in step with `messages`: a request that continues
    /// the conversation adds only its new messages' ones.
    pub tool_results: Vec<ToolResults>,
    /// Content blocks of all the messages.
    pub blocks: u32,
    /// The last message is the user's and holds no `tool_result` block.
    pub boundary: bool,
    /// The `cache_control` markers' TTLs in request order: tools, system, messages (`None` =
    /// the default 5m).
    pub markers: Vec<Option<String>>,
}

impl<'de> Deserialize<'de> for RequestBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RequestVisitor)
    }
}

/// The three places markers come from, in the order the API reads them, whatever the order
/// of the request's fields.
#[derive(Debug, Default)]
struct Parts {
    tools: Option<Blocks<Vec<u8>>>,
    system: Option<Blocks<Vec<u8>>>,
    messages: Option<Messages>,
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = RequestBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Messages API request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestBody, A::Error> {
        #[derive(Deserialize)]
        struct Metadata {
            user_id: Option<String>,
        }
        let mut model: Option<Option<String>> = None;
        let mut metadata: Option<Option<Metadata>> = None;
        let mut parts = Parts::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            // A field given twice is refused, as a derived decoder refuses it.
            match key.as_str() {
                "model" => set_once::<_, A::Error>(&mut model, "model", map.next_value()?)?,
                "metadata" => {
                    set_once::<_, A::Error>(&mut metadata, "metadata", map.next_value()?)?;
                }
                "tools" => {
                    let tools = map.next_value_seed(BlocksSeed::new(true, Vec::new()))?;
                    set_once::<_, A::Error>(&mut parts.tools, "tools", tools)?;
                }
                "system" => {
                    let system = map.next_value_seed(BlocksSeed::new(false, Vec::new()))?;
                    set_once::<_, A::Error>(&mut parts.system, "system", system)?;
                }
                "messages" => {
                    let messages = map.next_value_seed(MessagesSeed)?;
                    set_once::<_, A::Error>(&mut parts.messages, "messages", messages)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(RequestBody {
            model: model.flatten(),
            user_id: metadata.flatten().and_then(|m| m.user_id),
            shape: parts.shape(),
        })
    }
}

/// Fills a field's slot, refusing a second value.
fn set_once<T, E: de::Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(field));
    }
    *slot = Some(value);
    Ok(())
}

impl Parts {
    fn shape(self) -> Shape {
        let (tools, system) = (
            self.tools.unwrap_or_default(),
            self.system.unwrap_or_default(),
        );
        let messages = self.messages.unwrap_or_default();
        // `[[tools…],[system…]]`, as the whole-`Value` decoding wrote it.
        let mut head = BytesHasher::default();
        head.update(b"[[");
        head.update(&tools.out);
        head.update(b"],[");
        head.update(&system.out);
        head.update(b"]]");
        let mut markers = tools.markers;
        markers.extend(system.markers);
        markers.extend(messages.markers);
        Shape {
            head: head.finish(),
            messages: messages.fingerprints,
            tool_results: messages.tool_results,
            blocks: messages.blocks,
            boundary: messages.boundary,
            markers,
        }
    }
}

/// A field of blocks (`tools`, `system`, a message's `content`), markers removed: their
/// canonical JSON, comma-separated, written to `out` (a buffer, or a hasher that keeps none of
/// it), and what the counts need.
#[derive(Debug, Default)]
struct Blocks<W> {
    out: W,
    count: u32,
    markers: Vec<Option<String>>,
    tool_results: ToolResults,
}

impl<W: Write> Blocks<W> {
    fn new(out: W) -> Blocks<W> {
        Blocks {
            out,
            count: 0,
            markers: Vec::new(),
            tool_results: ToolResults::default(),
        }
    }

    /// Adds one block: its marker taken off, counted, and written out canonically.
    fn push(&mut self, mut block: Value) -> serde_json::Result<()> {
        if let Value::Object(map) = &mut block
            && let Some(marker) = map.remove("cache_control")
        {
            let ttl = marker.get("ttl").and_then(Value::as_str).map(str::to_owned);
            self.markers.push(ttl);
        }
        if block.get("type").and_then(Value::as_str) == Some("tool_result") {
            let tokens = muninn_core::mask::tool_result_tokens(block.get("content"));
            self.tool_results = add(self.tool_results, ToolResults { tokens, uses: 1 });
        }
        if self.count > 0 {
            self.out.write_all(b",").map_err(serde_json::Error::io)?;
        }
        self.count = self.count.saturating_add(1);
        serde_json::to_writer(&mut self.out, &block)
    }
}

/// Two sets of tool results as one.
pub(crate) fn add(a: ToolResults, b: ToolResults) -> ToolResults {
    ToolResults {
        tokens: a.tokens.saturating_add(b.tokens),
        uses: a.uses.saturating_add(b.uses),
    }
}

/// Decodes a field of blocks: an array is its elements; a plain string is one text block
/// (`system` and `content` only); null is none; anything else is one block of itself, except
/// for `tools`, where only an array counts (`arrays_only`). The blocks' JSON goes to `out`.
struct BlocksSeed<W> {
    arrays_only: bool,
    out: W,
}

impl<W> BlocksSeed<W> {
    fn new(arrays_only: bool, out: W) -> BlocksSeed<W> {
        BlocksSeed { arrays_only, out }
    }
}

impl<'de, W: Write> DeserializeSeed<'de> for BlocksSeed<W> {
    type Value = Blocks<W>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Blocks<W>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<W: Write> BlocksSeed<W> {
    /// A field that is one block of itself (or, for `tools`, none).
    fn single<E: de::Error>(self, block: impl FnOnce() -> Value) -> Result<Blocks<W>, E> {
        let mut blocks = Blocks::new(self.out);
        if !self.arrays_only {
            blocks.push(block()).map_err(E::custom)?;
        }
        Ok(blocks)
    }
}

impl<'de, W: Write> Visitor<'de> for BlocksSeed<W> {
    type Value = Blocks<W>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("content blocks")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Blocks<W>, A::Error> {
        let mut blocks = Blocks::new(self.out);
        while let Some(block) = seq.next_element::<Value>()? {
            blocks.push(block).map_err(de::Error::custom)?;
        }
        Ok(blocks)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Blocks<W>, E> {
        self.single(|| serde_json::json!({"type": "text", "text": text}))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Blocks<W>, A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.single(|| value)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Blocks<W>, E> {
        Ok(Blocks::new(self.out))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Blocks<W>, E> {
        self.single(|| Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Blocks<W>, E> {
        self.single(|| Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Blocks<W>, E> {
        self.single(|| Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Blocks<W>, E> {
        self.single(|| Value::from(v))
    }
}

/// The messages so far: each one's fingerprint and tool results, the blocks, the markers.
#[derive(Debug, Default)]
struct Messages {
    fingerprints: Vec<u64>,
    tool_results: Vec<ToolResults>,
    blocks: u32,
    boundary: bool,
    markers: Vec<Option<String>>,
}

struct MessagesSeed;

impl<'de> DeserializeSeed<'de> for MessagesSeed {
    type Value = Messages;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Messages, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for MessagesSeed {
    type Value = Messages;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
        let mut messages = Messages::default();
        while let Some(message) = seq.next_element::<Message>()? {
            let Message { role, content } = message;
            let content = content.unwrap_or_else(|| Blocks::new(content_hasher()));
            let role = role.unwrap_or_default();
            // `{"content":[…],"role":…}`: the whole-`Value` decoding's message, keys sorted;
            // the content was hashed as it was written, the role (known last) ends it.
            let mut json = content.out;
            json.update(b"],\"role\":");
            serde_json::to_writer(&mut json, &role).map_err(de::Error::custom)?;
            json.update(b"}");
            messages.fingerprints.push(json.finish());
            messages.blocks = messages.blocks.saturating_add(content.count);
            messages.boundary = role == "user" && content.tool_results.uses == 0;
            messages.tool_results.push(content.tool_results);
            messages.markers.extend(content.markers);
        }
        Ok(messages)
    }
}

/// One message: its role and its content's blocks.
struct Message {
    role: Option<String>,
    content: Option<Blocks<BytesHasher>>,
}

/// A hasher of a message's canonical JSON, given its opening: `content` is its first key.
fn content_hasher() -> BytesHasher {
    let mut hasher = BytesHasher::default();
    hasher.update(b"{\"content\":[");
    hasher
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut role: Option<Option<String>> = None;
        let mut content: Option<Blocks<BytesHasher>> = None;
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match key.as_str() {
                "role" => set_once::<_, A::Error>(&mut role, "role", map.next_value()?)?,
                "content" => {
                    let blocks = map.next_value_seed(BlocksSeed::new(false, content_hasher()))?;
                    set_once::<_, A::Error>(&mut content, "content", blocks)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Message {
            role: role.flatten(),
            content,
        })
    }
}

#[cfg(test)]
mod tests;
