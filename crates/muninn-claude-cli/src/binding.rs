//! Session bindings: the proof that a CLI session still holds the conversation the caller has.
//!
//! The CLI keeps its own copy of a conversation (its transcript file). muninn's transcript is the
//! truth and the CLI session only a cache of it, so a session may be resumed only while the two
//! agree. After a turn, the caller mints a [`Handle`]: an HMAC-SHA256, under a key only muninn
//! holds, over the session id, the instructions (system prompt), the model, the tools and every
//! transcript item up to that point. Before resuming, the backend recomputes the MAC over what
//! the caller has *now*; a mismatch — an item edited or dropped, the instructions or model
//! changed — means the CLI's copy diverged, and a fresh session is seeded instead (seed A5: the
//! connector's `Binding` does the same).
//!
//! Encoding: a domain tag, then every field length-prefixed (u64 little-endian) and every list
//! count-prefixed, so no two different inputs produce the same byte stream (`["ab"]` vs
//! `["a","b"]`, or text moving between the instructions and an item).

use hmac::{KeyInit, Mac};
use muninn_backend::ToolSpec;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Changes when the encoding changes, so old handles stop verifying instead of being misread.
const DOMAIN: &[u8] = b"muninn-claude-cli/session-binding/v1";

/// Why a [`BindingKey`] could not be made (returned by [`BindingKey::new`]; not retryable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The key was shorter than [`BindingKey::MIN_LEN`] bytes.
    #[error("a session binding key needs at least {min} bytes, got {got}")]
    KeyTooShort {
        /// The required length.
        min: usize,
        /// The given length.
        got: usize,
    },
    /// A stored handle was not `<session id>#<64 hex digits>`.
    #[error("a session handle must be <session id>#<64 hex digits>")]
    MalformedHandle,
}

/// The MAC key, already keyed into HMAC state (so minting cannot fail later). Never printed.
#[derive(Clone)]
pub struct BindingKey(HmacSha256);

impl BindingKey {
    /// The shortest key accepted: HMAC-SHA256's output size, below which the key is the weak
    /// point.
    pub const MIN_LEN: usize = 32;

    /// A key from raw bytes (at least [`BindingKey::MIN_LEN`]).
    pub fn new(bytes: &[u8]) -> Result<BindingKey, BindingError> {
        let too_short = BindingError::KeyTooShort {
            min: Self::MIN_LEN,
            got: bytes.len(),
        };
        if bytes.len() < Self::MIN_LEN {
            return Err(too_short);
        }
        // HMAC accepts keys of any length; the error arm is for the trait's sake.
        HmacSha256::new_from_slice(bytes)
            .map(BindingKey)
            .map_err(|_| too_short)
    }
}

impl std::fmt::Debug for BindingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BindingKey(<redacted>)")
    }
}

/// A minted binding: which session, and the MAC over everything before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    /// The CLI session the handle resumes.
    pub session_id: String,
    /// HMAC-SHA256 over the binding's fields.
    pub tag: [u8; 32],
}

impl Handle {
    /// The tag as lowercase hex (for storing beside the transcript).
    pub fn tag_hex(&self) -> String {
        self.tag.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The handle as one line of text, `<session id>#<tag hex>`, for storing beside the
    /// transcript (a segment's `session_id`). The tag is not a secret: it proves nothing without
    /// the key.
    pub fn encode(&self) -> String {
        format!("{}#{}", self.session_id, self.tag_hex())
    }

    /// Reads what [`Handle::encode`] wrote.
    pub fn decode(text: &str) -> Result<Handle, BindingError> {
        let (session_id, hex) = text.rsplit_once('#').ok_or(BindingError::MalformedHandle)?;
        if session_id.is_empty() || hex.len() != 64 || !hex.is_ascii() {
            return Err(BindingError::MalformedHandle);
        }
        let mut tag = [0u8; 32];
        for (i, byte) in tag.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| BindingError::MalformedHandle)?;
        }
        Ok(Handle {
            session_id: session_id.to_string(),
            tag,
        })
    }
}

/// What a handle binds: everything the CLI session's content depends on.
#[derive(Debug, Clone, Copy)]
pub struct SessionBinding<'a> {
    /// The CLI session id.
    pub session_id: &'a str,
    /// The system prompt, exactly as the CLI receives it.
    pub instructions: &'a str,
    /// The model id (empty: the CLI's default).
    pub model: &'a str,
    /// The tools offered.
    pub tools: &'a [ToolSpec],
}

impl SessionBinding<'_> {
    /// Mints the handle over this binding and `items` (the caller's transcript items, each in
    /// the caller's own canonical bytes, in order).
    pub fn mint<I, B>(&self, key: &BindingKey, items: I) -> Handle
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let mac = self.mac(key, items);
        Handle {
            session_id: self.session_id.to_string(),
            tag: mac.finalize().into_bytes().into(),
        }
    }

    /// Whether `handle` was minted by `key` over exactly this binding and `items`. The
    /// comparison is constant-time.
    pub fn verify<I, B>(&self, key: &BindingKey, handle: &Handle, items: I) -> bool
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        handle.session_id == self.session_id
            && self.mac(key, items).verify_slice(&handle.tag).is_ok()
    }

    fn mac<I, B>(&self, key: &BindingKey, items: I) -> HmacSha256
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let mut mac = key.0.clone();
        let mut field = |bytes: &[u8]| {
            mac.update(&(bytes.len() as u64).to_le_bytes());
            mac.update(bytes);
        };
        field(DOMAIN);
        field(self.session_id.as_bytes());
        field(self.instructions.as_bytes());
        field(self.model.as_bytes());
        field(&(self.tools.len() as u64).to_le_bytes());
        for tool in self.tools {
            // A `ToolSpec` is plain strings and a JSON value; serialisation cannot fail, and an
            // empty encoding would only make the handle not verify.
            field(&serde_json::to_vec(tool).unwrap_or_default());
        }
        let mut count = 0u64;
        for item in items {
            field(item.as_ref());
            count += 1;
        }
        // The count goes last (the items are streamed), still unambiguous with lengths.
        field(&count.to_le_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding<'a>(instructions: &'a str, tools: &'a [ToolSpec]) -> SessionBinding<'a> {
        SessionBinding {
            session_id: "6a1f0c2a-5b4d-4e6f-8a9b-0c1d2e3f4a51",
            instructions,
            model: "claude-sonnet-4-5",
            tools,
        }
    }

    #[test]
    fn a_handle_verifies_over_the_same_binding_only() {
        let key = BindingKey::new(b"0123456789abcdef0123456789abcdef").unwrap();
        let items = ["user: hello", "assistant: hi"];
        let b = binding("doctrine", &[]);
        let h = b.mint(&key, items);
        assert!(b.verify(&key, &h, items));
        // An item changed, dropped, split, or added.
        assert!(!b.verify(&key, &h, ["user: hello", "assistant: hi!"]));
        assert!(!b.verify(&key, &h, ["user: hello"]));
        assert!(!b.verify(&key, &h, ["user: hel", "lo", "assistant: hi"]));
        assert!(!b.verify(&key, &h, ["user: hello", "assistant: hi", ""]));
        // The instructions, model, session, tools or key changed.
        assert!(!binding("doctrine.", &[]).verify(&key, &h, items));
        assert!(
            !SessionBinding {
                model: "claude-opus-4-1",
                ..b
            }
            .verify(&key, &h, items)
        );
        assert!(
            !SessionBinding {
                session_id: "other",
                ..b
            }
            .verify(&key, &h, items)
        );
        let tools = [ToolSpec {
            name: "t".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        }];
        assert!(!binding("doctrine", &tools).verify(&key, &h, items));
        let other = BindingKey::new(b"0123456789abcdef0123456789abcdeF").unwrap();
        assert!(!b.verify(&other, &h, items));
        assert!(BindingKey::new(b"short").is_err());
        // Text moved from the instructions into an item does not collide.
        assert_ne!(
            binding("ab", &[]).mint(&key, ["c"]).tag,
            binding("a", &[]).mint(&key, ["bc"]).tag
        );
        assert_eq!(h.tag_hex().len(), 64);
        assert_eq!(Handle::decode(&h.encode()), Ok(h.clone()));
        for bad in ["", "#", "abc", "s#12", &format!("#{}", h.tag_hex())] {
            assert_eq!(
                Handle::decode(bad),
                Err(BindingError::MalformedHandle),
                "{bad}"
            );
        }
        assert!(Handle::decode(&format!("s#{}", "zz".repeat(32))).is_err());
        assert!(!format!("{key:?}").contains("0123"));
    }
}
