//! The policies the decider runs, and how `--policy` spells them (see [`crate::decide`]).

use crate::money::Tokens;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An online policy the decider can run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy", content = "arg")]
pub enum Policy {
    /// Break-even rules with a 2× worst-case bound (the default).
    SkiRental,
    /// Expected cost under the fitted idle-gap distribution, guarded by ski-rental's bound.
    Predictive,
    /// A fresh segment at every boundary.
    Rebuild,
    /// Append until the context ceiling.
    Never,
    /// Refresh at F × the context window (F in parts per million).
    Threshold(u32),
    /// Refresh at N prompt tokens.
    Ceiling(Tokens),
    /// Up to N keep-warm pings per idle gap.
    Keepalive(u32),
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::SkiRental => write!(f, "ski-rental"),
            Policy::Predictive => write!(f, "predictive"),
            Policy::Rebuild => write!(f, "rebuild"),
            Policy::Never => write!(f, "never"),
            Policy::Threshold(ppm) => {
                let s = format!("{:.6}", *ppm as f64 / 1e6);
                write!(
                    f,
                    "threshold:{}",
                    s.trim_end_matches('0').trim_end_matches('.')
                )
            }
            Policy::Ceiling(n) => write!(f, "ceiling:{n}"),
            Policy::Keepalive(n) => write!(f, "keepalive:{n}"),
        }
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let need = |what: &str| format!("policy {name} needs an argument: {name}:{what}");
        match (name, arg) {
            ("ski-rental", None) => Ok(Policy::SkiRental),
            ("predictive", None) => Ok(Policy::Predictive),
            ("rebuild", None) => Ok(Policy::Rebuild),
            ("never", None) => Ok(Policy::Never),
            ("threshold", Some(a)) => {
                let f: f64 = a
                    .parse()
                    .map_err(|_| format!("threshold:{a}: not a number"))?;
                if !(f > 0.0 && f <= 1.0) {
                    return Err(format!("threshold:{a}: the fraction must be in (0, 1]"));
                }
                Ok(Policy::Threshold((f * 1e6).round() as u32))
            }
            ("threshold", None) => Err(need("F")),
            ("ceiling", Some(a)) => a
                .replace('_', "")
                .parse()
                .ok()
                .filter(|&n: &Tokens| n > 0)
                .map(Policy::Ceiling)
                .ok_or_else(|| format!("ceiling:{a}: expected a positive token count")),
            ("ceiling", None) => Err(need("N")),
            ("keepalive", Some(a)) => a
                .parse()
                .map(Policy::Keepalive)
                .map_err(|_| format!("keepalive:{a}: expected a count of pings")),
            ("keepalive", None) => Err(need("N")),
            (_, Some(_)) => Err(format!("policy {name} takes no argument")),
            _ => Err(format!(
                "unknown policy {s:?}: expected ski-rental, predictive, rebuild, never, threshold:F, ceiling:N, keepalive:N"
            )),
        }
    }
}
