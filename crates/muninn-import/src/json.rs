//! Small decoding helpers shared by the format readers: a string that borrows from the line when
//! it can, a block counter that walks a `content` field without allocating it, and an RFC 3339
//! timestamp parser.
//!
//! Why not `Option<Cow<str>>`: serde only borrows a `Cow` at the top level of a field, so inside an
//! `Option` it would allocate every string of every line. [`Str`] borrows unless the JSON string
//! holds escapes.

use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use std::borrow::Cow;
use std::fmt;

/// A JSON string, borrowed from the input when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Str<'a>(pub Cow<'a, str>);

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// What a message's `content` holds, counted without keeping it: a plain string is one text block,
/// an array is counted element by element.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ContentShape {
    /// Content blocks (array elements; 1 for a plain string).
    pub blocks: u32,
    /// How many of them are `tool_result` blocks.
    pub tool_results: u32,
    /// The tokens a tool-result clear would remove from those blocks: each block as the cache
    /// model counts it, less the same block holding the placeholder
    /// ([`muninn_core::mask::tool_result_tokens`], as the host counts what it sends).
    pub tool_result_tokens: muninn_core::money::Tokens,
    /// How many are `thinking` or `redacted_thinking` blocks (an answer's reasoning).
    pub thinking: u32,
    /// Whether a text block says the person interrupted the answer (Claude Code writes
    /// "[Request interrupted by user]", or "… for tool use").
    pub interrupt: bool,
    /// How many `tool_reference` blocks the tool results hold: each names a deferred tool
    /// whose definition the result loads (Claude Code's `ToolSearch`).
    pub tool_references: u32,
}

/// Whether a text block's `text` is Claude Code's interrupt marker, decided as the string is
/// read (nothing kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct InterruptMarker(bool);

impl<'de> Deserialize<'de> for InterruptMarker {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MarkerVisitor;
        impl<'de> Visitor<'de> for MarkerVisitor {
            type Value = InterruptMarker;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a block's text")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(InterruptMarker(
                    v.starts_with("[Request interrupted by user"),
                ))
            }
            // Anything else where a text belongs is no marker, and no reason to refuse the line.
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(InterruptMarker(false))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(InterruptMarker(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(InterruptMarker(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(InterruptMarker(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(InterruptMarker(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(InterruptMarker(false))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(InterruptMarker(false))
            }
        }
        deserializer.deserialize_any(MarkerVisitor)
    }
}

/// Where a value sits in a tool result's `content`: the content itself, an element of its array
/// (the level where `tool_reference` blocks sit), or deeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Content,
    Element,
    Inside,
}

/// One JSON value's canonical tokens and `tool_reference` blocks, read at `At` (see
/// [`ToolContent`]).
#[derive(Debug, Clone, Copy)]
struct Canonical(At);

impl<'de> DeserializeSeed<'de> for Canonical {
    type Value = ToolContent;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// A string, number or literal's canonical tokens: as the cache model counts the one-piece
/// `Value` (a string quoted and escaped, a number as JSON writes it).
fn scalar_tokens(v: impl Into<serde_json::Value>) -> muninn_core::money::Tokens {
    muninn_core::mask::canonical_tokens(&v.into())
}

/// The canonical tokens of an object whose values were counted: `{`, `}`, each key and a colon,
/// and a comma between entries.
fn object_tokens(
    entries: std::collections::BTreeMap<String, muninn_core::money::Tokens>,
) -> muninn_core::money::Tokens {
    let n = entries.len() as u64;
    let tokens = entries
        .into_iter()
        .fold(2, |sum: muninn_core::money::Tokens, (k, v)| {
            let key = muninn_core::mask::canonical_tokens(&serde_json::Value::String(k));
            sum.saturating_add(key).saturating_add(1).saturating_add(v)
        });
    tokens.saturating_add(n.saturating_sub(1))
}

impl<'de> Visitor<'de> for Canonical {
    type Value = ToolContent;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(ToolContent::scalar(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(ToolContent::scalar(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(ToolContent::scalar(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(ToolContent::scalar(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(ToolContent::scalar(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ToolContent::scalar(serde_json::Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // `[`, `]` and a comma between elements.
        let inner = Canonical(match self.0 {
            At::Content => At::Element,
            At::Element | At::Inside => At::Inside,
        });
        let (mut content, mut n) = (
            ToolContent {
                tokens: 2,
                references: 0,
            },
            0u64,
        );
        while let Some(element) = seq.next_element_seed(inner)? {
            content.tokens = content.tokens.saturating_add(element.tokens);
            content.references = content.references.saturating_add(element.references);
            n += 1;
        }
        content.tokens = content.tokens.saturating_add(n.saturating_sub(1));
        Ok(content)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // A key given twice keeps its last value, as a parsed `Value` does. Looked up in a map,
        // not a list: a line's object may hold any number of keys, and a search per key would
        // make one wide object quadratic. An element's `type` is read as a `Value` to see
        // whether it names a reference.
        let mut entries: std::collections::BTreeMap<String, muninn_core::money::Tokens> =
            std::collections::BTreeMap::new();
        let mut reference = false;
        while let Some(key) = map.next_key::<String>()? {
            let value = if self.0 == At::Element && key == "type" {
                let v: serde_json::Value = map.next_value()?;
                reference = v.as_str() == Some("tool_reference");
                muninn_core::mask::canonical_tokens(&v)
            } else {
                map.next_value_seed(Canonical(At::Inside))?.tokens
            };
            entries.insert(key, value);
        }
        Ok(ToolContent {
            tokens: object_tokens(entries),
            references: u32::from(reference),
        })
    }
}

impl<'de> Deserialize<'de> for ContentShape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

/// Reads a `content` field into a [`ContentShape`]: a string is one text block, an array is
/// counted block by block ([`ContentShape::count`]).
struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = ContentShape;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of content blocks")
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ContentShape {
            blocks: 1,
            ..ContentShape::default()
        })
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ContentShape::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut shape = ContentShape::default();
        while let Some(element) = seq.next_element::<BlockOrOther<'de>>()? {
            shape.count(element.0.as_ref());
        }
        Ok(shape)
    }
}

impl ContentShape {
    /// Counts one element of a content array: every element is a block; a block object's
    /// `type` says whether it is a tool result (whose content a clear would shrink) or thinking.
    fn count(&mut self, block: Option<&Block<'_>>) {
        self.blocks = self.blocks.saturating_add(1);
        let Some(b) = block else { return };
        match b.kind.as_ref().map(Str::as_str) {
            Some("tool_result") => {
                self.tool_results = self.tool_results.saturating_add(1);
                // What a clear removes: the content less the placeholder.
                let tokens = b
                    .content
                    .map_or(0, |c| muninn_core::mask::cleared_from(c.tokens));
                self.tool_result_tokens = self.tool_result_tokens.saturating_add(tokens);
                let references = b.content.map_or(0, |c| c.references);
                self.tool_references = self.tool_references.saturating_add(references);
            }
            Some("thinking" | "redacted_thinking") => {
                self.thinking = self.thinking.saturating_add(1);
            }
            Some("text") => {
                self.interrupt |= b.text.is_some_and(|t| t.0);
            }
            _ => {}
        }
    }
}

/// Only the `type` of a block is read, and a block's `content` (counted as it is read, kept
/// for a tool result), and whether a text block is the interrupt marker; the rest (other text,
/// tool inputs) is skipped unallocated.
#[derive(serde::Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    content: Option<ToolContent>,
    text: Option<InterruptMarker>,
}

/// A `tool_result` block's `content`: its tokens as the cache model counts them — its canonical
/// JSON ([`muninn_core::mask::canonical_tokens`]) — and how many of its elements are
/// `tool_reference` blocks (a deferred tool the result loads), counted as the parser reads it,
/// nothing kept. The tokenizer's count is additive over the pieces of a JSON text (every string
/// is quoted, every other piece bounded by punctuation), so the canonical form's count is the
/// sum over the pieces in any key order: each string quoted and escaped as JSON writes it, each
/// number and literal as written, one per bracket, brace, colon and comma. Every value is read
/// through `deserialize_any`, as a `Value` is, so the same input is refused (a number out of
/// range, a nesting too deep) — without building a `Value` per block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ToolContent {
    tokens: muninn_core::money::Tokens,
    references: u32,
}

impl ToolContent {
    /// A string, number or literal: its tokens ([`scalar_tokens`]), no reference.
    fn scalar(v: impl Into<serde_json::Value>) -> ToolContent {
        ToolContent {
            tokens: scalar_tokens(v),
            references: 0,
        }
    }
}

impl<'de> Deserialize<'de> for ToolContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Canonical(At::Content).deserialize(deserializer)
    }
}

/// An array element that is a block object, or anything else (counted, not inspected).
struct BlockOrOther<'a>(Option<Block<'a>>);

impl<'de> Deserialize<'de> for BlockOrOther<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ElementVisitor)
    }
}

/// Reads an array element: an object as a [`Block`], anything else skipped.
struct ElementVisitor;

impl<'de> Visitor<'de> for ElementVisitor {
    type Value = BlockOrOther<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content block")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Block::deserialize(de::value::MapAccessDeserializer::new(map))
            .map(|b| BlockOrOther(Some(b)))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(BlockOrOther(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(BlockOrOther(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(BlockOrOther(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(BlockOrOther(None))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(BlockOrOther(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(BlockOrOther(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(BlockOrOther(None))
    }
}

/// Parses an RFC 3339 timestamp (`2026-02-11T20:36:47.925Z`, `…+01:00`, fraction optional) into
/// Unix milliseconds. Sub-millisecond digits are truncated.
pub(crate) fn parse_timestamp_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        let mut n: i64 = 0;
        for &c in part {
            if !c.is_ascii_digit() {
                return None;
            }
            n = n * 10 + i64::from(c - b'0');
        }
        Some(n)
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    // The day is checked against its month (found by fuzzing against jiff: 30 February was
    // accepted and became 2 March).
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 3 {
                millis = millis * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_minutes = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (hours, minutes) = (digits(i + 1..i + 3)?, digits(i + 4..i + 6)?);
            // A real offset (`+99:99` was accepted before fuzzing found it).
            if hours > 23 || minutes > 59 {
                return None;
            }
            let minutes = hours * 60 + minutes;
            if sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    // A leap second (`:60`) is read as `:59`, as jiff does: it stays inside its minute, so the
    // lines of that minute keep their order.
    let second = second.min(59);
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + millis)
}

/// The days of `month` (1–12) in the proleptic Gregorian `year`.
fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_timestamp_ms("2026-02-11T20:36:47.925Z"),
            Some(1_770_842_207_925)
        );
        assert_eq!(
            parse_timestamp_ms("2026-02-11T21:36:47.925+01:00"),
            Some(1_770_842_207_925)
        );
        assert_eq!(
            parse_timestamp_ms("2026-02-11T20:36:47.925123Z"),
            Some(1_770_842_207_925)
        );
        assert_eq!(
            parse_timestamp_ms("2026-02-11T20:36:47.9Z"),
            Some(1_770_842_207_900)
        );
        assert_eq!(parse_timestamp_ms("2026-02-11T20:36:47"), None);
        assert_eq!(parse_timestamp_ms("yesterday"), None);
        assert_eq!(parse_timestamp_ms("2026-02-11T20:36:47.Z"), None);
    }

    #[test]
    fn content_shapes() {
        let shape: ContentShape = serde_json::from_str(r#""hello""#).unwrap();
        assert_eq!(
            shape,
            ContentShape {
                blocks: 1,
                tool_results: 0,
                tool_result_tokens: 0,
                thinking: 0,
                interrupt: false,
                tool_references: 0,
            }
        );
        let shape: ContentShape = serde_json::from_str(
            r#"[{"type":"tool_result","content":[{"type":"text","text":"x"}]},{"type":"text","text":"y"},{"type":"thinking","thinking":"z"},{"type":"redacted_thinking","data":"w"},3]"#,
        )
        .unwrap();
        assert_eq!(
            shape,
            ContentShape {
                blocks: 5,
                tool_results: 1,
                // `[{"text":"x","type":"text"}]` is 19 tokens, the placeholder string 9.
                tool_result_tokens: 10,
                thinking: 2,
                interrupt: false,
                tool_references: 0,
            }
        );
        // Claude Code's interrupt marker, in either wording; a text that is not a string is no
        // marker and does not spoil the line.
        for marker in [
            "[Request interrupted by user]",
            "[Request interrupted by user for tool use]",
        ] {
            let line =
                format!(r#"[{{"type":"text","text":"{marker}"}},{{"type":"text","text":5}}]"#);
            let shape: ContentShape = serde_json::from_str(&line).unwrap();
            assert_eq!((shape.blocks, shape.interrupt), (2, true));
        }
        let shape: ContentShape = serde_json::from_str(
            r#"[{"type":"text","text":{"a":["[Request interrupted by user]"]}}]"#,
        )
        .unwrap();
        assert_eq!((shape.blocks, shape.interrupt), (1, false));
    }

    /// Counting a tool result's content as the parser reads it gives the canonical tokens of
    /// the parsed `serde_json::Value` (`mask::canonical_tokens`, what the host counts), and
    /// refuses what parsing a `Value` refuses.
    #[test]
    fn tool_content_counts_as_a_parsed_value_does() {
        use muninn_core::tokenize::count;
        use serde_json::Value;
        fn by_value(content: &Value) -> muninn_core::money::Tokens {
            muninn_core::mask::canonical_tokens(content)
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let cases = [
            r#""hello, world: fn main() {}""#,
            r#""esc\"aped \u00e9 \n lines""#,
            r#"[{"type":"text","text":"a b c"},{"type":"image","source":{"data":"QUJD"}},"plain",3,-1,2.5,null,true,[["nested text"]],{"text":5},{"text":"first","text":"the last one wins"},{"text":{"text":"inner"}},{"te\u0078t":"escaped key"},{"text":["in an array"]}]"#,
            r#"{"text":"an object content counts nothing"}"#,
            "12",
            "null",
            "[]",
            "[1e400]",
            r#"{"a":[1e400]}"#,
            r#"[{"text":"x","big":1e400}]"#,
            r#""\ud800""#,
            r#"["\ud83d\ude00 emoji"]"#,
            r#"[{"type":"tool_reference","tool_name":"TaskList"},{"tool_name":"X","type":"tool_reference","type":"text"}]"#,
            &deep,
        ];
        for case in cases {
            let ours = serde_json::from_str::<ToolContent>(case).map(|t| t.tokens);
            let theirs = serde_json::from_str::<Value>(case).map(|v| by_value(&v));
            assert_eq!(ours.as_ref().ok(), theirs.as_ref().ok(), "{case}");
        }
        // A string counts its quotes and escapes: `"` `hell|o` `,` `"`.
        assert_eq!(
            serde_json::from_str::<ToolContent>(r#""hello,""#)
                .unwrap()
                .tokens,
            count("\"hello,\"")
        );
        assert_eq!(count("\"hello,\""), 5);
    }

    /// Fuzzed (`muninn_testkit::fuzz`, seeds in `fuzz/corpus/import-timestamps/`) against
    /// `jiff`: every line this parser accepts, `jiff` parses to the same millisecond (floored).
    /// The parser stays hand-written for speed (it runs once per transcript line), so this is
    /// what keeps it honest; it found 31 February and a `+99:99` offset accepted.
    #[test]
    fn timestamps_agree_with_jiff() {
        use muninn_testkit::fuzz::{FuzzConfig, Verdict, corpus_dir, fuzz, load_corpus};
        let seeds = load_corpus(&corpus_dir("import-timestamps"));
        let report = fuzz(
            "import-timestamps",
            &seeds,
            &[
                b"-02-29T", b"-02-30T", b"-04-31T", b"+23:59", b"+99:99", b":60Z", b".", b"Z",
            ],
            &FuzzConfig::from_env(4 * 1024),
            |input| {
                let mut accepted = false;
                for line in String::from_utf8_lossy(input).lines() {
                    let Some(ours) = parse_timestamp_ms(line) else {
                        continue;
                    };
                    let fraction = line
                        .get(20..)
                        .map_or(0, |f| f.bytes().take_while(u8::is_ascii_digit).count());
                    if line.starts_with("9999-") || fraction > 9 {
                        // Where jiff is narrower than RFC 3339: its timestamps end a day early
                        // (room for any offset), and it reads at most 9 fraction digits.
                        continue;
                    }
                    let theirs = line
                        .parse::<jiff::Timestamp>()
                        .map(|t| t.as_nanosecond().div_euclid(1_000_000));
                    if theirs.as_ref().ok() != Some(&i128::from(ours)) {
                        return Err(format!("{line:?}: ours {ours}, jiff {theirs:?}"));
                    }
                    accepted = true;
                }
                Ok(if accepted {
                    Verdict::Accepted
                } else {
                    Verdict::Refused
                })
            },
        );
        assert!(report.accepted > 0, "{report}");
    }
}
