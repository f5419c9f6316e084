//! The connections one admin listener holds: at most `max` at once, so that floods of
//! connections cost the process a bounded number of descriptors, shared fairly between
//! client addresses.
//!
//! A held connection is *waiting* until its request head has come (and, for the console's
//! login form, which carries no credentials in its head, its body too), then *answered*.
//! Waiting connections are the ones a flood is made of (idle, slowloris, slow bodies):
//!
//! - **Per address.** One client address (IPv6: its /64) may have at most `per_address`
//!   waiting connections; a new one beyond that is refused at once ([`Refused::Address`]),
//!   taking nothing from other addresses. A flood from one address therefore turns over at
//!   accept speed without touching anyone else's connections. (A new connection whose
//!   request head is already there is taken all the same: the accept loop may run ahead of
//!   the tasks that read the heads of a burst of requests. One that then waits for a login
//!   form's body beyond the bound is refused there, see [`Slot::may_wait_for_body`].)
//! - **At the bound.** With `max` connections held, a new one takes the place of a waiting
//!   one: the oldest waiting connection older than the grace time, from the address with the
//!   most waiting connections. A connection younger than the grace time is cut only from an
//!   address that holds at least two waiting connections more than the newcomer's, so a
//!   client with one connection at a time that sends its request within the grace time is
//!   never cut, and a flood spread over a few addresses cannot keep a new address out
//!   either. When nothing may be cut the newcomer is refused at once ([`Refused::Full`]).
//! - **All answered.** When every held connection is being answered, the accept loop stops
//!   accepting ([`Slots::room`]): new connections wait in the kernel's listen queue, holding
//!   no descriptor of floodgate's, until one ends (each is bounded by the request and write
//!   timeouts).
//!
//! (A cut connection leaves the table at once and its descriptor is closed when its task
//! next runs, so for that moment the listener has one descriptor more than `max`.)
//!
//! Before, a new connection at the bound always cut the oldest waiting one: a flood turning
//! over at accept speed made a connection the oldest within `max` accepts, a fraction of a
//! millisecond, so a client that sent its request 50 ms after connecting was cut every time.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The connections of one listener.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    per_address: usize,
    grace: Duration,
    table: Mutex<Table>,
    freed: Notify,
}

#[derive(Debug, Default)]
struct Table {
    /// Ids in accept order (the smallest is the oldest).
    next: u64,
    open: BTreeMap<u64, Held>,
    /// Waiting connections per client address (addresses with none are absent).
    waiting: HashMap<IpAddr, usize>,
}

impl Table {
    /// Removes connection `id`, if held; its address's waiting count follows.
    fn remove(&mut self, id: u64) -> Option<Held> {
        let h = self.open.remove(&id)?;
        if h.waiting {
            self.unwait(h.key);
        }
        Some(h)
    }

    fn unwait(&mut self, key: Option<IpAddr>) {
        let Some(k) = key else { return };
        if let Some(n) = self.waiting.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(&k);
            }
        }
    }
}

#[derive(Debug)]
struct Held {
    /// The client's address key; `None` on the admin socket (no per-address bound).
    key: Option<IpAddr>,
    /// When it was accepted.
    since: Instant,
    /// Its request has not arrived yet: it may be cut to make room.
    waiting: bool,
    /// Cancelled to cut it.
    cut: CancellationToken,
}

/// Why a connection was not admitted.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Refused {
    /// Its address already has `per_address` waiting connections.
    Address,
    /// At the bound with nothing that may be cut.
    Full,
}

/// How a connection was admitted.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Admitted {
    /// There was room.
    Room,
    /// A waiting connection was cut to make room.
    Evicted,
}

impl Slots {
    /// Room for `max` connections (at least one), at most `per_address` (at least one)
    /// waiting from one address; waiting connections younger than `grace` are protected
    /// (see the module).
    pub fn new(max: usize, per_address: usize, grace: Duration) -> Arc<Slots> {
        Arc::new(Slots {
            max: max.max(1),
            per_address: per_address.max(1),
            grace,
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

    /// Whether a new connection should be accepted now: there is room, or a waiting
    /// connection (which may be cut, or which will end within the request timeout).
    pub fn can_accept(&self) -> bool {
        let t = self.table();
        t.open.len() < self.max || t.open.values().any(|h| h.waiting)
    }

    /// Waits until [`Slots::can_accept`]; only the accept loop waits here.
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            if self.can_accept() {
                return;
            }
            freed.await;
        }
    }

    /// Admits a new connection from `key` (`None`: the admin socket) accepted at `now`
    /// (see the module for who is cut to make room); `head_ready` says, when asked (its
    /// address at its bound), whether its request head is already there.
    pub fn admit(
        self: &Arc<Self>,
        key: Option<IpAddr>,
        now: Instant,
        head_ready: impl FnOnce() -> bool,
    ) -> Result<(Slot, Admitted), Refused> {
        let mut t = self.table();
        let mine = key.map_or(0, |k| t.waiting.get(&k).copied().unwrap_or(0));
        if key.is_some() && mine >= self.per_address && !head_ready() {
            return Err(Refused::Address);
        }
        let mut admitted = Admitted::Room;
        if t.open.len() >= self.max {
            let victim = self.victim(&t, key, now).ok_or(Refused::Full)?;
            if let Some(h) = t.remove(victim) {
                h.cut.cancel();
            }
            admitted = Admitted::Evicted;
        }
        let id = t.next;
        t.next += 1;
        let cut = CancellationToken::new();
        t.open.insert(
            id,
            Held {
                key,
                since: now,
                waiting: true,
                cut: cut.clone(),
            },
        );
        if let Some(k) = key {
            *t.waiting.entry(k).or_insert(0) += 1;
        }
        Ok((
            Slot {
                slots: self.clone(),
                id,
                cut,
            },
            admitted,
        ))
    }

    /// The waiting connection to cut for a newcomer from `key` at `now`, if any may be.
    fn victim(&self, t: &Table, key: Option<IpAddr>, now: Instant) -> Option<u64> {
        // Per address (the admin socket's connections as one): how many wait, the oldest of
        // them, and the oldest past the grace time. `open` is in accept order.
        #[derive(Default)]
        struct Group {
            count: usize,
            oldest: Option<u64>,
            oldest_old: Option<u64>,
        }
        let mut groups: HashMap<Option<IpAddr>, Group> = HashMap::new();
        for (&id, h) in t.open.iter().filter(|(_, h)| h.waiting) {
            let g = groups.entry(h.key).or_default();
            g.count += 1;
            g.oldest.get_or_insert(id);
            if now.saturating_duration_since(h.since) >= self.grace {
                g.oldest_old.get_or_insert(id);
            }
        }
        let mine = groups.get(&key).map_or(0, |g| g.count);
        // Ties go to the address whose candidate is oldest.
        let most = |pick: fn(&Group) -> Option<u64>| {
            groups
                .values()
                .filter_map(|g| Some((g.count, std::cmp::Reverse(pick(g)?))))
                .max()
                .map(|(count, std::cmp::Reverse(id))| (count, id))
        };
        if let Some((_, id)) = most(|g| g.oldest_old) {
            return Some(id);
        }
        let (count, id) = most(|g| g.oldest)?;
        (count >= mine + 2).then_some(id)
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
    /// Its request arrived: from now on it is being answered, is not cut to make room,
    /// and no longer counts against its address.
    pub fn answering(&self) {
        let mut t = self.slots.table();
        let key = match t.open.get_mut(&self.id) {
            Some(h) if h.waiting => {
                h.waiting = false;
                h.key
            }
            _ => return,
        };
        t.unwait(key);
    }

    /// Whether this connection, its head read, may go on waiting for a login form's body:
    /// its address has no more than the bound of waiting connections, itself included.
    pub fn may_wait_for_body(&self) -> bool {
        let t = self.slots.table();
        match t.open.get(&self.id).and_then(|h| h.key) {
            Some(k) => t.waiting.get(&k).copied().unwrap_or(0) <= self.slots.per_address,
            None => true,
        }
    }

    /// Cancelled when the listener cuts this connection to make room.
    pub fn cut(&self) -> &CancellationToken {
        &self.cut
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.table().remove(self.id);
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(2);

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([127, 0, 0, last]))
    }

    #[test]
    fn room_then_the_oldest_waiting_one_past_the_grace_is_cut() {
        let s = Slots::new(3, 8, GRACE);
        let t0 = Instant::now();
        let (a, e) = s.admit(ip(1), t0, || false).unwrap();
        assert_eq!(e, Admitted::Room);
        let (b, _) = s.admit(ip(2), t0, || false).unwrap();
        let (c, _) = s
            .admit(ip(3), t0 + Duration::from_secs(1), || false)
            .unwrap();
        assert_eq!(s.len(), 3);
        // a is being answered; b is the oldest still waiting, but within its grace time:
        // nothing may be cut for a fourth address.
        a.answering();
        assert!(s.can_accept());
        let early = t0 + Duration::from_millis(1500);
        assert_eq!(s.admit(ip(4), early, || false).unwrap_err(), Refused::Full);
        assert!(!b.cut().is_cancelled());
        // Past b's grace time (c is still within its own): b goes.
        let (d, evicted) = s.admit(ip(4), t0 + GRACE, || false).unwrap();
        assert_eq!(evicted, Admitted::Evicted);
        assert!(b.cut().is_cancelled() && !a.cut().is_cancelled() && !c.cut().is_cancelled());
        assert_eq!(s.len(), 3);
        // Dropping the cut one (its task ends) changes nothing more.
        drop(b);
        assert_eq!(s.len(), 3);
        // Every held connection answering: nothing to accept for, nothing cut.
        c.answering();
        d.answering();
        assert!(!s.can_accept());
        let later = t0 + Duration::from_secs(60);
        assert_eq!(s.admit(ip(5), later, || false).unwrap_err(), Refused::Full);
        assert!(!c.cut().is_cancelled() && !d.cut().is_cancelled());
        drop(a);
        assert!(s.can_accept());
        let (_e, evicted) = s.admit(ip(5), later, || false).unwrap();
        assert_eq!(evicted, Admitted::Room);
    }

    #[test]
    fn one_address_gets_its_cap_and_no_more() {
        let s = Slots::new(64, 3, GRACE);
        let t0 = Instant::now();
        let held: Vec<_> = (0..3)
            .map(|_| s.admit(ip(9), t0, || false).unwrap().0)
            .collect();
        for _ in 0..100 {
            assert_eq!(s.admit(ip(9), t0, || false).unwrap_err(), Refused::Address);
        }
        // Others are not touched, and the address has room again once one is answered.
        let (_other, e) = s.admit(ip(1), t0, || false).unwrap();
        assert_eq!(e, Admitted::Room);
        held[0].answering();
        let (_fourth, _) = s.admit(ip(9), t0, || false).unwrap();
        assert_eq!(s.admit(ip(9), t0, || false).unwrap_err(), Refused::Address);
        // A cut or ended one frees its place too.
        drop(held);
        let again: Vec<_> = (0..2)
            .map(|_| s.admit(ip(9), t0, || false).unwrap().0)
            .collect();
        assert_eq!(s.admit(ip(9), t0, || false).unwrap_err(), Refused::Address);
        assert!(again[0].may_wait_for_body());
        // One whose head is already there is taken beyond the bound; waiting for a login
        // form's body it would be over it.
        let (ready, _) = s.admit(ip(9), t0, || true).unwrap();
        assert!(!ready.may_wait_for_body());
        drop(ready);
        // The admin socket has no per-address bound.
        let unix: Vec<_> = (0..10).map(|_| s.admit(None, t0, || false)).collect();
        assert!(unix.iter().all(Result::is_ok));
    }

    #[test]
    fn the_cut_comes_from_the_address_with_most_waiting() {
        let s = Slots::new(6, 8, GRACE);
        let t0 = Instant::now();
        // A lone client first (oldest of all), then four from a flood address.
        let (lone, _) = s.admit(ip(1), t0, || false).unwrap();
        let flood: Vec<_> = (0..4)
            .map(|i| {
                s.admit(ip(2), t0 + Duration::from_millis(i), || false)
                    .unwrap()
                    .0
            })
            .collect();
        let (_x, _) = s.admit(ip(3), t0, || false).unwrap();
        // All past the grace time: the flood's oldest goes, not the lone client's older one.
        let late = t0 + Duration::from_secs(5);
        let (_new, e) = s.admit(ip(4), late, || false).unwrap();
        assert_eq!(e, Admitted::Evicted);
        assert!(flood[0].cut().is_cancelled());
        assert!(!lone.cut().is_cancelled());
    }

    #[test]
    fn young_connections_are_cut_only_from_an_address_with_two_more() {
        let s = Slots::new(4, 8, GRACE);
        let t0 = Instant::now();
        // A flood address holds three young connections, another address one.
        let flood: Vec<_> = (0..3)
            .map(|_| s.admit(ip(2), t0, || false).unwrap().0)
            .collect();
        let (client, _) = s.admit(ip(1), t0, || false).unwrap();
        // A new address (none waiting) may take the flood's oldest: 3 >= 0 + 2.
        let at = t0 + Duration::from_millis(50);
        let (newcomer, e) = s.admit(ip(5), at, || false).unwrap();
        assert_eq!(e, Admitted::Evicted);
        assert!(flood[0].cut().is_cancelled());
        // The flood now has two; a third address may take one more: 2 >= 0 + 2.
        let (_third, _) = s.admit(ip(6), at, || false).unwrap();
        assert!(flood[1].cut().is_cancelled());
        // Now every address has one waiting: nothing young may be cut, whoever comes,
        // and the flood's own address gets nothing either.
        assert_eq!(s.admit(ip(7), at, || false).unwrap_err(), Refused::Full);
        assert_eq!(s.admit(ip(2), at, || false).unwrap_err(), Refused::Full);
        assert!(!client.cut().is_cancelled() && !newcomer.cut().is_cancelled());
        assert!(!flood[2].cut().is_cancelled());
    }

    #[test]
    fn at_least_one() {
        let s = Slots::new(0, 0, GRACE);
        let t0 = Instant::now();
        let (a, _) = s.admit(ip(1), t0, || false).unwrap();
        assert_eq!(s.admit(ip(1), t0, || false).unwrap_err(), Refused::Address);
        a.answering();
        assert_eq!(s.admit(ip(1), t0, || false).unwrap_err(), Refused::Full);
    }

    #[tokio::test]
    async fn room_waits_for_a_connection_to_end() {
        let s = Slots::new(1, 8, GRACE);
        let (a, _) = s.admit(ip(1), Instant::now(), || false).unwrap();
        a.answering();
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
    async fn room_is_at_once_with_a_waiting_connection() {
        let s = Slots::new(1, 8, GRACE);
        let (_a, _) = s.admit(ip(1), Instant::now(), || false).unwrap();
        tokio::time::timeout(Duration::from_secs(5), s.room())
            .await
            .expect("a waiting connection may be cut or end");
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the arrivals, answers and ends: never more than `max` held, never
            /// more than `per_address` waiting from one address, and no connection that a
            /// lone client holds (its address's only waiting one) is cut before its grace
            /// time.
            #[test]
            fn bounds_hold_and_lone_young_clients_are_never_cut(
                events in proptest::collection::vec((0u8..6, 0u8..4, 0u64..800), 1..300),
            ) {
                let s = Slots::new(5, 2, GRACE);
                let t0 = Instant::now();
                let mut now = t0;
                let mut held: Vec<(Option<IpAddr>, Instant, Slot)> = Vec::new();
                for (addr, op, step) in events {
                    now += Duration::from_millis(step);
                    match op {
                        0 | 1 => {
                            let key = ip(addr);
                            let lone: Vec<(u64, Instant)> = {
                                let t = s.table();
                                t.open.iter()
                                    .filter(|(_, h)| h.waiting && h.key.is_some_and(|k| t.waiting.get(&k) == Some(&1)))
                                    .map(|(id, h)| (*id, h.since))
                                    .collect()
                            };
                            if let Ok((slot, _)) = s.admit(key, now, || false) {
                                held.push((key, now, slot));
                            }
                            for (id, since) in lone {
                                if let Some((_, _, sl)) = held.iter().find(|(_, _, sl)| sl.id == id) {
                                    if sl.cut().is_cancelled() {
                                        prop_assert!(now.duration_since(since) >= GRACE);
                                    }
                                }
                            }
                        }
                        2 => {
                            if let Some((_, _, sl)) = held.iter().find(|(k, _, _)| *k == ip(addr)) {
                                sl.answering();
                            }
                        }
                        _ => {
                            if let Some(i) = held.iter().position(|(k, _, _)| *k == ip(addr)) {
                                held.remove(i);
                            }
                        }
                    }
                    held.retain(|(_, _, sl)| !sl.cut().is_cancelled());
                    prop_assert!(s.len() <= 5);
                    let t = s.table();
                    prop_assert!(t.waiting.values().all(|&n| n <= 2 && n > 0));
                    let counted: usize = t.waiting.values().sum();
                    prop_assert_eq!(counted, t.open.values().filter(|h| h.waiting).count());
                }
            }
        }
    }
}
