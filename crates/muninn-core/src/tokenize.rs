//! A documented, deterministic tokenizer shared by the cache model's users: the renderer counts
//! the blocks it renders with it, and the simulator (`muninn sim-api`) reports usage with it, so
//! that the usage a simulated provider reports is exactly what the cache model predicts.
//!
//! It is not Claude's tokenizer (which is not public); it is a stable approximation with the same
//! order of magnitude on English text and JSON (about four characters per token):
//!
//! - a run of ASCII letters or digits of length `n` counts `ceil(n / 4)` tokens;
//! - every other non-whitespace character (punctuation, symbols, any non-ASCII character) counts
//!   one token;
//! - whitespace counts nothing;
//! - the empty string counts zero.
//!
//! The function is pure and O(n); `count("Hello, world!")` is 6 (`Hell|o` `,` `worl|d` `!`).

use crate::money::Tokens;

/// Tokens in `text` under the rules in the module documentation.
pub fn count(text: &str) -> Tokens {
    let mut tokens: Tokens = 0;
    let mut run: Tokens = 0;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            run += 1;
            continue;
        }
        tokens += run.div_ceil(4);
        run = 0;
        if !c.is_whitespace() {
            tokens += 1;
        }
    }
    tokens + run.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_follow_the_documented_rules() {
        assert_eq!(count(""), 0);
        assert_eq!(count("   \n\t"), 0);
        assert_eq!(count("a"), 1);
        assert_eq!(count("abcd"), 1);
        assert_eq!(count("abcde"), 2);
        assert_eq!(count("Hello, world!"), 6);
        assert_eq!(count("{\"say\":[]}"), 8);
        assert_eq!(count("héllo"), 3);
    }

    #[test]
    fn concatenation_at_a_space_adds_up() {
        let a = "the quick brown fox";
        let b = "jumps over the lazy dog";
        assert_eq!(count(&format!("{a} {b}")), count(a) + count(b));
    }
}
