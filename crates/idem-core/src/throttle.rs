//! How often a repeated event is told: once per kind per period, with how many were skipped since.
//! A store that is down fails every request; its log should say so once every few seconds, not
//! once per request. Pure bookkeeping: the caller passes the time and does the logging.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Kinds remembered at most; past it the memory is cleared (a burst of new kinds is told again).
const MAX_KINDS: usize = 1024;

#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    seen: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Throttle {
    pub fn new(every: Duration) -> Self {
        Self { every, seen: Mutex::new(HashMap::new()) }
    }

    /// Whether an event of `kind` at `now` is to be told: `Some(skipped)` (how many of its kind
    /// were not told since the last one that was), or `None` to stay quiet.
    pub fn admit(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((last, skipped)) = seen.get_mut(kind) {
            if now.saturating_duration_since(*last) < self.every {
                *skipped += 1;
                return None;
            }
            let told = *skipped;
            *last = now;
            *skipped = 0;
            return Some(told);
        }
        if seen.len() >= MAX_KINDS {
            seen.clear();
        }
        seen.insert(kind.to_owned(), (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_kind_per_period_with_the_count_skipped() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(throttle.admit("25006", at(0)), Some(0));
        assert_eq!(throttle.admit("25006", at(1)), None);
        assert_eq!(throttle.admit("25006", at(9)), None);
        assert_eq!(throttle.admit("08006", at(9)), Some(0), "another kind is told at once");
        assert_eq!(throttle.admit("25006", at(10)), Some(2));
        assert_eq!(throttle.admit("25006", at(11)), None);
        assert_eq!(throttle.admit("25006", at(30)), Some(1));
    }
}
