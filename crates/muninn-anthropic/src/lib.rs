//! # muninn-anthropic
//!
//! The Anthropic Messages API for muninn, from the wire up.
//!
//! ## Layout
//!
//! - [`wire`] — request, response, stream-event, usage and error types, forward-compatible.
//! - [`sse`] — an incremental SSE decoder (any chunk boundaries) and encoder.
//! - [`context`] — the provider's context edits (tool-result clearing) applied as the provider
//!   applies them, shared by the simulator and the backend's predictions.
//! - [`prompt`] — the one mapping from a request body to the cache model's checkpoints, shared
//!   by the simulator and by the client's predictions.
//! - [`secret`] — [`secret::ApiKey`], redacted everywhere.
//! - [`client`] — [`client::AnthropicClient`]: HTTPS (rustls + ring), SSE assembly, retries that
//!   wait on an injected [`muninn_backend::clock::Sleeper`] ([`client::TokioSleeper`] outside tests).
//! - [`backend`] — [`backend::AnthropicBackend`], the [`muninn_backend::Backend`] over the client.
//!
//! ## Invariants
//!
//! - The key is sent in one header and appears in no `Debug`, `Display`, error or log line.
//! - Usage is kept parsed and raw; `message_delta` usage overrides `message_start`'s.
//! - Nothing is re-sent after reply content began unless the turn is safe to repeat.

pub mod backend;
pub mod client;
pub mod context;
pub mod prompt;
pub mod secret;
pub mod sse;
pub mod wire;
