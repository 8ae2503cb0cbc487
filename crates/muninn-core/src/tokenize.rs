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
    let mut counter = Counter::default();
    counter.add(text);
    counter.total()
}

/// [`count`] of a text given a piece at a time (a run of letters and digits may span pieces):
/// the count of the pieces joined, without joining them (`mask::canonical_tokens` counts a
/// block's canonical JSON as it is written, however large the block).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counter {
    tokens: Tokens,
    /// Letters and digits since the last other character.
    run: Tokens,
}

impl Counter {
    /// Counts `text` after what was given so far.
    pub fn add(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_ascii_alphanumeric() {
                self.run += 1;
                continue;
            }
            self.tokens += self.run.div_ceil(4);
            self.run = 0;
            if !c.is_whitespace() {
                self.tokens += 1;
            }
        }
    }

    /// The tokens of all that was given.
    pub fn total(&self) -> Tokens {
        self.tokens + self.run.div_ceil(4)
    }
}

impl std::fmt::Write for Counter {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.add(text);
        Ok(())
    }
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

    proptest::proptest! {
        /// A text given in pieces, cut anywhere (inside a run of letters too), counts as the
        /// text whole.
        #[test]
        fn a_counter_fed_in_pieces_counts_the_whole(text in "[a-z0-9 é{}\\\",:]{0,40}", cuts in proptest::collection::vec(0usize..41, 0..4)) {
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&i| text.is_char_boundary(i.min(text.len()))).map(|i| i.min(text.len())).collect();
            bounds.sort_unstable();
            let mut counter = super::Counter::default();
            let mut from = 0;
            for to in bounds.into_iter().chain([text.len()]) {
                counter.add(&text[from..to]);
                from = to;
            }
            proptest::prop_assert_eq!(counter.total(), count(&text));
        }
    }
}
