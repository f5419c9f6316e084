//! Each node's local copy of the restricted set, so that a restriction never lapses while
//! Redis cannot be read or written. Without I/O: the failover store feeds it what Redis
//! answered and asks it what to do while Redis does not answer.
//!
//! The copy holds two maps:
//!
//! * **shared**: the set as Redis last listed it (the sweep lists it every second), with the
//!   restrictions and releases this node made in Redis since;
//! * **pending**: restrictions this node made while Redis could not be written, with their
//!   own times (the local clock), to be recorded in Redis when it answers again.
//!
//! While Redis cannot be read, a key of either map in force is restricted as Redis would
//! say; while it answers, Redis is asked and only the pending restrictions are checked here
//! first (Redis does not know them yet). An entry whose `until` has passed stops
//! restricting at once and is removed by [`RestrictedCopy::purge`].
//!
//! When Redis answers again a pending restriction is recorded with its original times,
//! reason and evidence, unless (see [`Recorded`]) Redis holds a restriction of the key in
//! force (that one stays), the key was released in Redis at or after the restriction's
//! `since` (the release wins: it was made later, or by someone who saw the key restricted),
//! or its `until` has passed. A shared entry that a listing no longer shows, while it is in
//! force by this node's clock, is either released or ended in Redis (then recording it is
//! refused for the same reasons) or lost by Redis (a restart without persistence, a
//! failover to a replica that missed it): it is moved to pending, so the next recording puts
//! it back, or learns that it was released.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use crate::store::Restriction;

/// What recording a pending restriction in Redis did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Recorded as it was: Redis now holds it.
    Recorded(Restriction),
    /// Redis holds another restriction of the key in force; that one stays.
    Kept(Restriction),
    /// The key was released in Redis at or after the restriction began (this time,
    /// microseconds since the epoch, the server's clock): not recorded.
    Released(i64),
    /// Its `until` had passed by the server's clock: not recorded.
    Expired,
}

impl Recorded {
    /// The label of the outcome (metrics, logs).
    pub fn label(&self) -> &'static str {
        match self {
            Recorded::Recorded(_) => "recorded",
            Recorded::Kept(_) => "kept",
            Recorded::Released(_) => "released",
            Recorded::Expired => "expired",
        }
    }
}

#[derive(Debug, Default)]
struct State {
    shared: HashMap<String, Restriction>,
    pending: BTreeMap<String, Restriction>,
    /// Counts this node's own changes to `shared`.
    seq: u64,
    /// Keys this node changed in `shared`, with the `seq` of the last change: a listing
    /// asked for before a change must not undo it.
    touched: HashMap<String, u64>,
}

impl State {
    fn touch(&mut self, key: &str) {
        self.seq += 1;
        self.touched.insert(key.to_string(), self.seq);
    }

    fn in_force<'a>(
        map: impl Fn(&str) -> Option<&'a Restriction>,
        keys: &[String],
        now_us: i64,
    ) -> Option<Restriction> {
        keys.iter()
            .filter_map(|k| map(k))
            .find(|r| !r.expired(now_us))
            .cloned()
    }
}

/// The local copy of the restricted set (see the module's documentation).
#[derive(Debug, Default)]
pub struct RestrictedCopy {
    state: RwLock<State>,
    /// Entries of both maps (the check's fast path).
    len: AtomicUsize,
    /// Entries of `pending`.
    pending_len: AtomicUsize,
}

impl RestrictedCopy {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, s: &State) {
        self.len
            .store(s.shared.len() + s.pending.len(), Ordering::Release);
        self.pending_len.store(s.pending.len(), Ordering::Release);
    }

    /// Whether the copy holds nothing (one atomic load).
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// How many restrictions wait to be recorded in Redis.
    pub fn pending_len(&self) -> usize {
        self.pending_len.load(Ordering::Acquire)
    }

    /// The restriction in force at `now_us` on the first of `keys` that has one in either
    /// map (a pending one first): the answer while Redis cannot be read.
    pub fn check(&self, keys: &[String], now_us: i64) -> Option<Restriction> {
        if self.is_empty() {
            return None;
        }
        let s = self.read();
        keys.iter().find_map(|k| {
            State::in_force(|k| s.pending.get(k), std::slice::from_ref(k), now_us)
                .or_else(|| State::in_force(|k| s.shared.get(k), std::slice::from_ref(k), now_us))
        })
    }

    /// The pending restriction in force at `now_us` on the first of `keys` that has one:
    /// checked before Redis is asked, which does not know it yet.
    pub fn check_pending(&self, keys: &[String], now_us: i64) -> Option<Restriction> {
        if self.pending_len() == 0 {
            return None;
        }
        let s = self.read();
        State::in_force(|k| s.pending.get(k), keys, now_us)
    }

    /// Restricts `r.key` on this node at `now_us` for `dur` µs (`None`: until released), to
    /// be recorded in Redis later. With `keep`, a restriction of the key in force (in either
    /// map) stays and is answered instead; answers the restriction in force and whether this
    /// call made it.
    pub fn restrict_here(
        &self,
        mut r: Restriction,
        dur: Option<i64>,
        keep: bool,
        now_us: i64,
    ) -> (Restriction, bool) {
        let mut s = self.write();
        if keep {
            let key = std::slice::from_ref(&r.key);
            let old = State::in_force(|k| s.pending.get(k), key, now_us)
                .or_else(|| State::in_force(|k| s.shared.get(k), key, now_us));
            if let Some(old) = old {
                return (old, false);
            }
        }
        r.since_us = now_us;
        r.until_us = dur.map(|d| now_us.saturating_add(d));
        s.pending.insert(r.key.clone(), r.clone());
        self.count(&s);
        (r, true)
    }

    /// Redis holds `r` (this node wrote it, or found it there when recording): it is shared,
    /// and no longer pending.
    pub fn learn(&self, r: Restriction) {
        let mut s = self.write();
        s.pending.remove(&r.key);
        s.touch(&r.key);
        s.shared.insert(r.key.clone(), r);
        self.count(&s);
    }

    /// This node released `key` in Redis: gone from both maps.
    pub fn forget(&self, key: &str) {
        let mut s = self.write();
        s.pending.remove(key);
        s.shared.remove(key);
        s.touch(key);
        self.count(&s);
    }

    /// Ends a pending restriction of `key` in force at `now_us` (one Redis never knew);
    /// answers it.
    pub fn release_pending(&self, key: &str, now_us: i64) -> Option<Restriction> {
        let mut s = self.write();
        if s.pending.get(key).is_none_or(|r| r.expired(now_us)) {
            return None;
        }
        let r = s.pending.remove(key);
        self.count(&s);
        r
    }

    /// Whether `key` has a shared restriction in force at `now_us` (one Redis holds).
    pub fn is_shared(&self, key: &str, now_us: i64) -> bool {
        self.read()
            .shared
            .get(key)
            .is_some_and(|r| !r.expired(now_us))
    }

    /// Marks the start of a listing of Redis; pass the answer to [`RestrictedCopy::refresh`].
    pub fn begin_refresh(&self) -> u64 {
        self.read().seq
    }

    /// Replaces the shared map with `listed` (every restriction in force in Redis, asked
    /// for when [`RestrictedCopy::begin_refresh`] answered `start`), keeping this node's own
    /// changes made since. A shared entry in force at `now_us` that the listing lacks moves
    /// to pending (see the module's documentation); answers how many did.
    pub fn refresh(&self, start: u64, listed: Vec<Restriction>, now_us: i64) -> usize {
        let mut s = self.write();
        let mut shared: HashMap<String, Restriction> =
            listed.into_iter().map(|r| (r.key.clone(), r)).collect();
        let touched: Vec<(String, u64)> = s
            .touched
            .iter()
            .filter(|(_, &seq)| seq > start)
            .map(|(k, &seq)| (k.clone(), seq))
            .collect();
        for (k, _) in &touched {
            match s.shared.get(k) {
                Some(r) => shared.insert(k.clone(), r.clone()),
                None => shared.remove(k),
            };
        }
        let old = std::mem::take(&mut s.shared);
        let mut missing = 0;
        for (k, r) in old {
            if shared.contains_key(&k) || r.expired(now_us) || s.pending.contains_key(&k) {
                continue;
            }
            s.pending.insert(k, r);
            missing += 1;
        }
        s.shared = shared;
        s.touched = touched.into_iter().collect();
        self.count(&s);
        missing
    }

    /// The pending restrictions in force at `now_us`, to record in Redis.
    pub fn pending(&self, now_us: i64) -> Vec<Restriction> {
        if self.pending_len() == 0 {
            return Vec::new();
        }
        self.read()
            .pending
            .values()
            .filter(|r| !r.expired(now_us))
            .cloned()
            .collect()
    }

    /// Applies what recording the pending restriction `sent` did. A pending restriction of
    /// the key made since `sent` was read (a new one by hand) stays pending.
    pub fn settle(&self, sent: &Restriction, outcome: &Recorded) {
        let mut s = self.write();
        let same = s
            .pending
            .get(&sent.key)
            .is_some_and(|p| p.since_us == sent.since_us && p.until_us == sent.until_us);
        match outcome {
            Recorded::Recorded(r) | Recorded::Kept(r) => {
                if same {
                    s.pending.remove(&sent.key);
                }
                s.touch(&r.key);
                s.shared.insert(r.key.clone(), r.clone());
            }
            Recorded::Released(_) | Recorded::Expired => {
                if same {
                    s.pending.remove(&sent.key);
                }
                s.shared.remove(&sent.key);
                s.touch(&sent.key);
            }
        }
        self.count(&s);
    }

    /// Removes every entry over at `now_us`; answers the pending ones (Redis never knew
    /// them, so this node tells of their end). Shared ones end in Redis, whose sweep tells.
    pub fn purge(&self, now_us: i64) -> Vec<Restriction> {
        if self.is_empty() {
            return Vec::new();
        }
        {
            let s = self.read();
            if !s
                .pending
                .values()
                .chain(s.shared.values())
                .any(|r| r.expired(now_us))
            {
                return Vec::new();
            }
        }
        let mut s = self.write();
        s.shared.retain(|_, r| !r.expired(now_us));
        let gone: Vec<String> = s
            .pending
            .values()
            .filter(|r| r.expired(now_us))
            .map(|r| r.key.clone())
            .collect();
        let out = gone.iter().filter_map(|k| s.pending.remove(k)).collect();
        self.count(&s);
        out
    }

    /// Every restriction in force at `now_us`, by key (a pending one over a shared one).
    pub fn list(&self, now_us: i64) -> Vec<Restriction> {
        let s = self.read();
        let mut all: BTreeMap<&str, &Restriction> = s
            .shared
            .iter()
            .filter(|(_, r)| !r.expired(now_us))
            .map(|(k, r)| (k.as_str(), r))
            .collect();
        for (k, r) in s.pending.iter().filter(|(_, r)| !r.expired(now_us)) {
            all.insert(k, r);
        }
        all.into_values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(key: &str, since_us: i64, until_us: Option<i64>) -> Restriction {
        Restriction {
            key: key.into(),
            limit: "per-user".into(),
            since_us,
            until_us,
            rate: Some(6.0),
            limit_text: "5 / 1h".into(),
            by: "limit per-user on a".into(),
            reason: "rate".into(),
            evidence: serde_json::json!({"messages": 6}),
        }
    }

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_listed_restriction_restricts_while_redis_is_away_until_it_ends() {
        let c = RestrictedCopy::default();
        assert!(c.check(&keys(&["alice"]), 0).is_none());
        let start = c.begin_refresh();
        c.refresh(
            start,
            vec![r("alice", 10, None), r("bob", 10, Some(1_000))],
            20,
        );
        assert_eq!(c.check(&keys(&["x", "alice"]), 500).unwrap().key, "alice");
        assert_eq!(c.check(&keys(&["bob"]), 999).unwrap().key, "bob");
        // bob's 24h (here: 1000 µs) is over: no longer restricted, then purged silently
        // (Redis' own sweep tells of a shared restriction's end).
        assert!(c.check(&keys(&["bob"]), 1_000).is_none());
        assert!(c.purge(1_000).is_empty());
        assert_eq!(c.list(1_000).len(), 1);
        // Shared ones are never "pending": Redis knows them.
        assert!(c.check_pending(&keys(&["alice"]), 1_000).is_none());
        assert!(c.pending(1_000).is_empty());
    }

    #[test]
    fn a_restriction_made_here_is_pending_until_recorded() {
        let c = RestrictedCopy::default();
        let (a, made) = c.restrict_here(r("alice", 0, None), Some(5_000), true, 100);
        assert!(made);
        assert_eq!((a.since_us, a.until_us), (100, Some(5_100)));
        // A second restriction of the key keeps the first.
        let (again, made) = c.restrict_here(r("alice", 0, None), None, true, 200);
        assert!(!made);
        assert_eq!(again, a);
        assert_eq!(c.check_pending(&keys(&["alice"]), 300), Some(a.clone()));
        assert_eq!(c.pending(300), vec![a.clone()]);
        // Recorded: shared from now on, nothing pending.
        c.settle(&a, &Recorded::Recorded(a.clone()));
        assert!(c.pending(300).is_empty());
        assert_eq!(c.pending_len(), 0);
        assert_eq!(c.check(&keys(&["alice"]), 300), Some(a.clone()));
        assert!(c.is_shared("alice", 300));
    }

    #[test]
    fn recording_respects_what_redis_says() {
        let c = RestrictedCopy::default();
        let (a, _) = c.restrict_here(r("alice", 0, None), None, true, 100);
        let (b, _) = c.restrict_here(r("bob", 0, None), None, true, 100);
        let (d, _) = c.restrict_here(r("dave", 0, None), Some(10), true, 100);
        // Redis held another restriction of alice: it stays and is what the copy holds.
        let theirs = r("alice", 50, None);
        c.settle(&a, &Recorded::Kept(theirs.clone()));
        assert_eq!(c.check(&keys(&["alice"]), 200), Some(theirs));
        // bob was released in Redis after his restriction began: free.
        c.settle(&b, &Recorded::Released(150));
        assert!(c.check(&keys(&["bob"]), 200).is_none());
        c.settle(&d, &Recorded::Expired);
        assert_eq!(c.pending_len(), 0);
        let listed: Vec<String> = c.list(200).into_iter().map(|r| r.key).collect();
        assert_eq!(listed, ["alice"]);
        assert_eq!(Recorded::Released(1).label(), "released");
    }

    #[test]
    fn a_restriction_made_while_recording_stays_pending() {
        let c = RestrictedCopy::default();
        let (a, _) = c.restrict_here(r("alice", 0, None), None, true, 100);
        // Replaced (by hand) while the first was being recorded.
        let (newer, _) = c.restrict_here(r("alice", 0, None), Some(99), false, 120);
        c.settle(&a, &Recorded::Recorded(a.clone()));
        assert_eq!(c.pending(130), vec![newer.clone()]);
        assert_eq!(c.check(&keys(&["alice"]), 130), Some(newer));
    }

    #[test]
    fn a_pending_restriction_that_ends_is_purged_and_told_once() {
        let c = RestrictedCopy::default();
        let (a, _) = c.restrict_here(r("alice", 0, None), Some(1_000), true, 0);
        assert!(c.check(&keys(&["alice"]), 999).is_some());
        assert!(c.check(&keys(&["alice"]), 1_000).is_none());
        assert!(c.pending(1_000).is_empty(), "an ended one is not recorded");
        assert_eq!(c.purge(1_000), vec![a]);
        assert!(c.purge(1_000).is_empty());
        assert!(c.is_empty());
    }

    #[test]
    fn a_pending_restriction_can_be_released_here_a_shared_one_cannot() {
        let c = RestrictedCopy::default();
        c.refresh(c.begin_refresh(), vec![r("bob", 0, None)], 0);
        c.restrict_here(r("alice", 0, None), None, true, 10);
        assert!(c.release_pending("bob", 20).is_none());
        assert!(c.is_shared("bob", 20));
        assert_eq!(c.release_pending("alice", 20).unwrap().key, "alice");
        assert!(c.check(&keys(&["alice"]), 20).is_none());
        c.forget("bob");
        assert!(c.is_empty());
    }

    #[test]
    fn a_listing_asked_before_a_change_here_does_not_undo_it() {
        let c = RestrictedCopy::default();
        c.refresh(c.begin_refresh(), vec![r("bob", 0, None)], 0);
        let start = c.begin_refresh();
        // While the listing is on its way, this node restricts alice and releases bob.
        c.learn(r("alice", 5, None));
        c.forget("bob");
        // The listing was read before both: it has bob and lacks alice.
        let moved = c.refresh(start, vec![r("bob", 0, None)], 10);
        assert_eq!(moved, 0);
        assert!(c.check(&keys(&["alice"]), 10).is_some());
        assert!(c.check(&keys(&["bob"]), 10).is_none());
        assert!(c.pending(10).is_empty());
        // The next listing sees both changes and is taken as it is.
        let start = c.begin_refresh();
        c.refresh(start, vec![r("alice", 5, None)], 20);
        assert_eq!(c.list(20).len(), 1);
    }

    #[test]
    fn a_restriction_redis_lost_goes_back_to_pending() {
        let c = RestrictedCopy::default();
        c.refresh(
            c.begin_refresh(),
            vec![r("alice", 0, None), r("bob", 0, Some(100))],
            0,
        );
        // Redis comes back empty: alice (in force) is to be recorded again, with her times;
        // bob ended meanwhile and is not.
        let moved = c.refresh(c.begin_refresh(), Vec::new(), 100);
        assert_eq!(moved, 1);
        assert_eq!(c.pending(100), vec![r("alice", 0, None)]);
        assert!(c.check_pending(&keys(&["alice"]), 100).is_some());
        assert!(c.check(&keys(&["bob"]), 100).is_none());
    }

    #[test]
    fn lists_both_maps_by_key() {
        let c = RestrictedCopy::default();
        c.refresh(
            c.begin_refresh(),
            vec![r("carol", 0, None), r("alice", 0, Some(5))],
            0,
        );
        c.restrict_here(r("bob", 0, None), None, true, 1);
        let keys: Vec<String> = c.list(10).into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["bob", "carol"]);
    }
}
