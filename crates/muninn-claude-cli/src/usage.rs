//! The CLI's usage figures parsed into [`Usage`]: a `result` line's per-turn `usage`, and its
//! `model_usage_since_last_result` (which includes compaction requests).

use muninn_core::trace::Usage;
use serde_json::Value;

/// Parses a `result` line's `usage` into [`Usage`]. Without a 5m/1h split, all writes are put
/// under the TTL the session asked for.
pub fn parse_usage(raw: &Value, requested_1h: bool) -> Usage {
    let n = |k: &str| raw.get(k).and_then(Value::as_u64).unwrap_or(0);
    let split = |k: &str| {
        raw.get("cache_creation")
            .and_then(|c| c.get(k))
            .and_then(Value::as_u64)
    };
    let written = n("cache_creation_input_tokens");
    let (w5, w1) = match (
        split("ephemeral_5m_input_tokens"),
        split("ephemeral_1h_input_tokens"),
    ) {
        (Some(a), Some(b)) => (a, b),
        _ if requested_1h => (0, written),
        _ => (written, 0),
    };
    Usage {
        input: n("input_tokens"),
        cache_write_5m: w5,
        cache_write_1h: w1,
        cache_read: n("cache_read_input_tokens"),
        output: n("output_tokens"),
    }
}

/// Parses a `result` line's `model_usage_since_last_result` (per model, camelCase, including
/// compaction requests) into one [`Usage`], summed over models. Without a 5m/1h split, all
/// writes are put under the TTL the session asked for.
pub fn parse_model_usage(raw: &Value, requested_1h: bool) -> Usage {
    let mut total = Usage::default();
    let Some(models) = raw.as_object() else {
        return total;
    };
    for m in models.values() {
        let n = |k: &str| m.get(k).and_then(Value::as_u64);
        let written = n("cacheCreationInputTokens").unwrap_or(0);
        let (w5, w1) = match (
            n("cacheCreationEphemeral5mInputTokens"),
            n("cacheCreationEphemeral1hInputTokens"),
        ) {
            (Some(a), Some(b)) => (a, b),
            _ if requested_1h => (0, written),
            _ => (written, 0),
        };
        // Saturating (`Usage::add`): the numbers are the CLI's, any u64.
        total.add(&Usage {
            input: n("inputTokens").unwrap_or(0),
            cache_write_5m: w5,
            cache_write_1h: w1,
            cache_read: n("cacheReadInputTokens").unwrap_or(0),
            output: n("outputTokens").unwrap_or(0),
        });
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_parses_with_and_without_a_split() {
        let raw = json!({"input_tokens":5,"cache_creation_input_tokens":211,"cache_read_input_tokens":2022,
            "output_tokens":22,"cache_creation":{"ephemeral_1h_input_tokens":14,"ephemeral_5m_input_tokens":197}});
        assert_eq!(
            parse_usage(&raw, false),
            Usage {
                input: 5,
                cache_write_5m: 197,
                cache_write_1h: 14,
                cache_read: 2022,
                output: 22
            }
        );
        let bare = json!({"input_tokens":1,"cache_creation_input_tokens":10,"output_tokens":2});
        assert_eq!(parse_usage(&bare, true).cache_write_1h, 10);
    }

    #[test]
    fn model_usage_sums_models_and_splits_writes() {
        let raw = json!({
            "claude-opus-5-5": {"inputTokens":7,"outputTokens":24,"cacheReadInputTokens":4022,
                "cacheCreationInputTokens":411,"cacheCreationEphemeral5mInputTokens":383,
                "cacheCreationEphemeral1hInputTokens":28,"costUSD":0.0034514},
            "claude-haiku-4-5": {"inputTokens":1,"outputTokens":2,"cacheReadInputTokens":0,
                "cacheCreationInputTokens":10}
        });
        assert_eq!(
            parse_model_usage(&raw, false),
            Usage {
                input: 8,
                cache_write_5m: 393,
                cache_write_1h: 28,
                cache_read: 4022,
                output: 26
            }
        );
        assert_eq!(parse_model_usage(&json!({}), false), Usage::default());
    }
}
