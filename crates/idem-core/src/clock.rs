//! Time as the store sees it. Timestamps are whole milliseconds since the Unix epoch; the clock is
//! injected so that tests decide what "now" is instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating instead of overflowing for absurd durations.
    pub fn plus(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(ms))
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-21T16:35:51.123Z`.
    /// RFC 3339 in UTC with exactly six fractional digits and `Z`, always the same length
    /// (`2026-11-18T11:06:40.123000Z`), so that strict parsers (.NET's `ParseExact`, a fixed
    /// `strptime` format) read every one.
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .filter(|t| (0..=9999).contains(&t.year()))
            .map(|t| {
                let (date, time) = (t.date(), t.time());
                format!(
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                    date.year(),
                    u8::from(date.month()),
                    date.day(),
                    time.hour(),
                    time.minute(),
                    time.second(),
                    time.microsecond()
                )
            })
            .unwrap_or_else(|| "9999-12-31T23:59:59.999000Z".to_owned())
    }

    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
        i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok().map(Self)
    }
}

pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> Timestamp;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock that moves only when told to; for tests.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        Self(AtomicI64::new(start.0))
    }

    pub fn advance(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_utc_with_exactly_six_fractional_digits() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000000Z");
        assert_eq!(Timestamp(1_795_000_000_123).to_rfc3339(), "2026-11-18T11:06:40.123000Z");
        assert_eq!(Timestamp(1_795_000_000_900).to_rfc3339(), "2026-11-18T11:06:40.900000Z");
        for ms in [0, 1, 10, 100, 999, 1_795_000_000_120, 253_402_300_799_999] {
            let text = Timestamp(ms).to_rfc3339();
            assert_eq!(text.len(), 27, "{text}");
            assert_eq!(Timestamp::parse_rfc3339(&text), Some(Timestamp(ms)), "{text}");
        }
        assert_eq!(Timestamp(i64::MAX).to_rfc3339(), "9999-12-31T23:59:59.999000Z");
        assert_eq!(Timestamp::parse_rfc3339("2026-11-18T11:06:40.9Z"), Some(Timestamp(1_795_000_000_900)));
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(1_000));
        assert_eq!(clock.now(), Timestamp(1_000));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), Timestamp(3_000));
    }
}
