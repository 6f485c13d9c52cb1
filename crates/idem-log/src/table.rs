//! A map of random keys that costs little more than its entries: the index's tables.
//!
//! A hash table keeps its slots at most 7/8 full and doubles when it is: between doublings a
//! table of `n` entries holds from `8n/7` to `16n/7` slots, so a store of two million claims pays
//! for up to twice the entries it has. A [`Table`] keeps most entries in vectors sorted by key,
//! exactly as long as they need to be, and the entries changed since it was last sorted in a small
//! hash table (`recent`); when `recent` holds a 16th as many as the vectors, the two are merged
//! into new vectors. Keys are random (tags made by hashing): the vector is split into buckets of
//! equal ranges of keys, 64 entries each on average, with a 4-byte start per bucket; a key is
//! looked for where its value puts it within its bucket, and is there or a step or two away. Keys
//! that do not spread evenly still give right answers, found in more steps.
//!
//! Iteration is in a fixed order for a given sequence of changes (the vector's, then `recent`'s
//! with a fixed hasher), so that what a sweep picks is the same every run.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash};

use crate::index::TagHasher;

/// A key whose value is spread evenly over `u64` by [`Key::spread`], in the same order as `Ord`.
pub trait Key: Copy + Ord + Hash {
    fn spread(&self) -> u64;
}

impl Key for u64 {
    fn spread(&self) -> u64 {
        *self
    }
}

/// `recent` is merged into the vectors when it holds more than this share of them (and at least
/// [`FEW`] entries); while start-up replays the log, [`REPLAYING_SHARE`].
const SHARE: usize = 16;
const FEW: usize = 64;
/// Merging as usual, start-up waits on lookups in the larger vectors (10 million claims of three
/// parts: 20–23 s, against 16–17 with a quarter); put off until the end, every entry waits in
/// `recent`, and start-up's peak of memory is more than the hash tables' was (1.27 GB, where they
/// took 0.91; a quarter: 0.66–0.69).
const REPLAYING_SHARE: usize = 4;

thread_local! {
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (start-up's replay of the log) with this thread's tables merged less often;
/// [`Table::settle`] merges each at the end.
pub fn replaying<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            REPLAYING.set(false);
        }
    }
    REPLAYING.set(true);
    let _reset = Reset;
    f()
}

/// Entries per bucket, on average: the buckets' starts (a sixteenth of a byte per entry) stay in
/// the CPU's caches, and a key is found at the place predicted in its bucket, or a step or two
/// from it, in one or two cache lines.
const PER_BUCKET: usize = 64;

pub struct Table<K, V> {
    /// Sorted, without duplicates; `values[i]` is `keys[i]`'s. An entry whose key `recent` maps
    /// to `None` is removed. (Two vectors, not one of pairs: looking for a key that is not there,
    /// the common case of a new claim, reads keys only, packed three times as densely in the
    /// CPU's caches as a claim's 24-byte pairs.)
    keys: Vec<K>,
    values: Vec<V>,
    /// Entries added since the last merge (`Some`: never in `keys`) and removals of entries in
    /// `keys` (`None`).
    recent: HashMap<K, Option<V>, BuildHasherDefault<TagHasher>>,
    /// Where each bucket of keys starts in `keys`, and (last) its length: a key is found
    /// among the entries of its bucket. Empty until the first merge.
    buckets: Vec<u32>,
    removed: usize,
    len: usize,
}

impl<K, V> Default for Table<K, V> {
    fn default() -> Self {
        Self {
            keys: Vec::new(),
            values: Vec::new(),
            recent: HashMap::default(),
            buckets: Vec::new(),
            removed: 0,
            len: 0,
        }
    }
}

impl<K, V> std::fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("len", &self.len).field("sorted", &self.keys.len()).finish()
    }
}

impl<K: Key, V: Copy> Table<K, V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The range of `keys` holding `key`'s bucket (the buckets split `u64` evenly), and the place
    /// in it its value predicts (the bucket's end when it is empty); `None` before the first merge.
    fn bucket_of(&self, key: &K) -> Option<(usize, usize, usize)> {
        let count = self.buckets.len().checked_sub(1).filter(|c| *c > 0)?;
        let scaled = u128::from(key.spread()) * count as u128;
        let b = (scaled >> 64) as usize;
        let (lo, hi) = (self.buckets[b] as usize, self.buckets[b + 1] as usize);
        // How far into its bucket's range of keys the key is, as far into its entries.
        Some((lo, hi, lo + ((u128::from(scaled as u64) * (hi - lo) as u128) >> 64) as usize))
    }

    /// Where `key` is in `keys` (`Ok`), or where it would go (`Err`): in its bucket, at the
    /// place its value predicts there, or a few steps from it.
    fn find(&self, key: &K) -> Result<usize, usize> {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let keys = &self.keys;
        let Some((mut lo, mut hi, at)) = self.bucket_of(key) else { return Err(0) };
        if lo == hi {
            return Err(lo);
        }
        let mut step = 1;
        match keys[at].cmp(key) {
            Equal => return Ok(at),
            // Up from `at`, in steps that double until the key is passed.
            Less => {
                lo = at + 1;
                while lo + step < hi && keys[lo + step - 1] < *key {
                    lo += step;
                    step *= 2;
                }
                hi = hi.min(lo + step);
            }
            Greater => {
                hi = at;
                while hi > lo + step && keys[hi - step] > *key {
                    hi -= step;
                    step *= 2;
                }
                lo = lo.max(hi.saturating_sub(step));
            }
        }
        match keys[lo..hi].binary_search(key) {
            Ok(i) => Ok(lo + i),
            Err(i) => Err(lo + i),
        }
    }

    /// Reads the entry where `key` would be, and answers nothing of use: a batch's keys read this
    /// way one after another, without a dependency between them, have their cache misses overlap,
    /// and the lookups that follow find the entries in the CPU's caches.
    pub fn touch(&self, key: &K) -> u64 {
        self.bucket_of(key).and_then(|(_, _, at)| self.keys.get(at)).map_or(0, Key::spread)
    }

    pub fn get(&self, key: &K) -> Option<V> {
        match self.recent.get(key) {
            Some(entry) => *entry,
            None => self.find(key).ok().map(|i| self.values[i]),
        }
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`; answers what it was.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let mut revived = false;
        match self.recent.get(&key).copied() {
            Some(Some(_)) => return self.recent.insert(key, Some(value)).flatten(),
            Some(None) => {
                // Removed from `keys` since the last merge: back in its place there.
                self.recent.remove(&key);
                self.removed -= 1;
                revived = true;
            }
            None => {}
        }
        match self.find(&key) {
            Ok(i) => {
                let old = std::mem::replace(&mut self.values[i], value);
                if revived {
                    self.len += 1;
                    return None;
                }
                Some(old)
            }
            Err(_) => {
                self.recent.insert(key, Some(value));
                self.len += 1;
                self.merge_if_due();
                None
            }
        }
    }

    /// Removes `key`; answers what it was.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        match self.recent.get(key) {
            Some(Some(_)) => {
                self.len -= 1;
                return self.recent.remove(key).flatten();
            }
            Some(None) => return None,
            None => {}
        }
        let old = self.values[self.find(key).ok()?];
        self.recent.insert(*key, None);
        self.removed += 1;
        self.len -= 1;
        self.merge_if_due();
        Some(old)
    }

    /// Sets `key`'s entry to what `change` makes of it (`None`: absent), looking it up once.
    pub fn update(&mut self, key: K, change: impl FnOnce(Option<V>) -> Option<V>) {
        match self.recent.get(&key).copied() {
            Some(Some(old)) => match change(Some(old)) {
                Some(new) => {
                    self.recent.insert(key, Some(new));
                }
                None => {
                    self.recent.remove(&key);
                    self.len -= 1;
                }
            },
            Some(None) => {
                if let Some(new) = change(None) {
                    self.insert(key, new);
                }
            }
            None => match self.find(&key) {
                Ok(i) => match change(Some(self.values[i])) {
                    Some(new) => self.values[i] = new,
                    None => {
                        self.remove(&key);
                    }
                },
                Err(_) => {
                    if let Some(new) = change(None) {
                        self.recent.insert(key, Some(new));
                        self.len += 1;
                        self.merge_if_due();
                    }
                }
            },
        }
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = (K, V)> + '_ {
        let removed = self.removed;
        let sorted = self.keys.iter().copied().zip(self.values.iter().copied());
        let kept = sorted.filter(move |(k, _)| removed == 0 || !matches!(self.recent.get(k), Some(None)));
        kept.chain(self.recent.iter().filter_map(|(k, v)| v.map(|v| (*k, v))))
    }

    pub fn values(&self) -> impl Iterator<Item = V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Merges what changed since the last merge, if anything did, and gives back what `recent`
    /// holds (after start-up's replay, room for a quarter of the entries).
    pub fn settle(&mut self) {
        if !self.recent.is_empty() {
            self.merge();
        }
        self.recent = HashMap::default();
    }

    fn merge_if_due(&mut self) {
        let share = if REPLAYING.get() { REPLAYING_SHARE } else { SHARE };
        if self.recent.len() > FEW.max(self.keys.len() / share) {
            self.merge();
        }
    }

    /// Sorted vectors of every entry, of exactly their number; `recent` emptied (its allocation
    /// kept: it fills again). The removed entries leave first; then the added ones are put at the
    /// end and moved into place from the back, each moving the run of entries after it by one
    /// copy: a merge costs about a copy of the vectors, not a comparison per entry.
    fn merge(&mut self) {
        if self.removed > 0 {
            let mut kept = 0;
            for i in 0..self.keys.len() {
                if !matches!(self.recent.get(&self.keys[i]), Some(None)) {
                    (self.keys[kept], self.values[kept]) = (self.keys[i], self.values[i]);
                    kept += 1;
                }
            }
            self.keys.truncate(kept);
            self.values.truncate(kept);
        }
        let mut added: Vec<(K, V)> = self.recent.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).collect();
        added.sort_unstable_by_key(|a| a.0);
        let mut end = self.keys.len();
        self.keys.reserve_exact(added.len());
        self.values.reserve_exact(added.len());
        self.keys.extend(added.iter().map(|a| a.0));
        self.values.extend(added.iter().map(|a| a.1));
        // keys[..end] are the entries not yet in place; those after added[j] go after it.
        for (j, (key, value)) in added.iter().enumerate().rev() {
            // The run is short (a `SHARE`th of the entries are added): look back from its end.
            let mut step = 1;
            while step < end && self.keys[end - step] > *key {
                step *= 2;
            }
            let from = end.saturating_sub(step);
            let start = from + self.keys[from..end].partition_point(|k| k < key);
            self.keys.copy_within(start..end, start + j + 1);
            self.values.copy_within(start..end, start + j + 1);
            (self.keys[start + j], self.values[start + j]) = (*key, *value);
            end = start;
        }
        debug_assert_eq!(self.keys.len(), self.len);
        self.removed = 0;
        self.recent.clear();
        let count = (self.keys.len() / PER_BUCKET).max(1);
        self.buckets.clear();
        self.buckets.reserve_exact(count + 1);
        let mut at = 0;
        for b in 0..count {
            // The least value in bucket `b`: b · 2^64 / count, rounded up.
            let least = ((u128::from(b as u64) << 64).div_ceil(count as u128)) as u64;
            while at < self.keys.len() && self.keys[at].spread() < least {
                at += 1;
            }
            self.buckets.push(at as u32);
        }
        self.buckets.push(self.keys.len() as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        /// One more, or none if there were three (a count, as the index keeps them).
        Count(u64),
    }

    /// Keys from a small set (so that operations meet the same keys again), spread over `u64`;
    /// some clustered, so that the guess is often wrong.
    fn key() -> impl Strategy<Value = u64> {
        prop_oneof![(0u64..300).prop_map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15)), (0u64..50)]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key().prop_map(Op::Remove),
            2 => key().prop_map(Op::Count),
        ]
    }

    proptest! {
        #[test]
        fn answers_as_a_map_does(ops in prop::collection::vec(op(), 0..3000)) {
            let mut table = Table::default();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(table.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(table.remove(&k), model.remove(&k)),
                    Op::Count(k) => {
                        let count = |c: Option<u32>| match c {
                            Some(3) => None,
                            c => Some(c.unwrap_or(0).wrapping_add(1)),
                        };
                        table.update(k, count);
                        match count(model.get(&k).copied()) {
                            Some(c) => model.insert(k, c),
                            None => model.remove(&k),
                        };
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for k in (0u64..300).map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15)).chain(0..60) {
                prop_assert_eq!(table.get(&k), model.get(&k).copied());
            }
            let mut all: Vec<(u64, u32)> = table.iter().collect();
            all.sort_unstable();
            prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_replay_merges_less_often_and_settle_merges_the_rest() {
        let mut table = Table::default();
        replaying(|| {
            for k in 0..10_000u64 {
                table.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k);
            }
            table.remove(&0);
        });
        assert!(table.recent.len() > table.keys.len() / SHARE, "merged when a quarter waits");
        assert!(table.recent.len() <= FEW.max(table.keys.len() / REPLAYING_SHARE) + 1);
        table.settle();
        assert_eq!((table.keys.len(), table.recent.len(), table.len()), (9_999, 0, 9_999));
        assert_eq!(table.recent.capacity(), 0, "settled, recent is freed");
        assert_eq!(table.get(&0x9e37_79b9_7f4a_7c15), Some(1));
        assert!(!REPLAYING.get(), "merges are as usual when the replay is done");
    }

    #[test]
    fn holds_exactly_its_entries_once_merged() {
        let mut table = Table::default();
        for k in 0..100_000u64 {
            table.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k);
        }
        assert_eq!(table.len(), 100_000);
        assert!(table.recent.len() <= table.keys.len() / SHARE + 1);
        assert!(table.keys.capacity() <= table.len() && table.values.capacity() <= table.len(), "no slack");
        assert!(table.keys.windows(2).all(|w| w[0] < w[1]));
    }
}
