//! # muninn-api
//!
//! The HTTP API of `muninn serve` as a library for its clients: what goes over the wire, the
//! bearer token, and a typed client. The server (`muninn_host::http`) serves these types; the
//! CLI's operator commands (`muninn say`, `tail`, `status`, `ledger`, `brake`, `caps`) and the
//! tests call it through [`ApiClient`] without linking anything of the server.
//!
//! ## Layout
//!
//! - [`wire`] — every request body, query and response of `/v1`, and the error body.
//! - [`token`] — [`ApiToken`]: created by the host in `<data_dir>/api-token`, read by clients.
//! - [`client`] — [`ApiClient`]: plain HTTP with the bearer token, API errors as
//!   [`ClientError::Api`].
//! - [`discovery`] — [`discovery::HostFile`]: where a running host listens, written by `muninn
//!   serve` in the user's state directory so clients find it from any directory.
//! - `openapi.json` (beside `Cargo.toml`) — the API as an OpenAPI 3.1 document, checked against
//!   the server's routes by the host's tests.
//!
//! ## Invariants
//!
//! - Depends on nothing of the server: no axum, no store, no runtime, no configuration. The
//!   records the API shows as they are come from [`muninn_core::records`], the ledger row from
//!   [`muninn_core::ledger`].
//! - The token appears in no `Debug`, error or log line.
//! - Inputs are strict (`deny_unknown_fields`); money is integer micro-dollars, times Unix ms.

pub mod client;
pub mod discovery;
pub mod limits;
#[cfg(test)]
mod test_files;
pub mod token;
pub mod wire;

pub use client::{ApiClient, ClientError};
pub use token::{ApiToken, TokenError};
