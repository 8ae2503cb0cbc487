//! Tokens and money.
//!
//! Token counts are plain `u64`. Money is integer micro-dollars ([`MicroUsd`]): every price in the
//! system is a rate in micro-dollars per million tokens, so `$3.75 / MTok` is `3_750_000`, and a cost
//! is `tokens × rate / 1_000_000` rounded to the nearest micro-dollar. Floating point appears only
//! when a report divides two sums to print a ratio.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Sub};

/// A count of tokens.
pub type Tokens = u64;

/// An amount of money in integer micro-dollars (1 USD = 1,000,000).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct MicroUsd(pub i64);

impl MicroUsd {
    /// Zero dollars.
    pub const ZERO: MicroUsd = MicroUsd(0);

    /// The largest amount, about $9.2 × 10¹². Costs and their sums saturate here instead of
    /// wrapping; a sum that reached it is no figure ([`MicroUsd::saturated`]).
    pub const MAX: MicroUsd = MicroUsd(i64::MAX);

    /// Whether this cost, or sum of costs, saturated: its true value is [`MicroUsd::MAX`] or
    /// more, which the price table's limits and the importers' allow (a few requests of 2^32
    /// tokens at the largest prices). Costs are never negative, so a sum that reached it stays
    /// there; a report must refuse it rather than print it, or a ratio of it, as a figure.
    pub fn saturated(self) -> bool {
        self == MicroUsd::MAX
    }

    /// The amount in dollars, for display only.
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }

    /// `tokens` priced at `rate` micro-dollars per million tokens, rounded half up.
    pub fn of(tokens: Tokens, rate: Rate) -> MicroUsd {
        let product = tokens as u128 * rate.0 as u128;
        // Saturates, as the sums below do: token counts come from outside (a provider, a
        // transcript), and `u64::MAX` tokens once wrapped to a small, plausible price.
        MicroUsd(i64::try_from((product + 500_000) / 1_000_000).unwrap_or(i64::MAX))
    }

    /// Saturating difference, floored at zero.
    pub fn saturating_sub(self, other: MicroUsd) -> MicroUsd {
        MicroUsd(self.0.saturating_sub(other.0).max(0))
    }
}

impl Add for MicroUsd {
    type Output = MicroUsd;
    fn add(self, rhs: MicroUsd) -> MicroUsd {
        MicroUsd(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for MicroUsd {
    fn add_assign(&mut self, rhs: MicroUsd) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Sub for MicroUsd {
    type Output = MicroUsd;
    fn sub(self, rhs: MicroUsd) -> MicroUsd {
        MicroUsd(self.0.saturating_sub(rhs.0))
    }
}

impl Sum for MicroUsd {
    fn sum<I: Iterator<Item = MicroUsd>>(iter: I) -> MicroUsd {
        iter.fold(MicroUsd::ZERO, Add::add)
    }
}

impl fmt::Display for MicroUsd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${:.4}", self.dollars())
    }
}

/// A price in micro-dollars per million tokens (numerically equal to micro-dollars per token × 10⁶,
/// or to dollars per token × 10¹²). `$5 / MTok` is `Rate(5_000_000)`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Rate(pub u64);

impl Rate {
    /// A rate from dollars per million tokens, rounded to the nearest micro-dollar per MTok.
    pub fn from_usd_per_mtok(usd: f64) -> Rate {
        Rate((usd * 1_000_000.0).round() as u64)
    }

    /// This rate scaled by a multiplier given in parts per million (`1.25×` is `1_250_000`).
    pub fn scaled_ppm(self, ppm: u64) -> Rate {
        Rate(((self.0 as u128 * ppm as u128 + 500_000) / 1_000_000) as u64)
    }

    /// Dollars per million tokens, for display.
    pub fn usd_per_mtok(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_round_to_the_nearest_micro_dollar() {
        // 1,000 tokens at $3/MTok is $0.003 = 3,000 µ$.
        assert_eq!(
            MicroUsd::of(1_000, Rate::from_usd_per_mtok(3.0)),
            MicroUsd(3_000)
        );
        // 1 token at $0.30/MTok is 0.3 µ$, rounds to 0; 2 tokens is 0.6 µ$, rounds to 1.
        assert_eq!(MicroUsd::of(1, Rate::from_usd_per_mtok(0.3)), MicroUsd(0));
        assert_eq!(MicroUsd::of(2, Rate::from_usd_per_mtok(0.3)), MicroUsd(1));
        assert_eq!(
            Rate::from_usd_per_mtok(3.0).scaled_ppm(1_250_000),
            Rate(3_750_000)
        );
    }

    #[test]
    fn absurd_token_counts_saturate_instead_of_wrapping() {
        let price = MicroUsd::of(u64::MAX, Rate::from_usd_per_mtok(75.0));
        assert_eq!(price, MicroUsd(i64::MAX));
        assert_eq!(price + MicroUsd(1), MicroUsd(i64::MAX));
        let mut total = price;
        total += price;
        assert_eq!(total, MicroUsd(i64::MAX));
        assert_eq!(MicroUsd(i64::MIN) - MicroUsd(1), MicroUsd(i64::MIN));
    }
}
