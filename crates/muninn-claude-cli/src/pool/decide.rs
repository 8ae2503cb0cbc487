//! The pool's one decision, pure: whether holding an idle session's child costs more than
//! resuming it later ([`decide_park`]), from its idle time, its memory and its recent gaps.

use std::time::Duration;

/// What parking is worth: prices in one arbitrary cost unit, so only their ratio matters.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkPolicy {
    /// The cost of holding one MiB resident for one second.
    pub mib_second_price: f64,
    /// The cost of one second of added turn latency.
    pub latency_second_price: f64,
    /// What a resume adds to the next turn (measured: about 0.8 s).
    pub resume_latency: Duration,
    /// The window a decision looks ahead: "a turn soon" is a turn within it; the pool decides
    /// again after it.
    pub horizon: Duration,
    /// Never park a session idle for less than this (a reply is often followed at once).
    pub min_idle: Duration,
    /// How many recent inter-turn gaps a session keeps for its estimate.
    pub gap_window: usize,
}

impl Default for ParkPolicy {
    /// Prices that break even at about a minute for a 250 MiB child: holding 250 MiB for 64 s
    /// at 5e-5 per MiB-second equals the 0.8 s resume at 1 per second.
    fn default() -> ParkPolicy {
        ParkPolicy {
            mib_second_price: 5e-5,
            latency_second_price: 1.0,
            resume_latency: Duration::from_millis(800),
            horizon: Duration::from_secs(300),
            min_idle: Duration::from_secs(10),
            gap_window: 16,
        }
    }
}

/// The reasoning behind one park-or-keep decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkDecision {
    /// Whether to park now.
    pub park: bool,
    /// The chance of a turn within the horizon, given the idle time so far.
    pub p_turn_soon: f64,
    /// The expected seconds the memory would be held within the horizon if kept.
    pub expected_hold_s: f64,
    /// Keeping: MiB × expected hold × the MiB-second price.
    pub hold_cost: f64,
    /// Parking: resume latency × its price × the chance of a turn soon.
    pub resume_cost: f64,
}

/// Decides whether a session idle for `idle`, whose child holds `rss_mib`, should be parked.
///
/// Over the next [`ParkPolicy::horizon`]: keeping costs the memory for as long as it stays idle
/// within the horizon, `rss × E[min(gap − idle, horizon) | gap longer than idle] × price`;
/// parking costs the resume latency if a turn comes within it, `resume × price ×
/// P(gap − idle ≤ horizon | gap longer than idle)`. Both are estimated from the session's own
/// recent `gaps` that are longer than the idle time so far: a session idle longer than every
/// recent gap is taken to have gone quiet. With no gaps yet (fewer than two turns) the estimate
/// is a coin flip over a full horizon — at the default prices that parks a 250 MiB child once
/// [`ParkPolicy::min_idle`] has passed, since a full horizon of its memory outweighs half a
/// resume.
pub fn decide_park(
    policy: &ParkPolicy,
    idle: Duration,
    rss_mib: f64,
    gaps: &[Duration],
) -> ParkDecision {
    let horizon = policy.horizon.as_secs_f64();
    let idle_s = idle.as_secs_f64();
    let longer: Vec<f64> = gaps
        .iter()
        .map(Duration::as_secs_f64)
        .filter(|g| *g > idle_s)
        .collect();
    let (p_turn_soon, expected_hold_s) = if gaps.is_empty() {
        (0.5, horizon)
    } else if longer.is_empty() {
        (0.0, horizon)
    } else {
        let n = longer.len() as f64;
        let soon = longer.iter().filter(|g| *g - idle_s <= horizon).count() as f64;
        let hold = longer
            .iter()
            .map(|g| (g - idle_s).min(horizon))
            .sum::<f64>()
            / n;
        (soon / n, hold)
    };
    let hold_cost = rss_mib * expected_hold_s * policy.mib_second_price;
    let resume_cost =
        policy.resume_latency.as_secs_f64() * policy.latency_second_price * p_turn_soon;
    ParkDecision {
        park: idle >= policy.min_idle && hold_cost > resume_cost,
        p_turn_soon,
        expected_hold_s,
        hold_cost,
        resume_cost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn a_busy_session_is_kept_and_a_quiet_one_parked() {
        let policy = ParkPolicy::default();
        // Turns every ~20 s: 12 s after the last one a turn is due within seconds, so keep;
        // idle 30 s is longer than every recent gap, so the session went quiet: park.
        let chatty = [s(15), s(20), s(25), s(20)];
        let d = decide_park(&policy, s(12), 250.0, &chatty);
        assert!(!d.park, "{d:?}");
        assert_eq!(d.p_turn_soon, 1.0);
        let d = decide_park(&policy, s(30), 250.0, &chatty);
        assert!(d.park && d.p_turn_soon == 0.0, "{d:?}");
        // Never before the minimum idle time, however cheap parking looks.
        assert!(!decide_park(&policy, s(5), 250.0, &[s(3600)]).park);
    }

    #[test]
    fn the_break_even_moves_with_the_prices_and_the_memory() {
        let policy = ParkPolicy::default();
        // A turn within 20 s is certain: holding 250 MiB for 20 s (0.25) is cheaper than the
        // 0.8 s resume; holding 2 GiB for it (2.05) is not.
        let gaps = [s(30), s(30)];
        let d = decide_park(&policy, s(10), 250.0, &gaps);
        assert!(!d.park, "{d:?}");
        assert!((d.hold_cost - 0.25).abs() < 1e-9 && (d.resume_cost - 0.8).abs() < 1e-9);
        assert!(decide_park(&policy, s(10), 2048.0, &gaps).park);
        // Latency that costs ten times as much keeps even the large child.
        let dear = ParkPolicy {
            latency_second_price: 10.0,
            ..policy.clone()
        };
        assert!(!decide_park(&dear, s(10), 2048.0, &gaps).park);
    }

    #[test]
    fn the_chance_of_a_turn_soon_comes_from_the_longer_gaps() {
        let policy = ParkPolicy {
            horizon: s(60),
            ..ParkPolicy::default()
        };
        // Idle 20 s; of the gaps longer than that, one is within the horizon and one far past.
        let d = decide_park(&policy, s(20), 250.0, &[s(5), s(50), s(3600)]);
        assert_eq!(d.p_turn_soon, 0.5);
        assert!((d.expected_hold_s - (30.0 + 60.0) / 2.0).abs() < 1e-9);
        // No history: a coin flip over the whole horizon.
        let d = decide_park(&policy, s(20), 250.0, &[]);
        assert_eq!((d.p_turn_soon, d.expected_hold_s), (0.5, 60.0));
        assert!(
            d.park,
            "250 MiB for a minute outweighs half a resume: {d:?}"
        );
    }
}
