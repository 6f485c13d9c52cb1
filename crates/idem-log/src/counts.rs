//! Live claims per namespace, kept as the index changes, so that `idem_claims_stored` needs no
//! scan: for each namespace the number of entries in the index, and of those that expire, how
//! many expire in each second. A count read at `now` leaves out every second already past, so an
//! expired claim stops counting within a second of its expiry, whether or not the sweeper has
//! removed it yet.

use std::collections::{BTreeMap, HashMap};

use crate::record::NEVER;

#[derive(Debug, Default)]
struct Namespace {
    stored: i64,
    /// Claims by the second they expire in (rounded up), for those that expire.
    expiring: BTreeMap<i64, i64>,
}

#[derive(Debug, Default)]
pub struct Counts(HashMap<Box<str>, Namespace>);

/// The second a claim stops counting in: the first whole second at or after its expiry.
fn second_of(expires_at: i64) -> i64 {
    expires_at.div_euclid(1000) + i64::from(expires_at.rem_euclid(1000) != 0)
}

impl Counts {
    /// A claim entry (expiring at `expires_at`) added (`delta` 1) or removed (-1).
    pub fn add(&mut self, ns: &str, expires_at: i64, delta: i64) {
        let entry = match self.0.get_mut(ns) {
            Some(entry) => entry,
            None => self.0.entry(ns.into()).or_default(),
        };
        entry.stored += delta;
        if expires_at != NEVER {
            let second = second_of(expires_at);
            let n = entry.expiring.entry(second).or_default();
            *n += delta;
            if *n == 0 {
                entry.expiring.remove(&second);
            }
        }
    }

    pub fn merge(&mut self, other: Counts) {
        for (ns, theirs) in other.0 {
            let ours = self.0.entry(ns).or_default();
            ours.stored += theirs.stored;
            for (second, n) in theirs.expiring {
                let total = ours.expiring.entry(second).or_default();
                *total += n;
                if *total == 0 {
                    ours.expiring.remove(&second);
                }
            }
        }
    }

    /// Claims live at `now` (milliseconds), per namespace that has any, sorted; a claim that
    /// expired within the current second still counts.
    pub fn live(&self, now: i64) -> Vec<(String, u64)> {
        let past = now.div_euclid(1000);
        let mut out: Vec<(String, u64)> = self
            .0
            .iter()
            .map(|(ns, c)| {
                let expired: i64 = c.expiring.range(..=past).map(|(_, n)| n).sum();
                (ns.to_string(), (c.stored - expired).max(0) as u64)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort();
        out
    }
}

/// How a model of the store counts: the same rule as [`Counts::live`] (a claim counts until the
/// second after its expiry has begun).
pub fn counts_at(expires_at: i64, now: i64) -> bool {
    expires_at == NEVER || second_of(expires_at) > now.div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_claims_stop_counting_without_a_sweep() {
        let mut counts = Counts::default();
        counts.add("a", NEVER, 1);
        counts.add("a", 10_500, 1);
        counts.add("a", 12_000, 1);
        counts.add("b", 10_500, 1);
        assert_eq!(counts.live(10_000), vec![("a".into(), 3), ("b".into(), 1)]);
        assert_eq!(counts.live(10_999), vec![("a".into(), 3), ("b".into(), 1)], "within the second");
        assert_eq!(counts.live(11_000), vec![("a".into(), 2)]);
        assert_eq!(counts.live(12_000), vec![("a".into(), 1)]);
        counts.add("a", 10_500, -1);
        assert_eq!(counts.live(0), vec![("a".into(), 2), ("b".into(), 1)]);
        for (exp, now) in [(10_500, 10_999), (10_500, 11_000), (12_000, 12_000), (12_000, 11_999)] {
            let mut one = Counts::default();
            one.add("x", exp, 1);
            assert_eq!(one.live(now).len() == 1, counts_at(exp, now), "{exp} at {now}");
        }
    }
}
