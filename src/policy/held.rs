//! What the hold spool holds now for a key, the `held` of a restriction's evidence: this
//! node's spool read at the time it is asked, and with a store that nodes share (Redis) each
//! other node's count as that node last published it.
//!
//! A held message counts for a key when the key is the one it was held under (its
//! envelope's `key`) or its authenticated user. Each node publishes its counts per key
//! every [`PUBLISH_EVERY`], kept by the store for [`PUBLISHED_FOR`]: a node that stops
//! (or whose spool empties) drops out of the sum within that time.
//!
//! Nodes are named by their `[server] hostname` (the alerts' `host`). A node publishes
//! under its [`node_id`]: the name, the machine's host name and the spool directory, so
//! that nodes sharing one `hostname` (behind one load balancer) never overwrite each
//! other's counts and a restarted node takes its own place again; counts are summed by
//! name.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::hold::postfix::Ledger;
use crate::hold::Spool;
use crate::store::Store;

/// How often each node publishes its counts to a shared store.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(10);
/// How long a published count is believed.
pub const PUBLISHED_FOR: Duration = Duration::from_secs(30);

/// Where the hold spool in force is (it may come or go with a reload).
pub trait HeldSource: Send + Sync {
    /// The hold spool in force, if any.
    fn spool(&self) -> Option<Arc<Spool>>;

    /// The ledger of Postfix's hold queue in force (`[postfix]`), if any.
    fn ledger(&self) -> Option<Arc<Ledger>> {
        None
    }
}

impl<F> HeldSource for F
where
    F: Fn() -> Option<Arc<Spool>> + Send + Sync,
{
    fn spool(&self) -> Option<Arc<Spool>> {
        self()
    }
}

/// What is held for one key now: the total, and each node's count (nodes named by their
/// hostname, the alerts' `host`) where it is not zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldNow {
    /// Messages held for the key on every node.
    pub total: u64,
    /// Each node's count.
    pub by_node: BTreeMap<String, u64>,
}

impl HeldNow {
    /// Sets `held` and `held_by_node` of a restriction's `evidence` (an object; anything
    /// else is made one).
    pub fn set_in(&self, evidence: &mut serde_json::Value) {
        if !evidence.is_object() {
            *evidence = serde_json::json!({});
        }
        evidence["held"] = self.total.into();
        evidence["held_by_node"] = serde_json::json!(self.by_node);
    }
}

/// Every key some of `ledger`'s messages (Postfix's hold queue) count for, added to
/// `counts` as the spool counts its own ([`Spool::per_key`]): under its key, and under its
/// user where that is another.
pub fn add_ledger(counts: &mut BTreeMap<String, u64>, ledger: &Ledger) {
    for e in ledger.all() {
        *counts.entry(e.key.clone()).or_default() += 1;
        if let Some(u) = e.user.as_deref().filter(|u| *u != e.key) {
            *counts.entry(u.to_string()).or_default() += 1;
        }
    }
}

/// How many of `ledger`'s messages count for `key` (held under it, or sent by it as user).
pub fn ledger_count_for(ledger: &Ledger, key: &str) -> u64 {
    ledger
        .all()
        .iter()
        .filter(|e| e.key == key || e.user.as_deref() == Some(key))
        .count() as u64
}

/// The name a node's counts are published under: `NAME|MACHINE|SPOOL_DIR` (`NAME`: its
/// `[server] hostname`).
pub fn node_id(name: &str, spool_dir: &std::path::Path) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let machine = if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    format!("{name}|{machine}|{}", spool_dir.display())
}

/// The name in a [`node_id`].
pub fn node_name(id: &str) -> &str {
    id.split('|').next().unwrap_or(id)
}

/// Reads what is held: this node's spool, and the other nodes' published counts.
pub struct HeldReader {
    /// Where the spool is; `None`: this node holds nothing.
    source: Option<Arc<dyn HeldSource>>,
    store: Arc<dyn Store>,
    /// The keys this node last published a count for.
    published: Mutex<HashSet<String>>,
}

impl HeldReader {
    /// A reader over `store` of the spool `source` tells (none without a source).
    pub fn new(store: Arc<dyn Store>, source: Option<Arc<dyn HeldSource>>) -> HeldReader {
        HeldReader {
            source,
            store,
            published: Mutex::default(),
        }
    }

    /// What `read` gives of this node's spool (from its index), with the node's id (none
    /// without a spool; `T::default()` when it cannot be read).
    async fn read_spool<T: Default + Send + 'static>(
        &self,
        node: &str,
        read: impl FnOnce(&Spool) -> Result<T, crate::hold::SpoolError> + Send + 'static,
    ) -> (T, Option<String>) {
        let Some(spool) = self.source.as_ref().and_then(|s| s.spool()) else {
            return (T::default(), None);
        };
        let id = node_id(node, &spool.settings().dir);
        match tokio::task::spawn_blocking(move || read(&spool)).await {
            Ok(Ok(v)) => (v, Some(id)),
            Ok(Err(e)) => {
                warn!(error = %e, "hold spool: cannot count held messages");
                (T::default(), Some(id))
            }
            Err(_) => (T::default(), Some(id)),
        }
    }

    /// This node's held messages in Postfix's hold queue (its ledger), when it has one, and
    /// the node's id by the ledger's path.
    fn ledger(&self, node: &str) -> Option<(Arc<Ledger>, String)> {
        let ledger = self.source.as_ref()?.ledger()?;
        let id = node_id(node, ledger.path());
        Some((ledger, id))
    }

    /// What is held for `key` now on every node, this one being named `node`.
    pub async fn now(&self, key: &str, node: &str) -> HeldNow {
        let owned = key.to_string();
        let (mut mine, mut me) = self.read_spool(node, move |s| s.count_for(&owned)).await;
        if let Some((ledger, id)) = self.ledger(node) {
            mine += ledger_count_for(&ledger, key);
            me = me.or(Some(id));
        }
        let mut by_node: BTreeMap<String, u64> = BTreeMap::new();
        if self.store.shares_state() {
            match self.store.held_counts(key).await {
                Ok(list) => {
                    for (id, c) in list {
                        if Some(&id) != me.as_ref() && c > 0 {
                            *by_node.entry(node_name(&id).to_string()).or_default() += c;
                        }
                    }
                }
                Err(e) => warn!(error = %e, key, "other nodes' held counts not readable"),
            }
        }
        if mine > 0 {
            *by_node.entry(node.to_string()).or_default() += mine;
        }
        HeldNow {
            total: by_node.values().sum(),
            by_node,
        }
    }

    /// Publishes this node's counts to a store that nodes share (nothing otherwise),
    /// withdrawing those of keys it holds nothing for any more.
    pub async fn publish(&self, node: &str) {
        if !self.store.shares_state() {
            return;
        }
        let (mut counts, mut me) = self.read_spool(node, Spool::per_key).await;
        if let Some((ledger, id)) = self.ledger(node) {
            add_ledger(&mut counts, &ledger);
            me = me.or(Some(id));
        }
        let Some(me) = me else {
            return;
        };
        let counts: Vec<(String, u64)> = counts.into_iter().collect();
        let now: HashSet<String> = counts.iter().map(|(k, _)| k.clone()).collect();
        let gone: Vec<String> = {
            let published = self.published.lock().unwrap_or_else(|e| e.into_inner());
            published.difference(&now).cloned().collect()
        };
        match self
            .store
            .publish_held(&me, &counts, &gone, PUBLISHED_FOR)
            .await
        {
            Ok(()) => *self.published.lock().unwrap_or_else(|e| e.into_inner()) = now,
            Err(e) => warn!(error = %e, "held counts not published to the shared store"),
        }
    }
}

/// What [`run`] publishes for: a policy that knows its node's name and spool (the
/// [`RatePolicy`](super::RatePolicy)).
pub trait Publisher: Send + Sync + 'static {
    /// Publishes this node's counts once.
    fn publish_held(&self) -> impl std::future::Future<Output = ()> + Send;
}

/// Publishes `policy`'s counts every `every` until `stop` fires.
pub async fn run<P: Publisher>(policy: P, every: Duration, stop: CancellationToken) {
    loop {
        policy.publish_held().await;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::postfix::LedgerEntry;

    #[test]
    fn postfix_s_hold_counts_for_its_key_and_user() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("l"), 10).unwrap();
        for (id, key, user) in [
            ("AAAAA1", "alice", Some("alice")),
            ("AAAAA2", "192.0.2.7", Some("alice")),
            ("AAAAA3", "www-data", None),
        ] {
            ledger
                .record(LedgerEntry {
                    queue_id: id.into(),
                    key: key.into(),
                    limit: "l".into(),
                    reason: String::new(),
                    time: 0,
                    sender: String::new(),
                    recipients: vec![],
                    size: 0,
                    client: None,
                    user: user.map(str::to_string),
                })
                .unwrap();
        }
        let mut counts = BTreeMap::from([("alice".to_string(), 1u64)]);
        add_ledger(&mut counts, &ledger);
        assert_eq!(
            counts["alice"], 3,
            "one in the spool, two in Postfix's hold queue"
        );
        assert_eq!((counts["192.0.2.7"], counts["www-data"]), (1, 1));
        assert_eq!(ledger_count_for(&ledger, "alice"), 2);
        assert_eq!(ledger_count_for(&ledger, "www-data"), 1);
        assert_eq!(ledger_count_for(&ledger, "carol"), 0);
    }

    #[test]
    fn node_ids_carry_the_name_the_machine_and_the_spool() {
        let id = node_id("mx1.example.org", std::path::Path::new("/var/spool/fg"));
        assert!(id.starts_with("mx1.example.org|"), "{id}");
        assert!(id.ends_with("|/var/spool/fg"), "{id}");
        assert_eq!(node_name(&id), "mx1.example.org");
        assert_ne!(
            id,
            node_id("mx1.example.org", std::path::Path::new("/other"))
        );
    }

    #[test]
    fn held_now_is_set_in_the_evidence() {
        let h = HeldNow {
            total: 5,
            by_node: BTreeMap::from([("mx1".to_string(), 3), ("mx2".to_string(), 2)]),
        };
        let mut ev = serde_json::json!({"messages": 7, "held": 1});
        h.set_in(&mut ev);
        assert_eq!(
            ev,
            serde_json::json!({"messages": 7, "held": 5, "held_by_node": {"mx1": 3, "mx2": 2}})
        );
        let mut none = serde_json::Value::Null;
        HeldNow::default().set_in(&mut none);
        assert_eq!(none, serde_json::json!({"held": 0, "held_by_node": {}}));
    }

    #[tokio::test]
    async fn without_a_spool_or_shared_store_nothing_is_held() {
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::default());
        let r = HeldReader::new(store.clone(), None);
        assert_eq!(r.now("alice", "mx").await, HeldNow::default());
        let r = HeldReader::new(store, Some(Arc::new(|| None)));
        r.publish("mx").await;
        assert_eq!(r.now("alice", "mx").await, HeldNow::default());
    }
}
