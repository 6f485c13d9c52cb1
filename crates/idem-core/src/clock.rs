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
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .and_then(|t| t.format(&Rfc3339).ok())
            .unwrap_or_else(|| "9999-12-31T23:59:59.999Z".to_owned())
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
    fn formats_rfc3339_utc_with_millis() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(Timestamp(1_795_000_000_123).to_rfc3339(), "2026-11-18T11:06:40.123Z");
        let t = Timestamp(1_795_000_000_123);
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t));
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(1_000));
        assert_eq!(clock.now(), Timestamp(1_000));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), Timestamp(3_000));
    }
}
