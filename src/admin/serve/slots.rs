//! The connections one admin listener holds: at most `max` at once, so that floods of
//! connections cost the process a bounded number of descriptors.
//!
//! The accept loop takes a connection only when there is room for it, or when a held
//! connection has not yet sent its request head (an idle or slow one, or one still in its
//! TLS handshake): then the oldest such one is cut to make room, the way a busy server drops
//! its idle keep-alive connections first. When every held connection is being answered, the
//! loop stops accepting (like Prometheus' limit listener and nginx's
//! `worker_connections`): new connections wait in the kernel's listen queue, holding no
//! descriptor of floodgate's, until one ends (each is bounded by the request and write
//! timeouts). A flood of idle connections therefore turns over at accept speed, the newest
//! kept, and a real request that arrives after it is taken within a few accepts. (A cut
//! connection leaves the table at once and its descriptor is closed when its task next
//! runs, so for that moment the listener has one descriptor more than `max`.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The connections of one listener.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    table: Mutex<Table>,
    freed: Notify,
}

#[derive(Debug, Default)]
struct Table {
    /// Ids in accept order (the smallest is the oldest).
    next: u64,
    open: BTreeMap<u64, Held>,
}

#[derive(Debug)]
struct Held {
    /// Its request head has not arrived yet: it may be cut to make room.
    waiting: bool,
    /// Cancelled to cut it.
    cut: CancellationToken,
}

/// Why a connection could not be admitted.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

impl Slots {
    /// Room for `max` connections (at least one).
    pub fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max: max.max(1),
            table: Mutex::new(Table::default()),
            freed: Notify::new(),
        })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections held now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table().open.len()
    }

    /// Whether none is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a new connection could be admitted now: there is room, or one to cut.
    pub fn can_admit(&self) -> bool {
        let t = self.table();
        t.open.len() < self.max || t.open.values().any(|h| h.waiting)
    }

    /// Waits until [`Slots::can_admit`]; only the accept loop waits here.
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            if self.can_admit() {
                return;
            }
            freed.await;
        }
    }

    /// Admits a new connection: with room, at once; at the bound, by cutting the oldest
    /// connection still waiting for its request head (`true` in the answer). [`Full`] when
    /// every held connection is being answered.
    pub fn admit(self: &Arc<Self>) -> Result<(Slot, bool), Full> {
        let mut t = self.table();
        let mut evicted = false;
        if t.open.len() >= self.max {
            let oldest = t
                .open
                .iter()
                .find(|(_, h)| h.waiting)
                .map(|(id, _)| *id)
                .ok_or(Full)?;
            if let Some(h) = t.open.remove(&oldest) {
                h.cut.cancel();
            }
            evicted = true;
        }
        let id = t.next;
        t.next += 1;
        let cut = CancellationToken::new();
        t.open.insert(
            id,
            Held {
                waiting: true,
                cut: cut.clone(),
            },
        );
        Ok((
            Slot {
                slots: self.clone(),
                id,
                cut,
            },
            evicted,
        ))
    }
}

/// One held connection; dropping it frees its place.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    cut: CancellationToken,
}

impl Slot {
    /// Its request head arrived: from now on it is being answered and is not cut to make
    /// room.
    pub fn head_received(&self) {
        if let Some(h) = self.slots.table().open.get_mut(&self.id) {
            h.waiting = false;
        }
    }

    /// Cancelled when the listener cuts this connection to make room.
    pub fn cut(&self) -> &CancellationToken {
        &self.cut
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.table().open.remove(&self.id);
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn room_then_the_oldest_waiting_one_is_cut() {
        let s = Slots::new(3);
        let (a, e) = s.admit().unwrap();
        assert!(!e);
        let (b, _) = s.admit().unwrap();
        let (c, _) = s.admit().unwrap();
        assert_eq!(s.len(), 3);
        // a is being answered; b is the oldest still waiting for its head.
        a.head_received();
        assert!(s.can_admit());
        let (d, evicted) = s.admit().unwrap();
        assert!(evicted);
        assert!(b.cut().is_cancelled() && !a.cut().is_cancelled() && !c.cut().is_cancelled());
        assert_eq!(s.len(), 3);
        // Dropping the cut one (its task ends) changes nothing more.
        drop(b);
        assert_eq!(s.len(), 3);
        // Every held connection answering: full, nothing cut.
        c.head_received();
        d.head_received();
        assert!(!s.can_admit());
        assert_eq!(s.admit().unwrap_err(), Full);
        assert!(!c.cut().is_cancelled() && !d.cut().is_cancelled());
        drop(a);
        assert!(s.can_admit());
        let (_e, evicted) = s.admit().unwrap();
        assert!(!evicted);
    }

    #[test]
    fn at_least_one() {
        let s = Slots::new(0);
        let (a, _) = s.admit().unwrap();
        a.head_received();
        assert_eq!(s.admit().unwrap_err(), Full);
    }

    #[tokio::test]
    async fn room_waits_for_a_connection_to_end() {
        let s = Slots::new(1);
        let (a, _) = s.admit().unwrap();
        a.head_received();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.room().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("room after the connection ended")
            .unwrap();
        assert!(s.is_empty());
    }

    #[tokio::test]
    async fn room_is_at_once_with_one_to_cut() {
        let s = Slots::new(1);
        let (_a, _) = s.admit().unwrap();
        tokio::time::timeout(Duration::from_secs(5), s.room())
            .await
            .expect("a waiting connection can be cut");
    }
}
