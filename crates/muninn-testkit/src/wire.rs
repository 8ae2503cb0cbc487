//! Reading the Messages API requests a simulator recorded, as the tests of several crates do.

use serde_json::Value;

/// The last user message of a Messages API request body, as JSON text (empty when the body has
/// none): tests find "the request that carried X" by what the last user turn contains, tool
/// results and system reminders included, so the whole message is searched, not only its text.
pub fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(Value::to_string)
        .unwrap_or_default()
}
