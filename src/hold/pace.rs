//! Pacing: held messages released automatically at a limit's own rate (`action = "pace"`).
//!
//! * [`PaceRate`]: the rate a paced message is released at, written in its held file so a
//!   restart (or a reload that drops the limit) still knows it;
//! * [`PaceBook`]: the paced messages waiting, one queue per limit and key, oldest first,
//!   with the time each queue may release its next message. Pure state behind a lock: the
//!   caller gives the time (milliseconds on its own monotonic clock) and does the I/O.
//!
//! A queue releases its oldest message, then waits `weight / rate` (one message at
//! `30 / 1min` counting messages: 2 s; a message of 3 recipients at `60 / 1min` counting
//! recipients: 3 s). A message that could not be released stays at the head and its queue
//! waits a backoff (5 s, doubling, at most 5 min) before the next try.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Milliseconds on the pacer's monotonic clock (from the first call in the process): the
/// `now` that [`PaceBook`] is given.
pub fn clock_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What a paced limit counts, which decides a message's weight against its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaceUnit {
    /// One per message.
    Messages,
    /// One per recipient.
    Recipients,
    /// One per octet of the message.
    Bytes,
}

impl PaceUnit {
    /// The word in a held file.
    pub fn as_str(self) -> &'static str {
        match self {
            PaceUnit::Messages => "messages",
            PaceUnit::Recipients => "recipients",
            PaceUnit::Bytes => "bytes",
        }
    }

    fn parse(w: &str) -> Option<PaceUnit> {
        Some(match w {
            "messages" => PaceUnit::Messages,
            "recipients" => PaceUnit::Recipients,
            "bytes" => PaceUnit::Bytes,
            _ => return None,
        })
    }
}

/// The longest wait between two releases of one queue, whatever the weight.
pub const MAX_INTERVAL: Duration = Duration::from_secs(86_400);
/// The first wait after a failed release; it doubles at each failure in a row.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest wait after failed releases.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A release rate: `amount` units per `period_secs`. Both are positive and finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaceRate {
    amount: f64,
    period_secs: f64,
    unit: PaceUnit,
}

// Both numbers are finite by construction (`new`, `parse`), so equality is an equivalence.
impl Eq for PaceRate {}

/// Why a held file's pace rate could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pace rate {0:?} is not `AMOUNT/PERIODs UNIT` (UNIT: messages, recipients or bytes)")]
pub struct PaceRateError(pub String);

impl PaceRate {
    /// `amount` per `period_secs` of `unit`; `None` unless both are positive and finite.
    pub fn new(amount: f64, period_secs: f64, unit: PaceUnit) -> Option<PaceRate> {
        let ok = |v: f64| v > 0.0 && v.is_finite();
        (ok(amount) && ok(period_secs)).then_some(PaceRate {
            amount,
            period_secs,
            unit,
        })
    }

    /// Reads the text [`fmt::Display`] writes: `30/60s messages`.
    pub fn parse(text: &str) -> Result<PaceRate, PaceRateError> {
        let bad = || PaceRateError(text.to_string());
        let (rate, unit) = text.split_once(' ').ok_or_else(bad)?;
        let (amount, period) = rate.split_once('/').ok_or_else(bad)?;
        let period = period.strip_suffix('s').ok_or_else(bad)?;
        let number = |t: &str| {
            // Digits and one dot only: no signs, exponents, `inf` or `NaN`.
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                return None;
            }
            t.parse::<f64>().ok()
        };
        let unit = PaceUnit::parse(unit).ok_or_else(bad)?;
        PaceRate::new(
            number(amount).ok_or_else(bad)?,
            number(period).ok_or_else(bad)?,
            unit,
        )
        .ok_or_else(bad)
    }

    /// What the rate counts.
    pub fn unit(&self) -> PaceUnit {
        self.unit
    }

    /// The weight of a message of `recipients` recipients and `bytes` octets.
    pub fn weight(&self, recipients: usize, bytes: usize) -> f64 {
        match self.unit {
            PaceUnit::Messages => 1.0,
            PaceUnit::Recipients => recipients.max(1) as f64,
            PaceUnit::Bytes => bytes.max(1) as f64,
        }
    }

    /// The wait after releasing a message of `weight`, at most [`MAX_INTERVAL`].
    pub fn interval(&self, weight: f64) -> Duration {
        let secs = weight * self.period_secs / self.amount;
        Duration::try_from_secs_f64(secs)
            .unwrap_or(MAX_INTERVAL)
            .min(MAX_INTERVAL)
    }
}

impl fmt::Display for PaceRate {
    /// `30/60s messages`: Rust's shortest round-trip form of each number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}s {}",
            self.amount,
            self.period_secs,
            self.unit.as_str()
        )
    }
}

/// One paced message waiting in a queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Paced {
    /// Its held id.
    pub id: String,
    /// The limit that paces it.
    pub limit: String,
    /// The key it was counted for.
    pub key: String,
    /// The rate it is released at.
    pub rate: PaceRate,
    /// Its weight against that rate.
    pub weight: f64,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Paced>,
    /// When the head may be released (ms on the caller's clock).
    next_ms: u64,
    /// The head is being released.
    busy: bool,
    /// Failed releases in a row.
    failures: u32,
}

#[derive(Debug, Default)]
struct Book {
    queues: BTreeMap<(String, String), Queue>,
    ids: HashSet<String>,
}

/// The paced messages waiting, one queue per limit and key.
#[derive(Debug, Default)]
pub struct PaceBook {
    book: Mutex<Book>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl PaceBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `p` behind the messages of its limit and key. A new queue releases its first
    /// message one interval from `now_ms`: the message was just over the limit. An id
    /// already queued is ignored.
    pub fn add(&self, p: Paced, now_ms: u64) {
        let mut b = self.lock();
        if !b.ids.insert(p.id.clone()) {
            return;
        }
        let q = b
            .queues
            .entry((p.limit.clone(), p.key.clone()))
            .or_default();
        if q.items.is_empty() && !q.busy {
            q.next_ms = now_ms.saturating_add(ms(p.rate.interval(p.weight)));
        }
        q.items.push_back(p);
    }

    /// Whether messages of this limit and key wait (a later message of the key must queue
    /// behind them, so they leave in order).
    pub fn pending(&self, limit: &str, key: &str) -> bool {
        let b = self.lock();
        b.queues
            .get(&(limit.to_string(), key.to_string()))
            .is_some_and(|q| !q.items.is_empty())
    }

    /// Messages waiting, over all queues.
    pub fn len(&self) -> usize {
        self.lock().ids.len()
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The head of every queue whose time has come, marked as being released: each must be
    /// answered by [`released`](Self::released), [`gone`](Self::gone) or
    /// [`failed`](Self::failed).
    pub fn due(&self, now_ms: u64) -> Vec<Paced> {
        let mut b = self.lock();
        let mut out = Vec::new();
        for q in b.queues.values_mut() {
            if q.busy || q.next_ms > now_ms {
                continue;
            }
            if let Some(head) = q.items.front() {
                q.busy = true;
                out.push(head.clone());
            }
        }
        out
    }

    /// When the next queue may release (`None`: nothing waits, or every head is being
    /// released).
    pub fn next_due(&self) -> Option<u64> {
        let b = self.lock();
        b.queues
            .values()
            .filter(|q| !q.busy && !q.items.is_empty())
            .map(|q| q.next_ms)
            .min()
    }

    fn finish(&self, p: &Paced, then: impl FnOnce(&mut Queue, &Paced)) {
        let mut b = self.lock();
        let k = (p.limit.clone(), p.key.clone());
        let Some(q) = b.queues.get_mut(&k) else {
            return;
        };
        q.busy = false;
        if q.items.front().is_some_and(|h| h.id == p.id) {
            then(q, p);
        }
        let emptied = q.items.is_empty();
        let id_gone = !q.items.iter().any(|h| h.id == p.id);
        if emptied {
            b.queues.remove(&k);
        }
        if id_gone {
            b.ids.remove(&p.id);
        }
    }

    /// `p` was released at `now_ms`: the queue's next message waits `p`'s interval from
    /// then (never sooner, so the rate holds however late a release was).
    pub fn released(&self, p: &Paced, now_ms: u64) {
        self.finish(p, |q, p| {
            q.items.pop_front();
            q.failures = 0;
            q.next_ms = now_ms.saturating_add(ms(p.rate.interval(p.weight)));
        });
    }

    /// `p` is no longer in the spool (an operator released or deleted it): the next message
    /// keeps the time `p` had.
    pub fn gone(&self, p: &Paced) {
        self.finish(p, |q, _| {
            q.items.pop_front();
        });
    }

    /// `p` could not be released at `now_ms`: it stays at the head and its queue waits a
    /// backoff. Returns that wait.
    pub fn failed(&self, p: &Paced, now_ms: u64) -> Duration {
        let mut wait = FIRST_BACKOFF;
        self.finish(p, |q, _| {
            q.failures = q.failures.saturating_add(1);
            let doublings = q.failures.saturating_sub(1).min(16);
            wait = FIRST_BACKOFF
                .saturating_mul(1u32 << doublings)
                .min(MAX_BACKOFF);
            q.next_ms = now_ms.saturating_add(ms(wait));
        });
        wait
    }

    /// The ids waiting for one limit and key, oldest first.
    pub fn queued(&self, limit: &str, key: &str) -> Vec<String> {
        let b = self.lock();
        b.queues
            .get(&(limit.to_string(), key.to_string()))
            .map(|q| q.items.iter().map(|p| p.id.clone()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rate(amount: f64, period: f64) -> PaceRate {
        PaceRate::new(amount, period, PaceUnit::Messages).unwrap()
    }

    fn paced(id: &str, key: &str, r: PaceRate) -> Paced {
        Paced {
            id: id.into(),
            limit: "l".into(),
            key: key.into(),
            rate: r,
            weight: 1.0,
        }
    }

    #[test]
    fn rate_text_round_trips_and_bad_text_is_refused() {
        let r = PaceRate::new(30.0, 60.0, PaceUnit::Recipients).unwrap();
        assert_eq!(r.to_string(), "30/60s recipients");
        assert_eq!(PaceRate::parse("30/60s recipients"), Ok(r));
        let odd = PaceRate::new(0.1, 3600.5, PaceUnit::Bytes).unwrap();
        assert_eq!(PaceRate::parse(&odd.to_string()), Ok(odd));
        for bad in [
            "",
            "30/60s",
            "30/60 messages",
            "30 messages",
            "0/60s messages",
            "30/0s messages",
            "-1/60s messages",
            "inf/60s messages",
            "NaN/60s messages",
            "1e3/60s messages",
            "30/60s letters",
            "30/60s  messages",
        ] {
            assert!(PaceRate::parse(bad).is_err(), "{bad:?}");
        }
        let e = PaceRate::parse("x").unwrap_err();
        assert!(e.to_string().contains("AMOUNT/PERIODs UNIT"), "{e}");
        assert!(PaceRate::new(f64::NAN, 1.0, PaceUnit::Messages).is_none());
    }

    #[test]
    fn weights_and_intervals() {
        let m = rate(30.0, 60.0);
        assert_eq!(m.weight(7, 9000), 1.0);
        assert_eq!(m.interval(1.0), Duration::from_secs(2));
        let r = PaceRate::new(60.0, 60.0, PaceUnit::Recipients).unwrap();
        assert_eq!(r.weight(3, 10), 3.0);
        assert_eq!(r.interval(3.0), Duration::from_secs(3));
        let b = PaceRate::new(1000.0, 1.0, PaceUnit::Bytes).unwrap();
        assert_eq!(b.weight(1, 0), 1.0);
        assert_eq!(b.interval(1e30), MAX_INTERVAL);
    }

    #[test]
    fn one_queue_releases_in_order_at_its_rate() {
        let book = PaceBook::default();
        let r = rate(30.0, 60.0);
        for i in 0..3 {
            book.add(paced(&format!("m{i}"), "alice", r), 0);
        }
        assert!(book.pending("l", "alice"));
        assert!(!book.pending("l", "bob"));
        assert_eq!(book.len(), 3);
        // The first waits one interval: it was just over the limit.
        assert!(book.due(1999).is_empty());
        assert_eq!(book.next_due(), Some(2000));
        let d = book.due(2000);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].id, "m0");
        // Being released: not handed out twice.
        assert!(book.due(9999).is_empty());
        assert_eq!(book.next_due(), None);
        book.released(&d[0], 2010);
        assert_eq!(book.next_due(), Some(4010));
        let d = book.due(4010);
        assert_eq!(d[0].id, "m1");
        book.released(&d[0], 4010);
        let d = book.due(6010);
        assert_eq!(d[0].id, "m2");
        book.released(&d[0], 6010);
        assert!(!book.pending("l", "alice"));
        assert!(book.is_empty());
    }

    #[test]
    fn failures_back_off_and_keep_the_head() {
        let book = PaceBook::default();
        let r = rate(60.0, 60.0);
        book.add(paced("a", "k", r), 0);
        book.add(paced("b", "k", r), 0);
        let d = book.due(1000);
        assert_eq!(book.failed(&d[0], 1000), Duration::from_secs(5));
        assert!(book.due(5999).is_empty());
        let d = book.due(6000);
        assert_eq!(d[0].id, "a");
        assert_eq!(book.failed(&d[0], 6000), Duration::from_secs(10));
        let d = book.due(16_000);
        assert_eq!(book.failed(&d[0], 16_000), Duration::from_secs(20));
        let d = book.due(36_000);
        book.released(&d[0], 36_000);
        assert_eq!(book.queued("l", "k"), ["b"]);
        let d = book.due(37_000);
        // Released, the backoff starts again from the first step.
        assert_eq!(book.failed(&d[0], 37_000), FIRST_BACKOFF);
        for _ in 0..20 {
            let d = book.due(u64::MAX / 2);
            assert!(book.failed(&d[0], 0) <= MAX_BACKOFF);
        }
    }

    #[test]
    fn gone_messages_leave_and_keys_are_independent() {
        let book = PaceBook::default();
        let r = rate(1.0, 60.0);
        book.add(paced("a1", "a", r), 0);
        book.add(paced("a2", "a", r), 0);
        book.add(paced("b1", "b", r), 30_000);
        book.add(paced("a1", "a", r), 0);
        assert_eq!(book.len(), 3, "an id is queued once");
        let d = book.due(60_000);
        assert_eq!(d.len(), 1);
        book.gone(&d[0]);
        assert_eq!(book.queued("l", "a"), ["a2"]);
        // a2 keeps a1's time; b's queue has its own.
        let d = book.due(60_000);
        assert_eq!(d.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["a2"]);
        let d2 = book.due(90_000);
        assert_eq!(d2.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["b1"]);
    }

    proptest! {
        /// Whatever rate is written reads back the same.
        #[test]
        fn rate_round_trip(a in 1e-6f64..1e9, p in 1e-3f64..1e8, u in 0..3u8) {
            let unit = [PaceUnit::Messages, PaceUnit::Recipients, PaceUnit::Bytes][u as usize];
            let r = PaceRate::new(a, p, unit).unwrap();
            prop_assert_eq!(PaceRate::parse(&r.to_string()), Ok(r));
        }

        /// Arbitrary text never panics; what reads writes back as a rate that reads the same.
        #[test]
        fn rate_parse_never_panics(t in "[0-9./s a-z]{0,24}") {
            if let Ok(r) = PaceRate::parse(&t) {
                prop_assert_eq!(PaceRate::parse(&r.to_string()), Ok(r));
            }
        }

        /// However releases and failures interleave, each queue hands out its messages in
        /// the order they were added, each once, never two of a queue at a time, and two
        /// releases of one queue are at least one interval apart.
        #[test]
        fn queues_keep_order_and_rate(ops in proptest::collection::vec((0..3u8, 0..3u8, 0..5_000u64), 1..200)) {
            let book = PaceBook::default();
            let r = rate(1.0, 1.0);
            let mut now = 0u64;
            let mut added = [0usize; 3];
            let mut out: [Vec<String>; 3] = Default::default();
            let mut last: [Option<u64>; 3] = [None; 3];
            for (op, key, step) in ops {
                now += step;
                let k = key as usize;
                match op {
                    0 => {
                        book.add(paced(&format!("{k}-{}", added[k]), &k.to_string(), r), now);
                        added[k] += 1;
                    }
                    _ => {
                        let due = book.due(now);
                        let mut seen = HashSet::new();
                        for p in &due {
                            prop_assert!(seen.insert(p.key.clone()), "two of one queue at once");
                        }
                        for p in due {
                            let q: usize = p.key.parse().unwrap();
                            if op == 1 {
                                if let Some(t) = last[q] {
                                    prop_assert!(now >= t + 1000, "released {} ms after the last", now - t);
                                }
                                last[q] = Some(now);
                                out[q].push(p.id.clone());
                                book.released(&p, now);
                            } else {
                                book.failed(&p, now);
                            }
                        }
                    }
                }
            }
            for (k, got) in out.iter().enumerate() {
                let expected: Vec<String> = (0..got.len()).map(|i| format!("{k}-{i}")).collect();
                prop_assert_eq!(got, &expected);
            }
        }
    }
}
