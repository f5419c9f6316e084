//! The hold spool's index in memory: every held message's envelope by id, by the key it was
//! held under and by its authenticated user, each oldest first, so that a key's messages and
//! counts are read without reading any file.
//!
//! The index holds what [`read::head`](super::read::head) gave for each file (the envelope
//! and the Subject, no body): about the size of the envelope, 1 KiB for a message of 25
//! recipients, so at most `[hold] max_messages` of them. It knows nothing of the directory:
//! [`Spool`](super::Spool) brings it up to date from a listing of the directory's names
//! before each read, reading only the files it has not indexed yet.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::format::HeldHead;

/// Ids in the order they were held: the time, then the id.
type Ordered = BTreeSet<(u64, String)>;

/// The index of held messages.
#[derive(Debug, Default)]
pub struct Index {
    /// Every indexed message by id, with its file's size.
    heads: HashMap<String, (Arc<HeldHead>, u64)>,
    /// Every indexed message, oldest first.
    all: Ordered,
    /// By the key each was held under.
    by_key: HashMap<String, Ordered>,
    /// By authenticated user.
    by_user: HashMap<String, Ordered>,
}

fn add(map: &mut HashMap<String, Ordered>, name: &str, at: (u64, String)) {
    map.entry(name.to_string()).or_default().insert(at);
}

fn drop_from(map: &mut HashMap<String, Ordered>, name: &str, at: &(u64, String)) {
    if let Some(set) = map.get_mut(name) {
        set.remove(at);
        if set.is_empty() {
            map.remove(name);
        }
    }
}

impl Index {
    /// Whether `id` is indexed.
    pub fn contains(&self, id: &str) -> bool {
        self.heads.contains_key(id)
    }

    /// How many messages are indexed.
    pub fn len(&self) -> usize {
        self.heads.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// The ids indexed, in no order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.heads.keys().map(String::as_str)
    }

    /// Adds (or replaces) the message of `head`, whose file has `file_len` octets.
    pub fn insert(&mut self, head: HeldHead, file_len: u64) {
        let id = head.envelope.id.clone();
        self.remove(&id);
        let at = (head.envelope.time, id.clone());
        add(&mut self.by_key, &head.envelope.key, at.clone());
        if let Some(u) = head.envelope.user.as_deref() {
            add(&mut self.by_user, u, at.clone());
        }
        self.all.insert(at);
        self.heads.insert(id, (Arc::new(head), file_len));
    }

    /// Forgets `id`.
    pub fn remove(&mut self, id: &str) {
        let Some((head, _)) = self.heads.remove(id) else {
            return;
        };
        let at = (head.envelope.time, id.to_string());
        drop_from(&mut self.by_key, &head.envelope.key, &at);
        if let Some(u) = head.envelope.user.as_deref() {
            drop_from(&mut self.by_user, u, &at);
        }
        self.all.remove(&at);
    }

    fn heads_of<'a>(&'a self, set: impl Iterator<Item = &'a (u64, String)>) -> Vec<Arc<HeldHead>> {
        set.filter_map(|(_, id)| self.heads.get(id).map(|(h, _)| h.clone()))
            .collect()
    }

    /// Every message, oldest first.
    pub fn all(&self) -> Vec<Arc<HeldHead>> {
        self.heads_of(self.all.iter())
    }

    /// The messages held under `key`, oldest first.
    pub fn of_key(&self, key: &str) -> Vec<Arc<HeldHead>> {
        self.by_key
            .get(key)
            .map_or_else(Vec::new, |s| self.heads_of(s.iter()))
    }

    /// How many messages count for `key`: held under it, or sent by it as authenticated
    /// user (each message once).
    pub fn count_for(&self, key: &str) -> u64 {
        let keyed = self.by_key.get(key).map_or(0, BTreeSet::len);
        let as_user = self.by_user.get(key).map_or(0, |s| {
            s.iter()
                .filter(|(_, id)| {
                    self.heads
                        .get(id)
                        .is_some_and(|(h, _)| h.envelope.key != key)
                })
                .count()
        });
        (keyed + as_user) as u64
    }

    /// The count of every key some message counts for (see [`Index::count_for`]).
    pub fn per_key(&self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for (h, _) in self.heads.values() {
            let e = &h.envelope;
            *out.entry(e.key.clone()).or_default() += 1;
            if let Some(u) = e.user.as_deref().filter(|u| *u != e.key) {
                *out.entry(u.to_string()).or_default() += 1;
            }
        }
        out
    }

    /// How many messages are indexed and their files' octets.
    pub fn usage(&self) -> (usize, u64) {
        (
            self.heads.len(),
            self.heads.values().map(|(_, n)| n).sum::<u64>(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::HeldEnvelope;

    fn head(id: &str, time: u64, key: &str, user: Option<&str>) -> HeldHead {
        HeldHead {
            envelope: HeldEnvelope {
                id: id.into(),
                key: key.into(),
                limit: "l".into(),
                paced: None,
                time,
                client: "192.0.2.1:25".parse().unwrap(),
                local: None,
                name: None,
                reverse_name: None,
                user: user.map(str::to_string),
                helo: None,
                proto: "ESMTP".into(),
                tls: None,
                mail: "<a@b>".into(),
                rcpts: vec!["<c@d>".into()],
            },
            subject: None,
            headers: 0,
            size: 0,
        }
    }

    fn ids(v: &[Arc<HeldHead>]) -> Vec<&str> {
        v.iter().map(|h| h.envelope.id.as_str()).collect()
    }

    #[test]
    fn keys_users_and_order() {
        let mut ix = Index::default();
        ix.insert(head("c", 3, "alice", Some("alice")), 30);
        ix.insert(head("a", 1, "192.0.2.1", Some("alice")), 10);
        ix.insert(head("b", 2, "bob", None), 20);
        assert_eq!(ids(&ix.all()), ["a", "b", "c"]);
        assert_eq!(ids(&ix.of_key("alice")), ["c"]);
        assert_eq!(ix.count_for("alice"), 2);
        assert_eq!(ix.count_for("bob"), 1);
        assert_eq!(ix.count_for("carol"), 0);
        assert_eq!(ix.usage(), (3, 60));
        assert_eq!(
            ix.per_key().into_iter().collect::<Vec<_>>(),
            [
                ("192.0.2.1".to_string(), 1),
                ("alice".to_string(), 2),
                ("bob".to_string(), 1)
            ]
        );
        ix.remove("c");
        ix.remove("nothing");
        assert!(ix.of_key("alice").is_empty());
        assert_eq!(ix.count_for("alice"), 1);
        assert!(!ix.by_key.contains_key("alice"));
        // Replacing an id moves it.
        ix.insert(head("a", 9, "carol", None), 5);
        assert_eq!(ids(&ix.all()), ["b", "a"]);
        assert_eq!(ix.count_for("alice"), 0);
        assert_eq!(ix.len(), 2);
        assert!(ix.contains("a") && !ix.contains("c"));
    }
}
