//! Times and durations as people type them, wherever a command takes one.
//!
//! A point in time ([`HumanTime`]) is one of:
//! - a duration ago: `90s`, `15m`, `1h`, `2d`, `1w`, or several (`1h30m`);
//! - an RFC 3339 timestamp: `2026-01-31T09:30:00Z`, `2026-01-31T10:30:00+01:00`;
//! - a date, meaning its midnight UTC: `2026-01-31`;
//! - `now`, or Unix milliseconds (13 or more digits, as the API speaks).
//!
//! Dates go through `jiff`, so what is not a date (31 February, month 13, 24:61) is an error
//! naming the text, never a silently shifted day.

use std::str::FromStr;

/// Milliseconds per unit of a [`parse_duration`] text.
const UNITS: [(&str, i64); 5] = [
    ("w", 7 * 86_400_000),
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
];

/// A duration such as `90s`, `15m`, `1h30m`, `2d` or `1w`, in milliseconds. Each part is a
/// whole number and a unit (`w`, `d`, `h`, `m`, `s`), largest first, each unit once.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || {
        format!("{text:?} is not a duration: use a number and a unit, e.g. 90s, 15m, 1h30m, 2d, 1w")
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut last_unit = usize::MAX;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = UNITS
            .iter()
            .position(|(u, _)| rest.starts_with(u))
            .ok_or_else(bad)?;
        // Largest first, each once: `1m1h` or `1h1h` is a typo, not a sum.
        if last_unit != usize::MAX && unit <= last_unit {
            return Err(bad());
        }
        last_unit = unit;
        rest = &rest[UNITS[unit].0.len()..];
        total = n
            .checked_mul(UNITS[unit].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// A point in time as given: relative to now, or absolute. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HumanTime {
    /// This many milliseconds before now.
    Ago(i64),
    /// This Unix-ms time.
    At(i64),
}

impl HumanTime {
    /// The Unix-ms time it means, `now_ms` being now.
    pub fn at(self, now_ms: i64) -> i64 {
        match self {
            HumanTime::Ago(ms) => now_ms.saturating_sub(ms),
            HumanTime::At(ms) => ms,
        }
    }
}

impl FromStr for HumanTime {
    type Err = String;

    fn from_str(text: &str) -> Result<HumanTime, String> {
        let text = text.trim();
        if text == "now" {
            return Ok(HumanTime::Ago(0));
        }
        if text.len() >= 13 && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(HumanTime::At)
                .map_err(|e| format!("{text:?}: {e}"));
        }
        if text.ends_with(|c: char| c.is_ascii_alphabetic()) && !text.contains('-') {
            return parse_duration(text).map(HumanTime::Ago);
        }
        if text.contains('T') || text.contains('t') || text.contains(' ') {
            let at: jiff::Timestamp = text.parse().map_err(|e| {
                format!("{text:?} is not an RFC 3339 time (2026-01-31T09:30:00Z): {e}")
            })?;
            return Ok(HumanTime::At(at.as_millisecond()));
        }
        let date: jiff::civil::Date = text
            .parse()
            .map_err(|e| format!("{text:?} is not a date (YYYY-MM-DD) or a time: {e}"))?;
        let midnight = jiff::tz::Offset::UTC
            .to_timestamp(date.to_datetime(jiff::civil::Time::midnight()))
            .map_err(|e| format!("{text:?}: {e}"))?;
        Ok(HumanTime::At(midnight.as_millisecond()))
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn clock_time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(at) => at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => ms.to_string(),
    }
}

/// Unix ms as `YYYY-MM-DD` UTC.
pub fn day(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(at) => at.strftime("%Y-%m-%d").to_string(),
        Err(_) => ms.to_string(),
    }
}

/// A duration for people: `45s`, `12m`, `3h`, `2d` (rounded down to its largest unit).
pub fn span(ms: i64) -> String {
    let ms = ms.max(0);
    match UNITS.iter().find(|(_, unit)| ms >= *unit) {
        Some((name, unit)) if *name != "w" => format!("{}{name}", ms / unit),
        Some(_) => format!("{}d", ms / 86_400_000),
        None => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn durations_parse_strictly() {
        assert_eq!(parse_duration("90s"), Ok(90_000));
        assert_eq!(parse_duration("15m"), Ok(900_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("2d"), Ok(172_800_000));
        assert_eq!(parse_duration("1w"), Ok(604_800_000));
        for bad in [
            "",
            "h",
            "1",
            "1x",
            "1.5h",
            "-1h",
            "1m1h",
            "1h1h",
            "1h 30m",
            "99999999999999w",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn times_are_relative_absolute_or_rejected() {
        let at = |t: &str| t.parse::<HumanTime>().map(|h| h.at(NOW));
        assert_eq!(at("1h"), Ok(NOW - 3_600_000));
        assert_eq!(at("now"), Ok(NOW));
        assert_eq!(at("1750000000000"), Ok(1_750_000_000_000));
        assert_eq!(at("2026-01-31"), Ok(1_769_817_600_000));
        assert_eq!(at("2026-01-31T00:00:00Z"), Ok(1_769_817_600_000));
        assert_eq!(at("2026-01-31T01:00:00+01:00"), Ok(1_769_817_600_000));
        // Not dates: each is an error, never a neighbouring day.
        for bad in [
            "2026-02-31",
            "2026-02-29",
            "2026-13-01",
            "2026-01-31T24:61:00Z",
            "2026-01-31T10:00:00",
            "yesterday",
            "31/01/2026",
        ] {
            assert!(at(bad).is_err(), "{bad:?} parsed as {:?}", at(bad));
        }
        assert_eq!(at("2028-02-29"), Ok(1_835_395_200_000));
    }

    #[test]
    fn times_print_in_utc() {
        assert_eq!(clock_time(1_769_817_600_000), "2026-01-31 00:00:00");
        assert_eq!(day(1_769_817_600_000 + 3_600_000), "2026-01-31");
        assert_eq!(span(90_000), "1m");
        assert_eq!(span(3 * 86_400_000), "3d");
        assert_eq!(span(500), "500ms");
    }
}
