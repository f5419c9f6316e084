//! The queued messages whose outcomes are still to come: queue id → the keys to charge and
//! the recipients, in a bounded index (the oldest entries go first), and which outcomes of
//! each were already counted, so a result logged again at every retry counts once.
//!
//! An outcome is charged only for a recipient upstream accepted in that queue id's
//! transaction (the delivered address or its original, the domain compared without regard to
//! case as SMTP does, the local part exactly), and at most once per recipient and kind: a
//! line about any other address, whoever wrote it, charges nothing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use super::logline::Kind;

/// Default number of queued messages remembered.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// One queued message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    /// `(limit, key text)` pairs its bounces and deferrals are charged to.
    pub keys: Vec<(String, String)>,
    /// Its recipients, as accepted.
    pub recipients: Vec<String>,
}

#[derive(Debug, Default)]
struct Entry {
    queued: Queued,
    /// `(outcome, index in queued.recipients)` already counted.
    counted: HashSet<(Kind, usize)>,
}

/// What one reported outcome does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Noted {
    /// The queue id is not in the index (not relayed by floodgate, or forgotten).
    UnknownQueueId,
    /// Neither the recipient nor its original address is one upstream accepted for the
    /// message: not counted.
    NotRecipient,
    /// This recipient's outcome of this kind was counted before.
    Duplicate,
    /// A delivery (nothing is charged), or a message with no keys to charge.
    Nothing,
    /// Charge these `(limit, key text)`.
    Charge(Vec<(String, String)>),
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Entry>,
    order: VecDeque<String>,
}

/// The bounded index.
#[derive(Debug)]
pub struct Index {
    inner: Mutex<Inner>,
    capacity: std::sync::atomic::AtomicUsize,
    stats: super::Stats,
}

impl Default for Index {
    fn default() -> Self {
        Index::new(DEFAULT_CAPACITY)
    }
}

impl Index {
    /// An index of at most `capacity` queued messages.
    pub fn new(capacity: usize) -> Index {
        Index {
            inner: Mutex::default(),
            capacity: capacity.max(1).into(),
            stats: super::Stats::default(),
        }
    }

    /// Makes the outcome counters and the count of remembered messages part of the
    /// exposition.
    pub fn register_metrics(self: &std::sync::Arc<Self>, metrics: &crate::metrics::Metrics) {
        let ix = self.clone();
        metrics.scrape("outcomes", move |w| {
            w.counters(
                "floodgate_outcomes_total",
                "Smart host log lines and reported outcomes, by what became of them: lines, other_lines (not delivery results), unknown_lines (of no known shape, skipped), unknown_queue_ids, not_recipients (an address the message was not accepted for: not counted), duplicates, charged, uncharged.",
                "what",
                ix.stats().snapshot(),
            );
            w.gauge(
                "floodgate_outcomes_queued",
                "Queued messages remembered for their outcomes.",
                i64::try_from(ix.len()).unwrap_or(i64::MAX),
            );
        });
    }

    /// Changes how many queued messages are remembered (the oldest go first when more).
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity
            .store(capacity.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// The counters of outcomes seen.
    pub fn stats(&self) -> &super::Stats {
        &self.stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers a queued message (a queue id seen again replaces its entry).
    pub fn insert(&self, queue_id: &str, queued: Queued) {
        let mut g = self.lock();
        let inner = &mut *g;
        if inner.map.remove(queue_id).is_some() {
            inner.order.retain(|q| q != queue_id);
        }
        let capacity = self.capacity.load(std::sync::atomic::Ordering::Relaxed);
        while inner.map.len() >= capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            inner.map.remove(&old);
        }
        inner.order.push_back(queue_id.to_string());
        inner.map.insert(
            queue_id.to_string(),
            Entry {
                queued,
                counted: HashSet::new(),
            },
        );
    }

    /// Notes an outcome of `recipient` (or its `original` address) of `queue_id`.
    pub fn note(
        &self,
        queue_id: &str,
        recipient: &str,
        original: Option<&str>,
        kind: Kind,
    ) -> Noted {
        let mut g = self.lock();
        let Some(e) = g.map.get_mut(queue_id) else {
            return Noted::UnknownQueueId;
        };
        // The address the message was given: the original when the host rewrote it.
        let given = e.queued.recipients.iter().position(|r| {
            same_address(r, recipient) || original.is_some_and(|o| same_address(r, o))
        });
        let Some(given) = given else {
            return Noted::NotRecipient;
        };
        // A recipient accepted twice in one transaction is one recipient.
        let first = e.queued.recipients[..given]
            .iter()
            .position(|r| same_address(r, &e.queued.recipients[given]))
            .unwrap_or(given);
        if !e.counted.insert((kind, first)) {
            return Noted::Duplicate;
        }
        if kind == Kind::Sent || e.queued.keys.is_empty() {
            return Noted::Nothing;
        }
        Noted::Charge(e.queued.keys.clone())
    }

    /// Queued messages remembered.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether two addresses name the same mailbox as SMTP compares them: the local part
/// exactly, the domain (after the last `@`) without regard to case.
pub fn same_address(a: &str, b: &str) -> bool {
    match (a.rsplit_once('@'), b.rsplit_once('@')) {
        (Some((la, da)), Some((lb, db))) => {
            la == lb && (da.eq_ignore_ascii_case(db) || da.to_lowercase() == db.to_lowercase())
        }
        (None, None) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(rcpts: &[&str]) -> Queued {
        Queued {
            keys: vec![("bounces".into(), "alice".into())],
            recipients: rcpts.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn counts_each_recipient_once_per_kind() {
        let ix = Index::new(10);
        ix.insert("Q1", q(&["a@x", "B@x"]));
        assert_eq!(
            ix.note("nope", "a@x", None, Kind::Bounced),
            Noted::UnknownQueueId
        );
        assert!(matches!(
            ix.note("Q1", "a@x", None, Kind::Deferred),
            Noted::Charge(_)
        ));
        // The domain's case does not matter; a deferral at every retry counts once.
        assert_eq!(ix.note("Q1", "a@X", None, Kind::Deferred), Noted::Duplicate);
        assert_eq!(ix.note("Q1", "a@x", None, Kind::Deferred), Noted::Duplicate);
        // The bounce after the deferrals counts once, as a bounce.
        assert!(matches!(
            ix.note("Q1", "a@x", None, Kind::Bounced),
            Noted::Charge(_)
        ));
        assert_eq!(ix.note("Q1", "a@x", None, Kind::Bounced), Noted::Duplicate);
        // Rewritten by the host: the original address names the recipient.
        assert!(matches!(
            ix.note("Q1", "bob@elsewhere", Some("B@x"), Kind::Bounced),
            Noted::Charge(_)
        ));
        assert_eq!(ix.note("Q1", "B@x", None, Kind::Bounced), Noted::Duplicate);
        // Several addresses from one (an alias expanded): one recipient.
        assert_eq!(
            ix.note("Q1", "carol@elsewhere", Some("B@x"), Kind::Bounced),
            Noted::Duplicate
        );
        assert_eq!(ix.note("Q1", "a@x", None, Kind::Sent), Noted::Nothing);
    }

    #[test]
    fn only_recipients_of_the_transaction_count() {
        let ix = Index::new(10);
        ix.insert("Q1", q(&["x@evil.example"]));
        ix.insert("Q2", q(&["victim@example.org"]));
        // Addresses the message was not accepted for, however many, charge nothing.
        for r in [
            "victim@example.org",
            "c@x",
            "y@evil.example",
            "X@evil.example",
        ] {
            for kind in [Kind::Bounced, Kind::Deferred, Kind::Sent] {
                assert_eq!(ix.note("Q1", r, None, kind), Noted::NotRecipient, "{r}");
            }
        }
        // Nor does an original address that is not one of them.
        assert_eq!(
            ix.note(
                "Q1",
                "victim@example.org",
                Some("nobody@evil.example"),
                Kind::Bounced
            ),
            Noted::NotRecipient
        );
        assert!(matches!(
            ix.note("Q1", "x@EVIL.example", None, Kind::Bounced),
            Noted::Charge(_)
        ));
        // The same recipient accepted twice is counted once.
        ix.insert("Q3", q(&["d@x", "d@X"]));
        assert!(matches!(
            ix.note("Q3", "d@x", None, Kind::Bounced),
            Noted::Charge(_)
        ));
        assert_eq!(ix.note("Q3", "d@X", None, Kind::Bounced), Noted::Duplicate);
    }

    #[test]
    fn addresses_compare_as_smtp_does() {
        assert!(same_address("a@Example.ORG", "a@example.org"));
        assert!(same_address("a@Bücher.example", "a@bÜcher.example"));
        assert!(!same_address("A@example.org", "a@example.org"));
        assert!(same_address("\"a@b\"@x.example", "\"a@b\"@X.example"));
        assert!(!same_address("a@b", "a"));
        assert!(same_address("root", "root"));
        assert!(!same_address("root", "Root"));
    }

    #[test]
    fn bounded_oldest_first() {
        let ix = Index::new(2);
        ix.insert("Q1", q(&["a@x"]));
        ix.insert("Q2", q(&["a@x"]));
        ix.insert("Q3", q(&["a@x"]));
        assert_eq!(ix.len(), 2);
        assert_eq!(
            ix.note("Q1", "a@x", None, Kind::Bounced),
            Noted::UnknownQueueId
        );
        assert!(matches!(
            ix.note("Q3", "a@x", None, Kind::Bounced),
            Noted::Charge(_)
        ));
        // Inserting again replaces without growing.
        ix.insert("Q3", q(&["a@x"]));
        assert_eq!(ix.len(), 2);
    }
}
