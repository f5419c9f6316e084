//! Ratio windows: the two counts of a ratio limit (numerator and denominator) over a
//! sliding window, kept as whole numbers per time slot.
//!
//! A window of period `p` is cut into [`SLOTS`] slots of `p / SLOTS` each (slot `s` holds
//! the events whose time `t` has `floor(t / slot) = s`). The counts of a key at time `t`
//! are the sums of the current slot and the `SLOTS` slots before it: every event is counted
//! for at least `p` and at most `p + p / SLOTS` after it happened (at `p = 1h`: between 60
//! and 65 minutes). Within that the counts are exact integers; there is no decay and no
//! rounding. The memory store keeps one small vector per key; Redis keeps one hash per key
//! (fields `n<slot>` and `d<slot>`, see [`crate::store::redis`]) on the server's clock, with
//! an expiry of one window after its last write.

use std::collections::VecDeque;

use dashmap::DashMap;

/// Slots per window.
pub const SLOTS: i64 = 12;

/// Most keys the memory store keeps ratio windows for; past it, windows that ended are
/// dropped first, then arbitrary ones.
pub const MAX_KEYS: usize = 1_000_000;

/// The length of a ratio window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatioWindow {
    /// The period, microseconds (at least [`SLOTS`]).
    pub period_us: i64,
}

impl RatioWindow {
    /// A window of `period_secs` seconds (at least one second).
    pub fn from_secs(period_secs: u64) -> RatioWindow {
        RatioWindow {
            period_us: i64::try_from(period_secs.max(1))
                .unwrap_or(i64::MAX / 1_000_000)
                .saturating_mul(1_000_000),
        }
    }

    /// The length of one slot, microseconds.
    pub fn slot_us(self) -> i64 {
        (self.period_us / SLOTS).max(1)
    }

    /// The slot of time `now_us`.
    pub fn slot_of(self, now_us: i64) -> i64 {
        now_us.div_euclid(self.slot_us())
    }

    /// Whether slot `s` still counts at slot `now` (the current slot and the `SLOTS`
    /// before it).
    pub fn counts(self, s: i64, now: i64) -> bool {
        s <= now && s > now - SLOTS - 1
    }
}

/// The two counts of a ratio.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RatioCounts {
    /// The numerator.
    pub num: u64,
    /// The denominator.
    pub den: u64,
}

impl RatioCounts {
    /// Whether nothing is to be added.
    pub fn is_zero(self) -> bool {
        self.num == 0 && self.den == 0
    }
}

/// One key's slots, oldest first: `(slot, num, den)`.
#[derive(Debug, Default)]
struct Slots(VecDeque<(i64, u64, u64)>);

impl Slots {
    fn prune(&mut self, w: RatioWindow, now: i64) {
        while self.0.front().is_some_and(|&(s, _, _)| !w.counts(s, now)) {
            self.0.pop_front();
        }
    }

    fn add(&mut self, now: i64, add: RatioCounts) {
        match self.0.back_mut() {
            Some((s, n, d)) if *s == now => {
                *n = n.saturating_add(add.num);
                *d = d.saturating_add(add.den);
            }
            _ => self.0.push_back((now, add.num, add.den)),
        }
    }

    fn sum(&self) -> RatioCounts {
        self.0
            .iter()
            .fold(RatioCounts::default(), |a, &(_, n, d)| RatioCounts {
                num: a.num.saturating_add(n),
                den: a.den.saturating_add(d),
            })
    }
}

/// The ratio windows of the memory store.
#[derive(Debug, Default)]
pub struct RatioTable {
    map: DashMap<String, (RatioWindow, Slots)>,
}

impl RatioTable {
    /// Adds `add` to `key`'s window at `now_us` and answers the counts over the window
    /// (`add` zero: a read that writes nothing).
    pub fn apply(&self, key: &str, w: RatioWindow, add: RatioCounts, now_us: i64) -> RatioCounts {
        let now = w.slot_of(now_us);
        if add.is_zero() {
            return match self.map.get_mut(key) {
                Some(mut e) => {
                    let (_, slots) = &mut *e;
                    slots.prune(w, now);
                    slots.sum()
                }
                None => RatioCounts::default(),
            };
        }
        if self.map.len() >= MAX_KEYS && !self.map.contains_key(key) {
            self.make_room(now_us);
        }
        let mut e = self
            .map
            .entry(key.to_string())
            .or_insert_with(|| (w, Slots::default()));
        let (win, slots) = &mut *e;
        *win = w;
        slots.prune(w, now);
        slots.add(now, add);
        slots.sum()
    }

    /// Drops windows with nothing left in them at `now_us`, then, while still full, any.
    fn make_room(&self, now_us: i64) {
        self.map.retain(|_, (w, slots)| {
            slots.prune(*w, w.slot_of(now_us));
            !slots.0.is_empty()
        });
        let excess = (self.map.len() + 1).saturating_sub(MAX_KEYS);
        if excess > 0 {
            let victims: Vec<String> = self
                .map
                .iter()
                .take(excess)
                .map(|e| e.key().clone())
                .collect();
            for k in victims {
                self.map.remove(&k);
            }
        }
    }

    /// Forgets `key`'s window; whether it had one.
    pub fn reset(&self, key: &str) -> bool {
        self.map.remove(key).is_some()
    }

    /// Windows kept.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no window is kept.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = 3_600_000_000;

    fn add(n: u64, d: u64) -> RatioCounts {
        RatioCounts { num: n, den: d }
    }

    #[test]
    fn counts_within_the_window_and_forgets_after() {
        let t = RatioTable::default();
        let w = RatioWindow::from_secs(3600);
        assert_eq!(t.apply("k", w, add(1, 4), 0), add(1, 4));
        assert_eq!(t.apply("k", w, add(2, 0), H / 2), add(3, 4));
        // A read writes nothing.
        assert_eq!(t.apply("k", w, add(0, 0), H - 1), add(3, 4));
        assert_eq!(t.apply("other", w, add(0, 0), H - 1), add(0, 0));
        assert_eq!(t.len(), 1);
        // The first events are counted for at least the period, at most a slot more.
        assert_eq!(t.apply("k", w, add(0, 0), H + H / 12 - 1), add(3, 4));
        assert_eq!(t.apply("k", w, add(0, 0), H + H / 12), add(2, 0));
        assert_eq!(t.apply("k", w, add(0, 0), 2 * H), add(0, 0));
        assert!(t.reset("k"));
        assert!(!t.reset("k"));
    }

    #[test]
    fn negative_times_use_floor_slots() {
        let w = RatioWindow::from_secs(12);
        assert_eq!(w.slot_of(-1), -1);
        assert_eq!(w.slot_of(0), 0);
        assert_eq!(w.slot_of(999_999), 0);
        assert_eq!(w.slot_of(1_000_000), 1);
    }

    proptest! {
        /// Against a plain list of timed events: the sums are those of the events whose
        /// slot is among the last SLOTS + 1.
        #[test]
        fn agrees_with_a_list(events in proptest::collection::vec((0i64..10_000, 0u64..5, 0u64..5), 1..60), period in 12u64..200) {
            let w = RatioWindow::from_secs(period);
            let t = RatioTable::default();
            let mut time = 0i64;
            let mut seen: Vec<(i64, u64, u64)> = Vec::new();
            for (dt, n, d) in events {
                time += dt * 10_000;
                let got = t.apply("k", w, add(n, d), time);
                seen.push((time, n, d));
                let now = w.slot_of(time);
                let want = seen.iter().filter(|(at, _, _)| w.counts(w.slot_of(*at), now))
                    .fold(add(0, 0), |a, &(_, n, d)| add(a.num + n, a.den + d));
                prop_assert_eq!(got, want);
            }
        }
    }
}
