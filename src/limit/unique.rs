//! Unique-event sets for `unique=` and `per_addr` (exim-ratelimit.md §6):
//! Exim's Bloom filter bit for bit, and an exact set as an alternative.

use md5::{Digest, Md5};
use std::collections::HashSet;

/// Largest Bloom filter floodgate allocates, in bytes. Exim's `(int)` cast of
/// m is undefined for huge limits; floodgate caps the size here instead.
pub const MAX_BLOOM_BYTES: usize = 1 << 20;

/// Most entries an exact set keeps. Beyond it new values are not
/// remembered, so they keep counting (over-counting, never under-counting).
pub const MAX_EXACT_ENTRIES: usize = 1 << 16;

/// Which kind of set a unique limit keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UniqueKind {
    /// Exim's Bloom filter (default; identical answers to Exim).
    #[default]
    Bloom,
    /// An exact set of the event texts (no false positives, more memory).
    Exact,
}

/// Exim's filter size for limit `m`: `max(40, 2 · trunc(m))` bytes (capped).
pub fn bloom_size(limit: f64) -> usize {
    let m = if limit.is_nan() { 0.0 } else { limit.trunc() };
    let twice = 2.0 * m;
    if twice >= MAX_BLOOM_BYTES as f64 {
        MAX_BLOOM_BYTES
    } else {
        (twice.max(0.0) as usize).max(40)
    }
}

/// The 8 (byte index, bit mask) probes Exim uses for `text` in a filter of `size` bytes.
pub fn bloom_probes(text: &[u8], size: usize) -> [(usize, u8); 8] {
    let digest = Md5::digest(text);
    let h1 = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let h2 = u32::from_le_bytes([digest[4], digest[5], digest[6], digest[7]]);
    let mut out = [(0usize, 0u8); 8];
    let mut h = h1;
    for slot in &mut out {
        *slot = ((h / 8) as usize % size, 1u8 << (h % 8));
        h = h.wrapping_add(h2);
    }
    out
}

/// A unique-event set: Exim's Bloom filter or an exact set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UniqueSet {
    /// Bloom filter bytes; the length is fixed until the set is replaced.
    Bloom(Box<[u8]>),
    /// Exact set of event texts.
    Exact(HashSet<Box<str>>),
}

impl UniqueSet {
    /// An empty set of `kind`, sized from the limit `limit` (Bloom only).
    pub fn new(kind: UniqueKind, limit: f64) -> UniqueSet {
        match kind {
            UniqueKind::Bloom => UniqueSet::Bloom(vec![0u8; bloom_size(limit)].into_boxed_slice()),
            UniqueKind::Exact => UniqueSet::Exact(HashSet::new()),
        }
    }

    /// Whether `text` counts as already seen (Bloom: all 8 bits set).
    pub fn contains(&self, text: &str) -> bool {
        match self {
            UniqueSet::Bloom(bits) => bloom_probes(text.as_bytes(), bits.len())
                .iter()
                .all(|&(byte, mask)| bits[byte] & mask != 0),
            UniqueSet::Exact(set) => set.contains(text),
        }
    }

    /// Adds `text` (Bloom: sets its 8 bits). Returns whether it was already seen.
    pub fn insert(&mut self, text: &str) -> bool {
        match self {
            UniqueSet::Bloom(bits) => {
                let mut seen = true;
                for (byte, mask) in bloom_probes(text.as_bytes(), bits.len()) {
                    if bits[byte] & mask == 0 {
                        bits[byte] |= mask;
                        seen = false;
                    }
                }
                seen
            }
            UniqueSet::Exact(set) => {
                if set.contains(text) {
                    true
                } else {
                    if set.len() < MAX_EXACT_ENTRIES {
                        set.insert(text.into());
                    }
                    false
                }
            }
        }
    }

    /// The kind of this set.
    pub fn kind(&self) -> UniqueKind {
        match self {
            UniqueSet::Bloom(_) => UniqueKind::Bloom,
            UniqueSet::Exact(_) => UniqueKind::Exact,
        }
    }

    /// Approximate heap bytes held by the set.
    pub fn heap_bytes(&self) -> usize {
        match self {
            UniqueSet::Bloom(bits) => bits.len(),
            UniqueSet::Exact(set) => {
                set.iter().map(|s| s.len() + 24).sum::<usize>() + set.capacity()
            }
        }
    }
}

/// Exim's reset rule: a set created at `created_s` is replaced when
/// `now_s > created_s + p` (whole seconds, strictly greater).
pub fn set_expired(created_s: i64, now_s: i64, period_secs: u32) -> bool {
    now_s > created_s + i64::from(period_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(bloom_size(4.0), 40);
        assert_eq!(bloom_size(100.0), 200);
        assert_eq!(bloom_size(20.9), 40);
        assert_eq!(bloom_size(21.0), 42);
        assert_eq!(bloom_size(0.0), 40);
        assert_eq!(bloom_size(f64::NAN), 40);
        assert_eq!(bloom_size(f64::INFINITY), MAX_BLOOM_BYTES);
    }

    #[test]
    fn exact_set() {
        let mut s = UniqueSet::new(UniqueKind::Exact, 3.0);
        assert!(!s.insert("a"));
        assert!(s.insert("a"));
        assert!(s.contains("a"));
        assert!(!s.contains("A"));
    }

    #[test]
    fn reset_rule() {
        assert!(!set_expired(0, 60, 60));
        assert!(set_expired(0, 61, 60));
    }
}
