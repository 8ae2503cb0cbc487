//! The price table: a TOML data file the user can edit, loaded and validated once at start.
//!
//! The default table is embedded ([`PriceTable::embedded`]); `--prices <file>` replaces it. Every
//! rate is resolved to integer micro-dollars per million tokens at load, so pricing a request is
//! integer arithmetic. Looking up a model that the table does not know is an error that names the
//! model ([`PriceError::UnknownModel`]): an unknown model is never priced at zero.

use crate::money::{MicroUsd, Rate, Tokens};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// The embedded default price table (`crates/muninn-core/prices.toml`).
pub const EMBEDDED_PRICES: &str = include_str!("../prices.toml");

/// Errors from loading a price table or looking a model up in it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PriceError {
    /// The file is not valid TOML or does not have the expected shape. Not retryable: fix the file.
    #[error("price table {source_name}: {message}")]
    Parse {
        /// Where the table came from (a path, or `embedded`).
        source_name: String,
        /// What the TOML parser said.
        message: String,
    },
    /// A value is out of range (a negative or non-finite price, a zero window, a duplicate model).
    #[error("price table {source_name}: model {model}: {message}")]
    Invalid {
        /// Where the table came from.
        source_name: String,
        /// The model entry at fault.
        model: String,
        /// What is wrong with it.
        message: String,
    },
    /// No entry matches this model. Add it to the price table (see `--prices`).
    #[error(
        "unknown model {model:?}: it is not in the price table; add a [[model]] entry for it (see --prices)"
    )]
    UnknownModel {
        /// The model name as it appeared in the request or trace.
        model: String,
    },
}

/// The highest price a table may give, in dollars per million tokens: thousands of times any
/// model's. Rates are `u64` micro-dollars per million tokens and the write rates are the input's
/// times a multiplier: past these, `--prices` resolved a write rate that wrapped below the input's
/// and costs that saturated at `i64::MAX` micro-dollars, printed as figures; refused instead.
pub const MAX_USD_PER_MTOK: f64 = 1_000_000.0;

/// The highest read or write multiplier (of the input price) a table may give.
pub const MAX_MULTIPLIER: f64 = 1_000.0;

/// The longest `retention_s` a table may give: ten years. Past `i64::MAX` seconds it was cast to
/// a negative retention and the optimum's expiry arithmetic panicked on overflow; refused instead.
pub const MAX_RETENTION_S: u64 = 315_360_000;

/// Whose prompt cache a model sits behind: each provider caches differently, and muninn has one
/// cache model per provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Anthropic: explicit breakpoints (at most 4), TTL 5m refreshed on a hit or 1h, writes at a
    /// premium (1.25× / 2×), reads at 0.1× or less ([`crate::cache`]).
    #[default]
    Anthropic,
    /// OpenAI: automatic prefix caching of every prompt of at least `min_cacheable` tokens, in
    /// `cache_step`-token steps, no breakpoints and no TTL to choose, best-effort retention
    /// (`retention_s` of inactivity), a read discount per model and a write premium only where
    /// the model bills one ([`crate::validate`]'s OpenAI predictor; the replay engine prices it
    /// with one breakpoint at the cached extent and no keep-warm pings).
    #[serde(rename = "openai")]
    OpenAi,
}

impl Provider {
    /// `anthropic` or `openai`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    /// What a session on this provider's cache can do besides answering turns: OpenAI offers no
    /// TTL to extend, so no keep-warm pings (a request that only keeps a best-effort cache warm
    /// buys nothing the provider promises), and no tool-result clearing (the `mask` action is
    /// Anthropic's `clear_tool_uses_20250919` edit).
    pub const fn capabilities(self) -> crate::decide::Capabilities {
        match self {
            Provider::Anthropic => crate::decide::Capabilities {
                ping: true,
                ping_head: true,
                idle_flush: true,
                mask: true,
            },
            Provider::OpenAi => crate::decide::Capabilities {
                ping: false,
                ping_head: false,
                idle_flush: true,
                mask: false,
            },
        }
    }
}

/// One model's resolved prices and cache parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelPrice {
    /// The table's canonical name for the model.
    pub name: String,
    /// Uncached input, per million tokens.
    pub input: Rate,
    /// Output, per million tokens.
    pub output: Rate,
    /// Cache read, per million tokens.
    pub read: Rate,
    /// 5-minute cache write, per million tokens.
    pub write_5m: Rate,
    /// 1-hour cache write, per million tokens.
    pub write_1h: Rate,
    /// The smallest prefix the provider will cache, in tokens.
    pub min_cacheable: Tokens,
    /// The model's context window, in tokens.
    pub context_window: Tokens,
    /// Whose cache the model sits behind.
    pub provider: Provider,
    /// The granularity of cached prefixes, in tokens (OpenAI: 128; Anthropic: 1, a breakpoint
    /// caches exactly its prefix).
    pub cache_step: Tokens,
    /// How long an unused prefix stays cached where the provider sets no TTL (OpenAI's
    /// best-effort retention), in milliseconds; 0 where the request's TTL decides (Anthropic).
    pub retention_ms: i64,
}

impl ModelPrice {
    /// The part of a `prompt`-token prompt the provider's automatic cache can hold: rounded
    /// down to the cache step, nothing below the minimum cacheable size.
    pub fn cacheable(&self, prompt: Tokens) -> Tokens {
        if prompt < self.min_cacheable {
            return 0;
        }
        let step = self.cache_step.max(1);
        prompt / step * step
    }
    /// The cost of a request's usage under these prices.
    pub fn cost(&self, usage: &crate::trace::Usage) -> MicroUsd {
        MicroUsd::of(usage.input, self.input)
            + MicroUsd::of(usage.cache_write_5m, self.write_5m)
            + MicroUsd::of(usage.cache_write_1h, self.write_1h)
            + MicroUsd::of(usage.cache_read, self.read)
            + MicroUsd::of(usage.output, self.output)
    }

    /// The write rate for a TTL tier.
    pub fn write(&self, ttl: crate::cache::Ttl) -> Rate {
        match ttl {
            crate::cache::Ttl::FiveMinutes => self.write_5m,
            crate::cache::Ttl::OneHour => self.write_1h,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    model: Vec<ModelEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    #[serde(default = "default_read")]
    read: f64,
    #[serde(default = "default_write_5m")]
    write_5m: f64,
    #[serde(default = "default_write_1h")]
    write_1h: f64,
    #[serde(default = "default_min_cacheable")]
    min_cacheable: u64,
    #[serde(default = "default_window")]
    context_window: u64,
    #[serde(default)]
    provider: Provider,
    #[serde(default = "default_cache_step")]
    cache_step: u64,
    #[serde(default)]
    retention_s: u64,
}

fn default_cache_step() -> u64 {
    1
}

fn default_read() -> f64 {
    0.1
}
fn default_write_5m() -> f64 {
    1.25
}
fn default_write_1h() -> f64 {
    2.0
}
fn default_min_cacheable() -> u64 {
    1024
}
fn default_window() -> u64 {
    200_000
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            read: default_read(),
            write_5m: default_write_5m(),
            write_1h: default_write_1h(),
            min_cacheable: default_min_cacheable(),
            context_window: default_window(),
            provider: Provider::default(),
            cache_step: default_cache_step(),
            retention_s: 0,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    name: String,
    #[serde(default, rename = "match")]
    matches: Vec<String>,
    input: f64,
    output: f64,
    read: Option<f64>,
    write_5m: Option<f64>,
    write_1h: Option<f64>,
    min_cacheable: Option<u64>,
    context_window: Option<u64>,
    provider: Option<Provider>,
    cache_step: Option<u64>,
    retention_s: Option<u64>,
}

impl ModelEntry {
    /// The entry's prices, each field it leaves out taken from `d`; why not, if a value is out
    /// of range.
    fn price(&self, d: &Defaults) -> Result<ModelPrice, String> {
        let read = self.read.unwrap_or(d.read);
        let write_5m = self.write_5m.unwrap_or(d.write_5m);
        let write_1h = self.write_1h.unwrap_or(d.write_1h);
        for (what, v, max) in [
            ("input", self.input, MAX_USD_PER_MTOK),
            ("output", self.output, MAX_USD_PER_MTOK),
            ("read", read, MAX_MULTIPLIER),
            ("write_5m", write_5m, MAX_MULTIPLIER),
            ("write_1h", write_1h, MAX_MULTIPLIER),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{what} must be a finite, non-negative number"));
            }
            if v > max {
                return Err(format!("{what} of {v} is past the limit of {max}"));
            }
        }
        if self.input == 0.0 {
            return Err(
                "input price is zero; a free model must still be priced explicitly above zero"
                    .to_string(),
            );
        }
        let window = self.context_window.unwrap_or(d.context_window);
        if window == 0 {
            return Err("context_window must be positive".to_string());
        }
        let provider = self.provider.unwrap_or(d.provider);
        let cache_step = self.cache_step.unwrap_or(d.cache_step);
        if cache_step == 0 {
            return Err("cache_step must be positive".to_string());
        }
        let retention_s = self.retention_s.unwrap_or(d.retention_s);
        if retention_s > MAX_RETENTION_S {
            return Err(format!(
                "retention_s of {retention_s} is past the limit of {MAX_RETENTION_S} (ten years)"
            ));
        }
        if provider == Provider::OpenAi && retention_s == 0 {
            return Err(
                "an openai model needs retention_s: its cache has no TTL to take it from"
                    .to_string(),
            );
        }
        let input = Rate::from_usd_per_mtok(self.input);
        let ppm = |m: f64| (m * 1_000_000.0).round() as u64;
        Ok(ModelPrice {
            name: self.name.clone(),
            input,
            output: Rate::from_usd_per_mtok(self.output),
            read: input.scaled_ppm(ppm(read)),
            write_5m: input.scaled_ppm(ppm(write_5m)),
            write_1h: input.scaled_ppm(ppm(write_1h)),
            min_cacheable: self.min_cacheable.unwrap_or(d.min_cacheable),
            context_window: window,
            provider,
            cache_step,
            // In range: bounded above, so neither the cast nor the product wraps.
            retention_ms: retention_s as i64 * 1000,
        })
    }
}

/// A validated price table. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct PriceTable {
    models: Arc<Vec<ModelPrice>>,
    exact: Arc<HashMap<String, usize>>,
    /// `(prefix, index)`, longest prefix first.
    prefixes: Arc<Vec<(String, usize)>>,
}

impl PriceTable {
    /// The embedded default table.
    pub fn embedded() -> PriceTable {
        // The embedded table is checked by a unit test, so this cannot fail in a released build;
        // an empty table is the fallback rather than a panic.
        PriceTable::parse(EMBEDDED_PRICES, "embedded").unwrap_or_else(|_| PriceTable {
            models: Arc::new(Vec::new()),
            exact: Arc::new(HashMap::new()),
            prefixes: Arc::new(Vec::new()),
        })
    }

    /// Parses and validates a table. `source_name` is used in error messages.
    pub fn parse(text: &str, source_name: &str) -> Result<PriceTable, PriceError> {
        let file: PriceFile = toml::from_str(text).map_err(|e| PriceError::Parse {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
        let mut models = Vec::new();
        let mut exact = HashMap::new();
        let mut prefixes = Vec::new();
        for entry in &file.model {
            let invalid = |message: &str| PriceError::Invalid {
                source_name: source_name.to_string(),
                model: entry.name.clone(),
                message: message.to_string(),
            };
            let price = entry.price(&file.defaults).map_err(|m| invalid(&m))?;
            let index = models.len();
            if exact.insert(entry.name.clone(), index).is_some() {
                return Err(invalid("the model is listed twice"));
            }
            for pattern in &entry.matches {
                match pattern.strip_suffix('*') {
                    Some(prefix) => prefixes.push((prefix.to_string(), index)),
                    None => {
                        if exact.insert(pattern.clone(), index).is_some() {
                            return Err(invalid(&format!("the name {pattern:?} is listed twice")));
                        }
                    }
                }
            }
            models.push(price);
        }
        prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Ok(PriceTable {
            models: Arc::new(models),
            exact: Arc::new(exact),
            prefixes: Arc::new(prefixes),
        })
    }

    /// The prices for `model`: an exact name first, then the longest matching `prefix*` pattern.
    pub fn model(&self, model: &str) -> Result<&ModelPrice, PriceError> {
        if let Some(&i) = self.exact.get(model) {
            return Ok(&self.models[i]);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix.as_str()))
            .map(|&(_, i)| &self.models[i])
            .ok_or_else(|| PriceError::UnknownModel {
                model: model.to_string(),
            })
    }

    /// Every model in the table, in file order.
    pub fn models(&self) -> &[ModelPrice] {
        &self.models
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_loads_and_resolves_dated_snapshots() {
        let table =
            PriceTable::parse(EMBEDDED_PRICES, "embedded").expect("embedded table is valid");
        let sonnet = table
            .model("claude-sonnet-4-5-20250929")
            .expect("dated sonnet");
        assert_eq!(sonnet.name, "claude-sonnet-4-5");
        assert_eq!(sonnet.input, Rate(3_000_000));
        assert_eq!(sonnet.write_5m, Rate(3_750_000));
        assert_eq!(sonnet.write_1h, Rate(6_000_000));
        assert_eq!(sonnet.read, Rate(300_000));
        let opus55 = table.model("claude-opus-5-5").expect("opus 5.5");
        assert_eq!(opus55.read, Rate(200_000));
        assert_eq!(opus55.write_1h, Rate(8_000_000));
        assert_eq!(opus55.min_cacheable, 512);
        assert_eq!(
            table.model("claude-opus-4-6").map(|m| m.min_cacheable),
            Ok(4096)
        );
        // `claude-opus-4-1` must not be taken for `claude-opus-4` by a shorter prefix.
        assert_eq!(
            table
                .model("claude-opus-4-1-20250805")
                .map(|m| m.name.as_str()),
            Ok("claude-opus-4-1")
        );
    }

    #[test]
    fn an_unknown_model_is_a_named_error() {
        let table = PriceTable::embedded();
        assert_eq!(
            table.model("claude-fable-5-1"),
            Err(PriceError::UnknownModel {
                model: "claude-fable-5-1".into()
            })
        );
    }

    #[test]
    fn invalid_tables_are_rejected_with_the_model_named() {
        let negative = "[[model]]\nname='x'\ninput=-1.0\noutput=1.0\n";
        assert!(
            matches!(PriceTable::parse(negative, "t"), Err(PriceError::Invalid { model, .. }) if model == "x")
        );
        let duplicate = "[[model]]\nname='x'\ninput=1.0\noutput=1.0\n[[model]]\nname='x'\ninput=1.0\noutput=1.0\n";
        assert!(matches!(
            PriceTable::parse(duplicate, "t"),
            Err(PriceError::Invalid { .. })
        ));
        let unknown_field = "[[model]]\nname='x'\ninput=1.0\noutput=1.0\nwrite=2.0\n";
        assert!(matches!(
            PriceTable::parse(unknown_field, "t"),
            Err(PriceError::Parse { .. })
        ));
        let zero = "[[model]]\nname='x'\ninput=0.0\noutput=1.0\n";
        assert!(matches!(
            PriceTable::parse(zero, "t"),
            Err(PriceError::Invalid { .. })
        ));
    }
}
