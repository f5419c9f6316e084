//! An open-addressing hash table of records keyed by [`KeyId`], with the
//! record and its key text pointer inline in the slot.
//!
//! Why not `std::collections::HashMap`: a lookup there touches a control
//! byte group and then the slot, two cache misses per decision at a million
//! keys, and its capacity is a power of two times 7/8, so a table can sit at
//! 44 % load (a million keys over 64 shards lands exactly there). This table
//! is Robin Hood linear probing over one array of slots: a lookup reads the
//! home slot and usually the next one or two (adjacent memory), compares the
//! 128-bit ids in place, and stops early on a miss. The capacity is any
//! number (position = high half of `id.lo * capacity`) and grows by a
//! quarter at 7/8 load, so the load stays between 0.7 and 0.875 once a
//! table holds more than a few records.

use super::key::{KeyId, ThinKey};

/// Grow when the load would exceed `MAX_LOAD_NUM / MAX_LOAD_DEN`.
const MAX_LOAD_NUM: usize = 7;
const MAX_LOAD_DEN: usize = 8;

/// One stored record.
pub(crate) struct Entry<V> {
    /// The key's identity.
    pub(crate) id: KeyId,
    /// The key text (for snapshots and iteration only).
    pub(crate) text: ThinKey,
    /// The record.
    pub(crate) value: V,
}

/// A Robin Hood hash table from [`KeyId`] to `V`.
pub(crate) struct Table<V> {
    // `Option<Entry<V>>` is the size of `Entry<V>`: `ThinKey` is a non-null
    // pointer, so `None` takes its niche.
    slots: Box<[Option<Entry<V>>]>,
    len: usize,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            slots: Box::new([]),
            len: 0,
        }
    }
}

impl<V> Table<V> {
    /// Number of records.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The home slot of `id` in a table of `cap` slots (`cap > 0`).
    #[inline]
    fn home(id: &KeyId, cap: usize) -> usize {
        ((u128::from(id.lo) * cap as u128) >> 64) as usize
    }

    /// How far slot `i` is from `home`, going forward with wrap-around.
    #[inline]
    fn distance(i: usize, home: usize, cap: usize) -> usize {
        if i >= home {
            i - home
        } else {
            i + cap - home
        }
    }

    /// The slot index holding `id`.
    #[inline]
    fn find(&self, id: &KeyId) -> Option<usize> {
        let cap = self.slots.len();
        if cap == 0 {
            return None;
        }
        let mut i = Self::home(id, cap);
        let mut d = 0;
        loop {
            let e = self.slots[i].as_ref()?;
            if e.id == *id {
                return Some(i);
            }
            // Robin Hood invariant: had `id` been stored, it would sit
            // before any slot whose record is closer to its own home.
            if Self::distance(i, Self::home(&e.id, cap), cap) < d {
                return None;
            }
            d += 1;
            i += 1;
            if i == cap {
                i = 0;
            }
        }
    }

    /// The record of `id`.
    #[inline]
    pub(crate) fn get(&self, id: &KeyId) -> Option<&V> {
        let i = self.find(id)?;
        self.slots[i].as_ref().map(|e| &e.value)
    }

    /// The record of `id`, mutable.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &KeyId) -> Option<&mut V> {
        let i = self.find(id)?;
        self.slots[i].as_mut().map(|e| &mut e.value)
    }

    /// Whether `id` is stored.
    pub(crate) fn contains(&self, id: &KeyId) -> bool {
        self.find(id).is_some()
    }

    /// Stores `value` under `id`, copying `text` only when the key is new;
    /// returns whether it was new.
    pub(crate) fn upsert(&mut self, id: KeyId, text: &str, value: V) -> bool {
        match self.get_mut(&id) {
            Some(slot) => {
                *slot = value;
                false
            }
            None => {
                self.insert_new(Entry {
                    id,
                    text: ThinKey::new(text),
                    value,
                });
                true
            }
        }
    }

    /// Inserts an entry whose id is not in the table.
    fn insert_new(&mut self, entry: Entry<V>) {
        if (self.len + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            let cap = self.slots.len();
            // Grow by a quarter (amortised O(1) moves per insert) so that
            // the load never drops much below 0.7, even in small tables.
            let next = (cap + cap / 4 + 1).max(8);
            self.rebuild(next);
        }
        self.place(entry);
        self.len += 1;
    }

    /// Puts `entry` in its Robin Hood position; there is a free slot.
    fn place(&mut self, mut entry: Entry<V>) {
        let cap = self.slots.len();
        let mut i = Self::home(&entry.id, cap);
        let mut d = 0;
        loop {
            match &mut self.slots[i] {
                free @ None => {
                    *free = Some(entry);
                    return;
                }
                Some(cur) => {
                    let cd = Self::distance(i, Self::home(&cur.id, cap), cap);
                    if cd < d {
                        std::mem::swap(cur, &mut entry);
                        d = cd;
                    }
                }
            }
            d += 1;
            i += 1;
            if i == cap {
                i = 0;
            }
        }
    }

    /// Moves every entry into a fresh array of `cap` slots.
    fn rebuild(&mut self, cap: usize) {
        let old = std::mem::replace(&mut self.slots, Self::empty_slots(cap));
        for e in old.into_vec().into_iter().flatten() {
            self.place(e);
        }
    }

    fn empty_slots(cap: usize) -> Box<[Option<Entry<V>>]> {
        std::iter::repeat_with(|| None).take(cap).collect()
    }

    /// Removes `id`; returns its record.
    pub(crate) fn remove(&mut self, id: &KeyId) -> Option<V> {
        let mut i = self.find(id)?;
        let cap = self.slots.len();
        let out = self.slots[i].take().map(|e| e.value);
        self.len -= 1;
        // Backward shift: pull following displaced records one slot closer
        // to home until a free slot or a record at its home.
        loop {
            let j = if i + 1 == cap { 0 } else { i + 1 };
            let shift = match &self.slots[j] {
                Some(e) => Self::distance(j, Self::home(&e.id, cap), cap) > 0,
                None => false,
            };
            if !shift {
                return out;
            }
            self.slots[i] = self.slots[j].take();
            i = j;
        }
    }

    /// Keeps the records for which `keep` is true; shrinks the table when
    /// many were dropped.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        let before = self.len;
        let mut kept: Vec<Entry<V>> = Vec::new();
        for slot in self.slots.iter_mut() {
            if let Some(e) = slot {
                if !keep(&mut e.value) {
                    *slot = None;
                    self.len -= 1;
                }
            }
        }
        if self.len == before {
            return;
        }
        // Re-place the survivors: removing in place would break the
        // Robin Hood chains. Size so the load is about 0.8 again.
        for slot in self.slots.iter_mut() {
            if let Some(e) = slot.take() {
                kept.push(e);
            }
        }
        let cap = if kept.is_empty() {
            0
        } else {
            (kept.len() * 5 / 4 + 1).max(8)
        };
        self.slots = Self::empty_slots(cap);
        for e in kept {
            self.place(e);
        }
    }

    /// Removes every record and frees the slots.
    pub(crate) fn clear(&mut self) {
        self.slots = Box::new([]);
        self.len = 0;
    }

    /// Every entry, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry<V>> {
        self.slots.iter().flatten()
    }

    /// Every record, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|e| &e.value)
    }

    /// Heap bytes: the slot array plus the key texts (not what `V` owns).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<Option<Entry<V>>>()
            + self.iter().map(|e| e.text.heap_bytes()).sum::<usize>()
    }

    /// Checks the Robin Hood invariants (tests only).
    #[cfg(test)]
    fn check(&self) {
        let cap = self.slots.len();
        assert_eq!(self.iter().count(), self.len);
        if cap == 0 {
            return;
        }
        assert!(self.len < cap, "at least one free slot");
        for i in 0..cap {
            let j = if i + 1 == cap { 0 } else { i + 1 };
            if let Some(b) = &self.slots[j] {
                let db = Self::distance(j, Self::home(&b.id, cap), cap);
                let da = match &self.slots[i] {
                    Some(a) => Self::distance(i, Self::home(&a.id, cap), cap),
                    None => {
                        assert_eq!(db, 0, "a record after a free slot is at home");
                        continue;
                    }
                };
                assert!(db <= da + 1, "probe distances grow by at most one");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn id(n: u64) -> KeyId {
        KeyId::of(&n.to_string())
    }

    #[test]
    fn insert_get_remove() {
        let mut t: Table<u64> = Table::default();
        assert_eq!(t.get(&id(1)), None);
        assert!(t.upsert(id(1), "1", 10));
        assert!(!t.upsert(id(1), "1", 11));
        assert_eq!(t.get(&id(1)), Some(&11));
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove(&id(1)), Some(11));
        assert_eq!(t.remove(&id(1)), None);
        assert_eq!(t.len(), 0);
        t.check();
    }

    #[test]
    fn load_stays_high_after_growth() {
        let mut t: Table<u64> = Table::default();
        for n in 0..100_000u64 {
            t.upsert(id(n), &n.to_string(), n);
            if n > 100 {
                let load = t.len() as f64 / t.capacity() as f64;
                assert!((0.69..=0.875).contains(&load), "load {load} at {n}");
            }
        }
        t.check();
        for n in 0..100_000u64 {
            assert_eq!(t.get(&id(n)), Some(&n));
        }
        let texts: usize = t
            .iter()
            .filter(|e| e.text.as_str() == e.value.to_string())
            .count();
        assert_eq!(texts, 100_000);
    }

    #[test]
    fn retain_shrinks_and_keeps() {
        let mut t: Table<u64> = Table::default();
        for n in 0..5000u64 {
            t.upsert(id(n), "", n);
        }
        t.retain(|v| *v % 10 == 0);
        t.check();
        assert_eq!(t.len(), 500);
        assert!(t.capacity() < 1000);
        for n in 0..5000u64 {
            assert_eq!(t.contains(&id(n)), n % 10 == 0);
        }
        t.retain(|_| false);
        assert_eq!(t.len(), 0);
        assert_eq!(t.capacity(), 0);
        assert!(t.upsert(id(3), "3", 3));
        t.clear();
        assert_eq!(t.get(&id(3)), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(u16, u32),
        Remove(u16),
        Retain(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..400, any::<u32>()).prop_map(|(k, v)| Op::Upsert(k, v)),
            3 => (0u16..400).prop_map(Op::Remove),
            1 => (2u8..5).prop_map(Op::Retain),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The table behaves like a HashMap under any sequence of operations.
        #[test]
        fn matches_a_hash_map(ops in proptest::collection::vec(op(), 0..600)) {
            let mut t: Table<u32> = Table::default();
            let mut m: HashMap<u16, u32> = HashMap::new();
            for o in ops {
                match o {
                    Op::Upsert(k, v) => {
                        let new = t.upsert(id(u64::from(k)), &k.to_string(), v);
                        prop_assert_eq!(new, m.insert(k, v).is_none());
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(t.remove(&id(u64::from(k))), m.remove(&k));
                    }
                    Op::Retain(d) => {
                        t.retain(|v| *v % u32::from(d) != 0);
                        m.retain(|_, v| *v % u32::from(d) != 0);
                    }
                }
                prop_assert_eq!(t.len(), m.len());
            }
            t.check();
            for k in 0..400u16 {
                prop_assert_eq!(t.get(&id(u64::from(k))), m.get(&k));
            }
            for e in t.iter() {
                let k: u16 = e.text.as_str().parse().unwrap();
                prop_assert_eq!(m.get(&k), Some(&e.value));
            }
        }
    }
}
