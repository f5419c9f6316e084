//! The restricted set: keys (users, addresses) that a limit with `action = "restrict"` or an
//! admin has restricted. Every MAIL FROM of a session with a restricted key is refused until
//! the restriction ends (at its `until`, or by `floodgate release`).
//!
//! The memory store keeps the set in a map behind a read-write lock, with an atomic count
//! so the check costs one load while nobody is restricted; it is saved in the store's
//! snapshot. Redis keeps it in one hash of the store's key prefix (field: the key, value: the
//! restriction as JSON), with times from the server's clock, shared by every node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a restriction lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestrictFor {
    /// Until an admin releases it.
    UntilReleased,
    /// This long, then released automatically.
    For(Duration),
}

/// Why a `restrict_for` text was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestrictForError {
    /// Neither a duration nor `until_released`.
    #[error("restrict_for {0:?}: use a duration such as \"24h\" or \"until_released\"")]
    Syntax(String),
    /// A zero duration would restrict nobody.
    #[error("restrict_for {0:?}: a restriction must last longer than zero")]
    Zero(String),
}

impl RestrictFor {
    /// Parses `until_released` or a duration (`24h`, `90m`, `2s`, `1d12h`).
    pub fn parse(text: &str) -> Result<RestrictFor, RestrictForError> {
        let t = text.trim();
        if t == "until_released" {
            return Ok(RestrictFor::UntilReleased);
        }
        match crate::config::parse_duration(t) {
            Ok(d) if d.is_zero() => Err(RestrictForError::Zero(text.to_string())),
            Ok(d) => Ok(RestrictFor::For(d)),
            Err(_) => Err(RestrictForError::Syntax(text.to_string())),
        }
    }

    /// Microseconds the restriction lasts (`None`: until released).
    pub fn micros(self) -> Option<i64> {
        match self {
            RestrictFor::UntilReleased => None,
            RestrictFor::For(d) => Some(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
        }
    }

    /// The config text.
    pub fn text(self) -> String {
        match self {
            RestrictFor::UntilReleased => "until_released".into(),
            RestrictFor::For(d) => crate::config::ConfigDuration(d).to_string(),
        }
    }
}

/// One restricted key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Restriction {
    /// The restricted key (a user name, an address…).
    pub key: String,
    /// The limit that restricted it (`admin` for a restriction by hand).
    pub limit: String,
    /// When it began, microseconds since the epoch (the store's clock).
    pub since_us: i64,
    /// When it ends, microseconds since the epoch; `None`: until released.
    pub until_us: Option<i64>,
    /// The rate that tripped the limit, if a limit did.
    pub rate: Option<f64>,
    /// The limit in force as text (`"5 / 1h"`), if a limit did.
    pub limit_text: String,
    /// Who or what restricted it: `limit NAME on NODE` or `admin`.
    pub by: String,
    /// Why.
    pub reason: String,
    /// What the restricting node saw of the key recently (free-form JSON).
    #[serde(default)]
    pub evidence: serde_json::Value,
}

impl Restriction {
    /// Whether it is over at `now_us`.
    pub fn expired(&self, now_us: i64) -> bool {
        self.until_us.is_some_and(|u| u <= now_us)
    }
}

/// The in-process restricted set (memory store, and tests).
#[derive(Debug, Default)]
pub struct RestrictedSet {
    map: RwLock<HashMap<String, Restriction>>,
    len: AtomicUsize,
}

impl RestrictedSet {
    /// The restriction in force on the first of `keys` that has one at `now_us`. Expired
    /// entries are skipped (and left for [`RestrictedSet::purge`], which answers them).
    pub fn check(&self, keys: &[String], now_us: i64) -> Option<Restriction> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter_map(|k| map.get(k.as_str()))
            .find(|r| !r.expired(now_us))
            .cloned()
    }

    /// Adds (or replaces) `r`, stamping `since_us` with `now_us` and `until_us` from `dur`.
    pub fn insert(&self, mut r: Restriction, dur: Option<i64>, now_us: i64) -> Restriction {
        r.since_us = now_us;
        r.until_us = dur.map(|d| now_us.saturating_add(d));
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.insert(r.key.clone(), r.clone());
        self.len.store(map.len(), Ordering::Release);
        r
    }

    /// As [`RestrictedSet::insert`] unless a restriction of the key is in force at `now_us`:
    /// answers the restriction in force and whether this call made it.
    pub fn insert_once(
        &self,
        mut r: Restriction,
        dur: Option<i64>,
        now_us: i64,
    ) -> (Restriction, bool) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = map.get(&r.key).filter(|o| !o.expired(now_us)) {
            return (old.clone(), false);
        }
        r.since_us = now_us;
        r.until_us = dur.map(|d| now_us.saturating_add(d));
        map.insert(r.key.clone(), r.clone());
        self.len.store(map.len(), Ordering::Release);
        (r, true)
    }

    /// Puts back a restriction as it was (snapshot loading).
    pub fn restore(&self, r: Restriction) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.insert(r.key.clone(), r);
        self.len.store(map.len(), Ordering::Release);
    }

    /// Removes the restriction of `key`, if any (expired or not).
    pub fn remove(&self, key: &str) -> Option<Restriction> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let r = map.remove(key);
        self.len.store(map.len(), Ordering::Release);
        r
    }

    /// Removes the restriction of `key` if it is in force at `now_us` (an expired one is
    /// left for [`RestrictedSet::purge`]).
    pub fn remove_in_force(&self, key: &str, now_us: i64) -> Option<Restriction> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if map.get(key).is_none_or(|r| r.expired(now_us)) {
            return None;
        }
        let r = map.remove(key);
        self.len.store(map.len(), Ordering::Release);
        r
    }

    /// Removes every restriction over at `now_us` and returns them (each once: the caller
    /// tells of their release).
    pub fn purge(&self, now_us: i64) -> Vec<Restriction> {
        if self.len.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            if !map.values().any(|r| r.expired(now_us)) {
                return Vec::new();
            }
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = map
            .values()
            .filter(|r| r.expired(now_us))
            .map(|r| r.key.clone())
            .collect();
        let mut out: Vec<Restriction> = gone.iter().filter_map(|k| map.remove(k)).collect();
        self.len.store(map.len(), Ordering::Release);
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Every restriction in force at `now_us`, by key.
    pub fn list(&self, now_us: i64) -> Vec<Restriction> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Restriction> = map
            .values()
            .filter(|r| !r.expired(now_us))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// Every entry, expired or not (snapshots).
    pub fn all(&self) -> Vec<Restriction> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Whether nobody is restricted (one atomic load).
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(key: &str) -> Restriction {
        Restriction {
            key: key.into(),
            limit: "l".into(),
            since_us: 0,
            until_us: None,
            rate: Some(6.0),
            limit_text: "5".into(),
            by: "test".into(),
            reason: "test".into(),
            evidence: serde_json::Value::Null,
        }
    }

    #[test]
    fn parses_restrict_for() {
        assert_eq!(
            RestrictFor::parse("until_released"),
            Ok(RestrictFor::UntilReleased)
        );
        assert_eq!(
            RestrictFor::parse("24h"),
            Ok(RestrictFor::For(Duration::from_secs(86_400)))
        );
        assert_eq!(RestrictFor::parse("2s").unwrap().micros(), Some(2_000_000));
        assert!(matches!(
            RestrictFor::parse("forever"),
            Err(RestrictForError::Syntax(_))
        ));
        assert!(matches!(
            RestrictFor::parse("0s"),
            Err(RestrictForError::Zero(_))
        ));
        assert!(RestrictFor::parse("").is_err());
        assert!(RestrictFor::parse("until released").is_err());
    }

    #[test]
    fn set_checks_expires_and_releases() {
        let s = RestrictedSet::default();
        assert!(s.check(&["a".into()], 0).is_none());
        s.insert(r("a"), Some(1_000), 10);
        s.insert(r("b"), None, 10);
        assert_eq!(s.check(&["x".into(), "a".into()], 500).unwrap().key, "a");
        assert_eq!(s.check(&["a".into()], 500).unwrap().until_us, Some(1_010));
        assert!(s.check(&["a".into()], 1_010).is_none());
        assert_eq!(s.list(2_000).len(), 1);
        // Over but not yet swept: no release takes it, the sweep answers it once.
        assert!(s.remove_in_force("a", 2_000).is_none());
        let gone = s.purge(2_000);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].key, "a");
        assert!(s.purge(2_000).is_empty());
        assert!(s.remove_in_force("b", 2_000).is_some());
        assert!(s.remove("b").is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn insert_once_keeps_the_restriction_in_force() {
        let s = RestrictedSet::default();
        let (a, made) = s.insert_once(r("a"), Some(100), 10);
        assert!(made);
        assert_eq!(a.until_us, Some(110));
        let (again, made) = s.insert_once(r("a"), None, 50);
        assert!(!made);
        assert_eq!(again, a);
        // Once over, a new restriction replaces it.
        let (b, made) = s.insert_once(r("a"), None, 200);
        assert!(made);
        assert_eq!((b.since_us, b.until_us), (200, None));
    }

    #[test]
    fn snapshot_keeps_restrictions() {
        let store = crate::store::MemoryStore::default();
        let mut a = r("alice");
        a.evidence = serde_json::json!({"subjects": ["hi"]});
        store.restricted_set().insert(a, None, 5);
        store.restricted_set().insert(r("10.0.0.1"), Some(10), 5);
        let bytes = store.snapshot_bytes();
        let again = crate::store::MemoryStore::default();
        let n = again
            .load_snapshot_bytes(std::path::Path::new("t"), &bytes)
            .unwrap();
        assert_eq!(n, 2);
        let mut got = again.restricted_set().all();
        got.sort_by(|a, b| a.key.cmp(&b.key));
        let mut want = store.restricted_set().all();
        want.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(got, want);
        assert_eq!(got[1].evidence["subjects"][0], "hi");
        // Each restriction is kept as JSON text.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(text.contains("\"by\":\"test\""));
    }

    proptest! {
        #[test]
        fn restrict_for_never_panics(s in "\\PC{0,20}") {
            let _ = RestrictFor::parse(&s);
        }

        #[test]
        fn restrict_for_round_trips(secs in 1u64..10_000_000) {
            let f = RestrictFor::For(Duration::from_secs(secs));
            prop_assert_eq!(RestrictFor::parse(&f.text()), Ok(f));
        }

        #[test]
        fn restrict_for_matches_durations(n in 0u64..100_000, unit in "(ms|s|m|h|d)") {
            let text = format!("{n}{unit}");
            let d = crate::config::parse_duration(&text).unwrap();
            match RestrictFor::parse(&text) {
                Ok(RestrictFor::For(got)) => prop_assert_eq!(got, d),
                Ok(RestrictFor::UntilReleased) => prop_assert!(false),
                Err(_) => prop_assert!(d.is_zero()),
            }
        }
    }
}
