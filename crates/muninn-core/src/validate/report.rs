//! What a validation run reports: each request's row (its class, both predictions, the label of
//! a disagreement, the cause) and the figures over the rows — per predictor, per part of the split,
//! and the causes against the provider's own labels. Built by [`super::validate`].

use crate::miss::{MissCause, ProviderMiss};
use crate::money::Tokens;
use crate::split::Part;
use crate::trace::ThreadKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a request read, relative to its reference prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadClass {
    /// The whole reference prefix (or more).
    Prefix,
    /// Something, but less than the reference prefix: a head.
    Head,
    /// Nothing.
    None,
}

impl ReadClass {
    /// Every class.
    pub const ALL: [ReadClass; 3] = [ReadClass::Prefix, ReadClass::Head, ReadClass::None];

    /// The class's name as it is stored (the JSON report) and printed (`check-cache`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ReadClass::Prefix => "prefix",
            ReadClass::Head => "head",
            ReadClass::None => "none",
        }
    }
}

impl std::fmt::Display for ReadClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a prediction's class differs from the recorded one, named from the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disagreement {
    /// A head was read that nothing in the traces had written, or that had expired in the traces:
    /// a session or agent outside the traces kept it warm (the cache is organisation-wide).
    ExternalWarmHead,
    /// The prefix was predicted but only a head was read, with no compaction recorded: the client
    /// rewrote the conversation inside the TTL.
    PrefixRewrite,
    /// The prefix was predicted but nothing was read.
    PrefixLost,
    /// A head was predicted but nothing was read: the head had changed (tools, system) or was gone.
    HeadLost,
    /// A head was read where the prediction had no head to read (size not yet learned).
    HeadUnknown,
    /// The prefix was read where a miss or a head was predicted: the entry outlived the model's TTL
    /// or an unrecorded request refreshed it.
    UnexpectedPrefix,
    /// The prefix was predicted but the recorded read was a head after a compaction or model switch
    /// (only the naive rule makes this one).
    CompactionOrSwitch,
    /// The prefix was predicted on a thread's first request (only for the naive rule, which cannot
    /// see another thread's prefix).
    ForkedPrefix,
}

impl Disagreement {
    /// Every class, in the order they sort in.
    pub const ALL: [Disagreement; 8] = [
        Disagreement::ExternalWarmHead,
        Disagreement::PrefixRewrite,
        Disagreement::PrefixLost,
        Disagreement::HeadLost,
        Disagreement::HeadUnknown,
        Disagreement::UnexpectedPrefix,
        Disagreement::CompactionOrSwitch,
        Disagreement::ForkedPrefix,
    ];

    /// The class's name as it is stored (the JSON report's `disagreement` and `disagreements`
    /// keys) and printed (`check-cache`'s table and `--disagreements`): one name in both, so a
    /// class read off the table can be looked up in the JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Disagreement::ExternalWarmHead => "external_warm_head",
            Disagreement::PrefixRewrite => "prefix_rewrite",
            Disagreement::PrefixLost => "prefix_lost",
            Disagreement::HeadLost => "head_lost",
            Disagreement::HeadUnknown => "head_unknown",
            Disagreement::UnexpectedPrefix => "unexpected_prefix",
            Disagreement::CompactionOrSwitch => "compaction_or_switch",
            Disagreement::ForkedPrefix => "forked_prefix",
        }
    }
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One request's comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRow {
    /// The trace's id.
    pub trace: String,
    /// The session.
    pub session: String,
    /// The thread within the session.
    pub thread: String,
    /// The thread's kind.
    pub kind: ThreadKind,
    /// The model.
    pub model: String,
    /// The part of the split the session belongs to.
    pub part: Part,
    /// Index of the request in its trace.
    pub index: usize,
    /// When the request was made (Unix ms).
    pub at_ms: i64,
    /// Time since the previous request of the trace, if any.
    pub gap_ms: Option<i64>,
    /// Whether a compaction was recorded just before the request.
    pub compacted: bool,
    /// The whole prompt.
    pub prompt: Tokens,
    /// The prefix the classes are measured against.
    pub reference: Tokens,
    /// The recorded cache read.
    pub recorded_read: Tokens,
    /// Its class.
    pub recorded_class: ReadClass,
    /// The cache model's prediction.
    pub cache_model: Prediction,
    /// The naive rule's prediction.
    pub naive: Prediction,
    /// The cache model's miss cause: a change the trace records before the request names its
    /// level (a model switch, a tool list the client changed, a compaction); otherwise the
    /// cache model's own (cold start, TTL expiry, a rebuilt prompt that dropped thinking,
    /// prefix change); and where the model expected the whole reference prefix and the
    /// provider read less, a change of the prompt (`shortfall_cause`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<MissCause>,
    /// The provider's diagnosis the source recorded, if any (the label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_miss: Option<ProviderMiss>,
    /// Whether `cause` agrees with the label ([`crate::miss::agrees`]); none without a
    /// conclusive label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause_agrees: Option<bool>,
}

/// One predictor's view of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    /// Predicted read tokens.
    pub read: Tokens,
    /// Predicted class.
    pub class: ReadClass,
    /// Whether the class matches the recorded one.
    pub agree: bool,
    /// Why not, when it does not.
    pub disagreement: Option<Disagreement>,
}

/// Agreement and read error over a set of requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Requests counted.
    pub requests: usize,
    /// Requests whose class matched.
    pub agree: usize,
    /// `agree / requests` (1 when empty).
    pub agreement: f64,
    /// Σ recorded read tokens.
    pub recorded_read: Tokens,
    /// Σ |predicted − recorded| read tokens.
    pub abs_error: Tokens,
    /// `abs_error / recorded_read` (0 when nothing was read).
    pub read_error: f64,
    /// Disagreements by label.
    pub disagreements: BTreeMap<Disagreement, usize>,
}

impl Aggregate {
    fn add(&mut self, recorded: Tokens, p: &Prediction) {
        self.requests += 1;
        self.agree += usize::from(p.agree);
        self.recorded_read += recorded;
        self.abs_error += p.read.abs_diff(recorded);
        if let Some(d) = p.disagreement {
            *self.disagreements.entry(d).or_default() += 1;
        }
    }

    fn finish(&mut self) {
        self.agreement = if self.requests == 0 {
            1.0
        } else {
            self.agree as f64 / self.requests as f64
        };
        self.read_error = if self.recorded_read == 0 {
            0.0
        } else {
            self.abs_error as f64 / self.recorded_read as f64
        };
    }
}

/// A predictor's aggregates: main threads and all threads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// Requests of [`ThreadKind::Main`] traces.
    pub main: Aggregate,
    /// Every request.
    pub all: Aggregate,
}

/// Both predictors' figures over one set of requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// The cache model's figures.
    pub model: Side,
    /// The naive rule's figures.
    pub naive: Side,
    /// The cache model's causes against the provider's labels.
    pub causes: CauseFigures,
}

/// Miss causes against the provider's own labels, over the requests that carry a conclusive one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CauseFigures {
    /// Requests with a conclusive label.
    pub labelled: usize,
    /// Of those, requests whose cause agrees.
    pub agree: usize,
    /// Of those, requests whose cause named no level ([`MissCause::PrefixChange`]), which
    /// agrees with a change at any level.
    #[serde(default)]
    pub unknown_level: usize,
    /// Of those, requests whose cause named one of two levels
    /// ([`MissCause::ToolsOrSystemChange`]): narrower than no level, not the provider's level
    /// either, so `agree - unknown_level - two_levels` named the provider's level.
    #[serde(default)]
    pub two_levels: usize,
    /// Labels by reason (`messages_changed`, `no_divergence`, …), conclusive or not.
    pub labels: BTreeMap<String, usize>,
}

impl CauseFigures {
    /// `agree / labelled`, `None` with no label.
    pub fn agreement(&self) -> Option<f64> {
        (self.labelled > 0).then(|| self.agree as f64 / self.labelled as f64)
    }
}

impl Figures {
    pub(super) fn add(&mut self, row: &RequestRow) {
        if let Some(label) = row.provider_miss {
            *self
                .causes
                .labels
                .entry(label.reason.as_str().to_string())
                .or_default() += 1;
        }
        if let Some(agree) = row.cause_agrees {
            self.causes.labelled += 1;
            self.causes.agree += usize::from(agree);
            self.causes.unknown_level +=
                usize::from(agree && row.cause == Some(MissCause::PrefixChange));
            self.causes.two_levels +=
                usize::from(agree && row.cause == Some(MissCause::ToolsOrSystemChange));
        }
        if row.kind == ThreadKind::Main {
            self.model.main.add(row.recorded_read, &row.cache_model);
            self.naive.main.add(row.recorded_read, &row.naive);
        }
        self.model.all.add(row.recorded_read, &row.cache_model);
        self.naive.all.add(row.recorded_read, &row.naive);
    }

    pub(super) fn finish(&mut self) {
        for agg in [
            &mut self.model.main,
            &mut self.model.all,
            &mut self.naive.main,
            &mut self.naive.all,
        ] {
            agg.finish();
        }
    }
}

/// The result of [`validate`](super::validate).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationReport {
    /// One row per request, in replay (time) order.
    pub rows: Vec<RequestRow>,
    /// The cache model's figures over every request.
    pub model: Side,
    /// The naive rule's figures over every request.
    pub naive: Side,
    /// The cache model's causes against the provider's labels, over every request.
    pub causes: CauseFigures,
    /// Both predictors' figures on each part of the split ([`crate::split`]); a part with no
    /// request is absent.
    pub parts: BTreeMap<Part, Figures>,
    /// Requests the cache model refused (malformed reconstruction); counted as predicting 0.
    pub model_errors: usize,
}
