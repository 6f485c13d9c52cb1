//! Durations as config writes them: an integer and a unit, `"250ms"`, `"10s"`, `"5m"`, `"24h"`,
//! `"90d"`.

use std::time::Duration;

/// Why a text is not a duration; the text is the one given, trimmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadDuration {
    #[error("{0:?} is not a duration like \"250ms\", \"10s\", \"5m\", \"24h\" or \"90d\"")]
    NotADuration(String),
    /// More milliseconds than a `u64` holds.
    #[error("{0:?} is too long")]
    TooLong(String),
}

/// Parses `<digits><unit>` with unit one of `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<Duration, BadDuration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let expected = || BadDuration::NotADuration(text.to_owned());
    let n: u64 = digits.parse().map_err(|_| expected())?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(expected()),
    };
    n.checked_mul(unit_ms).map(Duration::from_millis).ok_or_else(|| BadDuration::TooLong(text.to_owned()))
}

/// The shortest exact form of a duration in the same notation (`90d`, `1500ms`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_of_the_contract() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for bad in ["", "10", "s", "1.5s", "-3s", "10 sec", "5w", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn formats_back_to_the_shortest_exact_unit() {
        for text in ["250ms", "10s", "5m", "25h", "90d", "1500ms", "90s"] {
            assert_eq!(format_duration(parse_duration(text).expect("valid")), text);
        }
    }
}
