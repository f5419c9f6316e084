//! The client sessions the policy service follows, bounded in number and in idle time.
//!
//! Postfix never says that a session or a transaction ended without a message: the client
//! may QUIT after its recipients, or Postfix may refuse them after floodgate said `DUNNO`.
//! An entry idle for [`IDLE`] is dropped (its open transaction abandoned: what it reserved
//! is released, nothing it did not send is charged), and past [`MAX_SESSIONS`] the entry
//! idle longest goes first.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most sessions followed at once.
pub const MAX_SESSIONS: usize = 50_000;
/// How long an entry stays without a request: longer than Postfix's `smtpd_timeout`
/// (300s by default) between two commands of one client.
pub const IDLE: Duration = Duration::from_secs(600);

/// Entries of type `T` by session, each with the time of its last request.
pub struct Table<T> {
    entries: HashMap<String, (T, Instant)>,
    max: usize,
    idle: Duration,
}

impl<T> Table<T> {
    /// An empty table of at most `max` entries, each dropped after `idle`.
    pub fn new(max: usize, idle: Duration) -> Table<T> {
        Table {
            entries: HashMap::new(),
            max,
            idle,
        }
    }

    /// Takes the entry of `session` out (the caller puts it back when its request is
    /// answered); `None` when there is none or it was idle too long (then dropped).
    pub fn take(&mut self, session: &str, now: Instant) -> Option<T> {
        let (entry, last) = self.entries.remove(session)?;
        (now.saturating_duration_since(last) < self.idle).then_some(entry)
    }

    /// Puts the entry of `session` (back) with `now` as its last request; the entries idle
    /// too long are dropped, and the one idle longest when the table is full. Hands back
    /// the entries dropped, for the caller to end them.
    pub fn put(&mut self, session: String, entry: T, now: Instant) -> Vec<T> {
        let mut dropped = Vec::new();
        if self.entries.len() >= self.max {
            let idle = self.idle;
            let stale: Vec<String> = self
                .entries
                .iter()
                .filter(|(_, (_, last))| now.saturating_duration_since(*last) >= idle)
                .map(|(k, _)| k.clone())
                .collect();
            for k in stale {
                dropped.extend(self.entries.remove(&k).map(|(e, _)| e));
            }
        }
        if self.entries.len() >= self.max {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                dropped.extend(self.entries.remove(&k).map(|(e, _)| e));
            }
        }
        self.entries.insert(session, (entry, now));
        dropped
    }

    /// Drops the entries idle too long; hands them back.
    pub fn expire(&mut self, now: Instant) -> Vec<T> {
        let idle = self.idle;
        let stale: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, (_, last))| now.saturating_duration_since(*last) >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        stale
            .into_iter()
            .filter_map(|k| self.entries.remove(&k).map(|(e, _)| e))
            .collect()
    }

    /// Entries followed now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is followed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn idle_entries_are_not_given_back() {
        let t0 = Instant::now();
        let mut t = Table::new(4, Duration::from_secs(10));
        t.put("a".into(), 1, t0);
        assert_eq!(t.take("a", t0 + Duration::from_secs(9)), Some(1));
        t.put("a".into(), 1, t0);
        assert_eq!(t.take("a", t0 + Duration::from_secs(10)), None);
        assert!(t.is_empty());
        t.put("b".into(), 2, t0);
        assert_eq!(t.expire(t0 + Duration::from_secs(11)), vec![2]);
    }

    #[test]
    fn a_full_table_drops_the_longest_idle() {
        let t0 = Instant::now();
        let mut t = Table::new(2, Duration::from_secs(100));
        t.put("a".into(), 1, t0);
        t.put("b".into(), 2, t0 + Duration::from_secs(1));
        assert_eq!(t.put("c".into(), 3, t0 + Duration::from_secs(2)), vec![1]);
        assert_eq!(t.len(), 2);
    }

    proptest! {
        /// However sessions come and go, the table never holds more than its cap, and
        /// every entry put is either in it or handed back.
        #[test]
        fn bounded_and_nothing_lost(ops in proptest::collection::vec((0u8..20, 0u64..50), 0..200)) {
            let t0 = Instant::now();
            let mut t = Table::new(5, Duration::from_secs(30));
            let mut put = 0usize;
            let mut out = 0usize;
            for (i, (s, secs)) in ops.into_iter().enumerate() {
                let now = t0 + Duration::from_secs(secs + i as u64);
                if t.take(&s.to_string(), now).is_some() {
                    out += 1;
                }
                let before = t.len();
                let dropped = t.put(s.to_string(), i, now);
                put += 1;
                out += dropped.len();
                prop_assert!(t.len() <= 5);
                prop_assert!(t.len() <= before + 1);
            }
            // Entries taken idle were dropped by take: count what is left.
            prop_assert!(out + t.len() <= put);
        }
    }
}
