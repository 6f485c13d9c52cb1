//! Time as the store sees it. Timestamps are whole milliseconds since the Unix epoch; the clock is
//! injected so that tests decide what "now" is instead of sleeping.
//!
//! Leases are judged by this clock, so it must not jump: a wall clock stepped 45 s forward on one
//! node (an NTP step at boot, a VM resumed, an operator's `date -s`) would end every lease that
//! node sees, and another request would take a key whose holder is still running it; stepped back,
//! its own leases would outlive their holders. [`SteadyClock`] (what `idem serve` runs on) reads the
//! wall clock once, then counts on the monotonic clock, which no step moves; where the two drift
//! apart (NTP slewing the wall clock, a step), it moves toward the wall clock by at most
//! [`SLEW_MS_PER_S`] milliseconds a second: a 60 s lease lasts 60 s ± 0.3 s, and a step of the wall
//! clock is taken up over hours, never at once.

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

    /// RFC 3339 in UTC with exactly six fractional digits and `Z`, always the same length
    /// (`2026-11-18T11:06:40.123000Z`), so that strict parsers (.NET's `ParseExact`, a fixed
    /// `strptime` format) read every one. Written digit by digit: through `format!` it was a sixth
    /// of the instructions of a 500-key batch claim, whose answer holds two per key.
    pub fn to_rfc3339(self) -> String {
        const LAST: &str = "9999-12-31T23:59:59.999000Z";
        let nanos = i128::from(self.0) * 1_000_000;
        let Some(t) = OffsetDateTime::from_unix_timestamp_nanos(nanos).ok().filter(|t| (0..=9999).contains(&t.year()))
        else {
            return LAST.to_owned();
        };
        let (date, time) = (t.date(), t.time());
        let mut out = *b"0000-00-00T00:00:00.000000Z";
        let mut put = |at: usize, width: usize, mut n: u32| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(0, 4, date.year() as u32);
        put(5, 2, u32::from(u8::from(date.month())));
        put(8, 2, u32::from(date.day()));
        put(11, 2, u32::from(time.hour()));
        put(14, 2, u32::from(time.minute()));
        put(17, 2, u32::from(time.second()));
        put(20, 6, time.microsecond());
        String::from_utf8(out.to_vec()).unwrap_or_else(|_| LAST.to_owned())
    }

    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
        i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok().map(Self)
    }
}

pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> Timestamp;

    /// The wall clock minus this clock, in milliseconds, as last compared (a clock that does not
    /// step with the wall clock is apart from it after a step, until it has slewed to it): the
    /// server logs it when over a second and exports it as a metric.
    fn wall_apart_ms(&self) -> i64 {
        0
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    }
}

/// What a [`SteadyClock`] reads: the wall clock, and a monotonic clock no step moves.
pub trait Ticks: Send + Sync + std::fmt::Debug + 'static {
    /// The wall clock.
    fn wall(&self) -> Timestamp;
    /// Time since a fixed origin, never going back nor jumping when the wall clock is stepped.
    fn monotonic(&self) -> Duration;
}

/// The system's clocks: `SystemTime` and `Instant` (`CLOCK_MONOTONIC` on Linux).
#[derive(Debug)]
pub struct SystemTicks {
    origin: std::time::Instant,
}

impl Default for SystemTicks {
    fn default() -> Self {
        Self { origin: std::time::Instant::now() }
    }
}

impl Ticks for SystemTicks {
    fn wall(&self) -> Timestamp {
        SystemClock.now()
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// How fast a [`SteadyClock`] moves toward the wall clock when they differ: 5 ms a second (0.5 %,
/// ten times what NTP slews at most, so it follows any slew; a step is taken up at 18 s an hour).
pub const SLEW_MS_PER_S: i64 = 5;

/// The wall clock as read at start, counted on from there by the monotonic clock, and slewed
/// toward the wall clock at [`SLEW_MS_PER_S`] when the two differ (module doc).
#[derive(Debug)]
pub struct SteadyClock<T: Ticks = SystemTicks> {
    ticks: T,
    /// `now - monotonic` in milliseconds.
    offset: AtomicI64,
    /// The monotonic millisecond of the last comparison with the wall clock.
    compared_at: AtomicI64,
    /// The wall clock minus this clock at the last comparison (ms).
    apart: AtomicI64,
}

impl SteadyClock<SystemTicks> {
    /// On the system's clocks.
    pub fn system() -> Self {
        Self::new(SystemTicks::default())
    }
}

impl<T: Ticks> SteadyClock<T> {
    pub fn new(ticks: T) -> Self {
        let mono = millis(ticks.monotonic());
        let offset = ticks.wall().millis() - mono;
        Self { ticks, offset: AtomicI64::new(offset), compared_at: AtomicI64::new(mono), apart: AtomicI64::new(0) }
    }

    /// Once a second at most: moves the offset toward the wall clock's, by what the time since the
    /// last comparison allows. One caller does it; the others read the offset as it is.
    fn slew(&self, mono: i64) {
        let last = self.compared_at.load(Ordering::Relaxed);
        if mono - last < 1000
            || self.compared_at.compare_exchange(last, mono, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return;
        }
        let offset = self.offset.load(Ordering::Acquire);
        let apart = self.ticks.wall().millis() - mono - offset;
        let most = (mono - last).saturating_mul(SLEW_MS_PER_S) / 1000;
        let step = apart.clamp(-most, most);
        self.offset.store(offset + step, Ordering::Release);
        self.apart.store(apart - step, Ordering::Relaxed);
    }
}

impl<T: Ticks> Clock for SteadyClock<T> {
    fn now(&self) -> Timestamp {
        let mono = millis(self.ticks.monotonic());
        self.slew(mono);
        Timestamp(self.offset.load(Ordering::Acquire) + mono)
    }

    fn wall_apart_ms(&self) -> i64 {
        self.apart.load(Ordering::Relaxed)
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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

    /// The digit-by-digit writer against `time`'s own formatting, over times spread across the
    /// years a timestamp can show.
    #[test]
    fn formats_as_time_does() {
        let mut ms: i64 = 0;
        for i in 0..20_000_i64 {
            ms = (ms + 12_345_678_901 + i * 7_919) % 253_402_300_800_000;
            let expected = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
                .ok()
                .and_then(|t| t.format(&Rfc3339).ok())
                .map(|text| {
                    // time writes the fraction only as long as it needs: pad to six digits.
                    let (whole, frac) =
                        text.trim_end_matches('Z').split_once('.').unwrap_or((text.trim_end_matches('Z'), ""));
                    format!("{whole}.{frac:0<6}Z")
                });
            assert_eq!(Some(Timestamp(ms).to_rfc3339()), expected, "{ms}");
        }
    }

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

    /// Ticks a test moves: the wall clock and the monotonic clock, each on its own.
    #[derive(Debug, Default)]
    struct FakeTicks {
        wall: AtomicI64,
        mono: AtomicI64,
    }

    impl Ticks for std::sync::Arc<FakeTicks> {
        fn wall(&self) -> Timestamp {
            Timestamp(self.wall.load(Ordering::SeqCst))
        }
        fn monotonic(&self) -> Duration {
            Duration::from_millis(self.mono.load(Ordering::SeqCst) as u64)
        }
    }

    impl FakeTicks {
        /// Both clocks move on by `ms`, as time passing does.
        fn pass(&self, ms: i64) {
            self.wall.fetch_add(ms, Ordering::SeqCst);
            self.mono.fetch_add(ms, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_steady_clock_does_not_jump_when_the_wall_clock_is_stepped() {
        let ticks = std::sync::Arc::new(FakeTicks { wall: AtomicI64::new(1_000_000), mono: AtomicI64::new(50) });
        let clock = SteadyClock::new(ticks.clone());
        assert_eq!(clock.now(), Timestamp(1_000_000), "starts at the wall clock");
        ticks.pass(10_000);
        assert_eq!(clock.now(), Timestamp(1_010_000), "counts with the monotonic clock");
        // The wall clock is stepped 45 s forward: a lease of 60 s must still last about 60 s.
        ticks.wall.fetch_add(45_000, Ordering::SeqCst);
        let before = clock.now();
        ticks.pass(60_000);
        let after = clock.now();
        let lasted = after.0 - before.0;
        assert!((60_000..=60_000 + 60 * SLEW_MS_PER_S).contains(&lasted), "60 s lasted {lasted} ms");
        assert!(clock.wall_apart_ms() > 40_000, "it says how far it is from the wall clock");
        // And back: stepped 90 s back, it slows down by at most the slew, never goes back.
        ticks.wall.fetch_sub(90_000, Ordering::SeqCst);
        let mut last = clock.now();
        for _ in 0..100 {
            ticks.pass(1_000);
            let now = clock.now();
            assert!(now.0 - last.0 >= 1_000 - SLEW_MS_PER_S, "a second is at least {} ms", 1_000 - SLEW_MS_PER_S);
            last = now;
        }
        assert!(clock.wall_apart_ms() < -40_000);
    }

    #[test]
    fn a_steady_clock_follows_a_slewing_wall_clock() {
        let ticks = std::sync::Arc::new(FakeTicks::default());
        let clock = SteadyClock::new(ticks.clone());
        // NTP slewing the wall clock 500 ppm faster for an hour: 1.8 s apart by the end.
        for _ in 0..3_600 {
            ticks.mono.fetch_add(1_000, Ordering::SeqCst);
            ticks.wall.fetch_add(1_000, Ordering::SeqCst);
            if ticks.mono.load(Ordering::SeqCst) % 2_000 == 0 {
                ticks.wall.fetch_add(1, Ordering::SeqCst);
            }
            clock.now();
        }
        assert!((clock.now().0 - ticks.wall().0).abs() <= 1, "kept within a millisecond");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(1_000));
        assert_eq!(clock.now(), Timestamp(1_000));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), Timestamp(3_000));
    }
}
