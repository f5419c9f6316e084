//! Exim's answer for a leaky limit whose earlier events are still reserved.
//!
//! Leaky Exim limits on recipients and bytes are charged only when upstream accepts the
//! message, so while a transaction is open its own events are not in the store yet. Exim
//! would have stored each of them at its own time; to give Exim's answer for the next event,
//! the check replays them, in order and at their own times, over the stored record with the
//! exact EWMA formula ([`crate::limit::ewma::evaluate`]), then evaluates the new event. This
//! is the same arithmetic as the store's (`store/eval.rs`), run on a copy.

use std::time::Duration;

use crate::limit::ewma::{self, EwmaParams, EwmaState};
use crate::limit::spec::UpdateMode;
use crate::limit::unique::{set_expired, UniqueKind, UniqueSet};
use crate::store::Record;

/// One event of the replay: when it was checked, its amount and its unique value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Event<'a> {
    /// Check time, microseconds since the Unix epoch.
    pub time_us: i64,
    /// Amount (recipients, bytes).
    pub count: f64,
    /// The unique value, for `unique=` / `per_addr` limits.
    pub unique: Option<&'a str>,
}

/// The answer for the new event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Replayed {
    /// `$sender_rate`.
    pub rate: f64,
    /// `rate >= limit`.
    pub over: bool,
    /// How long until the same event would pass (zero when under).
    pub retry_after: Option<Duration>,
    /// The rate that stays if the event is not charged: the stored rate (this session's
    /// pending events included) decayed to the event's time.
    pub kept: f64,
    /// The amount the event counted (0 for a unique value already seen).
    pub count: f64,
    /// p in whole seconds.
    pub period_secs: u32,
}

impl Replayed {
    /// When the same event, compared with limit `limit` (this one's, or another limit's
    /// answered from this rate as Exim's cache does, §4 step 1), would pass: zero when
    /// under, `None` when no wait is enough. `charged`: whether this event is charged (then
    /// its rate stays, else [`Replayed::kept`]).
    pub fn retry_for(&self, limit: f64, charged: bool) -> Option<Duration> {
        if !ewma::is_over(self.rate, limit) {
            return Some(Duration::ZERO);
        }
        let base = if charged { self.rate } else { self.kept };
        ewma::retry_after_secs(base, self.count, limit, self.period_secs)
            .filter(|d| d.is_finite() && *d >= 0.0)
            .map(|d| Duration::from_secs_f64(d.min(1e12)))
    }
}

/// The limit being replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Limit {
    /// m.
    pub limit: f64,
    /// p in whole seconds.
    pub period_secs: u32,
    /// The set kind of a new unique set.
    pub unique_kind: UniqueKind,
}

/// The state being replayed: the EWMA record and, for unique limits, its set.
struct State {
    ewma: Option<EwmaState>,
    set: Option<(i64, UniqueSet)>,
}

impl State {
    fn from_records(records: &[Record], unique: bool) -> State {
        let mut s = State {
            ewma: None,
            set: None,
        };
        for r in records {
            match r {
                Record::Ewma(e) if !unique => s.ewma = Some(*e),
                Record::Unique(u) if unique => {
                    s.ewma = Some(u.state);
                    s.set = Some((u.created_s, u.set.clone()));
                }
                _ => {}
            }
        }
        s
    }

    /// Evaluates `ev` as Exim's leaky mode would (store/eval.rs `ewma` and `unique`):
    /// returns the outcome and the count that was used (0 for a value already seen).
    fn evaluate(&mut self, ev: &Event<'_>, limit: &Limit) -> (ewma::EwmaOutcome, f64) {
        let params = EwmaParams {
            limit: limit.limit,
            period_secs: limit.period_secs,
            mode: UpdateMode::Leaky,
        };
        let mut count = ev.count;
        if let Some(v) = ev.unique {
            let now_s = ev.time_us.div_euclid(1_000_000);
            // A missing or expired set is replaced by an empty one sized from the current m.
            let fresh = self
                .set
                .as_ref()
                .is_none_or(|(created, _)| set_expired(*created, now_s, limit.period_secs));
            if fresh {
                self.set = Some((now_s, UniqueSet::new(limit.unique_kind, limit.limit)));
            }
            if self.set.as_ref().is_some_and(|(_, s)| s.contains(v)) {
                count = 0.0;
            }
        }
        (
            ewma::evaluate(self.ewma.as_ref(), ev.time_us, count, &params),
            count,
        )
    }

    /// Stores an event's outcome (and inserts its unique value).
    fn store(&mut self, out: &ewma::EwmaOutcome, unique: Option<&str>) {
        self.ewma = Some(out.next);
        if let (Some(v), Some((_, set))) = (unique, self.set.as_mut()) {
            set.insert(v);
        }
    }
}

/// Exim's answer for `new` after `pending`, starting from the stored `records`.
///
/// Every pending event is stored whatever its replayed rate: it passed its own check and
/// will be charged when upstream accepts. (With no other session on the key, none of them
/// can be over here, as each was under when checked.)
pub(super) fn replay(
    records: &[Record],
    pending: &[Event<'_>],
    new: &Event<'_>,
    limit: &Limit,
) -> Replayed {
    let mut state = State::from_records(records, new.unique.is_some());
    for ev in pending {
        let (out, _) = state.evaluate(ev, limit);
        state.store(&out, ev.unique);
    }
    let before = state.ewma;
    let (out, count) = state.evaluate(new, limit);
    let kept = before.map_or(0.0, |p| {
        ewma::decayed_rate(&p, new.time_us, limit.period_secs)
    });
    let mut r = Replayed {
        rate: out.rate,
        over: out.over,
        retry_after: None,
        kept,
        count,
        period_secs: limit.period_secs,
    };
    // Over in leaky mode: nothing is stored, so the wait is from the rate that stays.
    r.retry_after = r.retry_for(limit.limit, false);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Algorithm, Decision, LimitRequest, MemoryStore};

    const LIMIT: Limit = Limit {
        limit: 3.0,
        period_secs: 3600,
        unique_kind: UniqueKind::Bloom,
    };

    fn request(count: f64, unique: Option<&str>) -> Decision {
        Decision {
            limits: vec![LimitRequest {
                key: if unique.is_some() { "unique/k" } else { "k" }.into(),
                algorithm: Algorithm::Ewma {
                    limit: LIMIT.limit,
                    period_secs: LIMIT.period_secs,
                    mode: UpdateMode::Leaky,
                    unique_kind: UniqueKind::Bloom,
                },
                count,
                unique: unique.map(str::to_string),
                blocking: true,
            }],
        }
    }

    /// Replaying the stored events gives the store's own answers, bit for bit.
    fn check_against_store(events: &[Event<'_>]) {
        let store = MemoryStore::default();
        for (i, ev) in events.iter().enumerate() {
            let key = if ev.unique.is_some() { "unique/k" } else { "k" };
            let records = store.inspect_key(key);
            let mine = replay(&records, &[], ev, &LIMIT);
            let theirs = store.decide_at(ev.time_us, &request(ev.count, ev.unique));
            let r = theirs.limits[0];
            assert_eq!(mine.rate.to_bits(), r.value.to_bits(), "event {i}");
            assert_eq!(mine.over, r.over, "event {i}");
            assert_eq!(mine.retry_after, r.retry_after, "event {i}");
        }
    }

    #[test]
    fn matches_the_store_one_by_one() {
        let evs: Vec<Event<'_>> = (0..6)
            .map(|i| Event {
                time_us: 1_700_000_000_000_000 + i * 300,
                count: 1.0,
                unique: None,
            })
            .collect();
        check_against_store(&evs);
    }

    #[test]
    fn pending_events_replay_like_stored_ones() {
        let store = MemoryStore::default();
        let mut pending = Vec::new();
        for i in 0..8i64 {
            let ev = Event {
                time_us: 1_700_000_000_000_000 + i * 300,
                count: 1.0,
                unique: None,
            };
            let mine = replay(&[], &pending, &ev, &LIMIT);
            let r = store.decide_at(ev.time_us, &request(1.0, None)).limits[0];
            assert_eq!(mine.rate.to_bits(), r.value.to_bits(), "event {i}");
            assert_eq!(mine.over, r.over, "event {i}");
            assert_eq!(mine.retry_after, r.retry_after, "event {i}");
            if !r.over {
                pending.push(ev);
            }
        }
        // Three pass, then every retry sees the same state.
        assert_eq!(pending.len(), 3);
    }

    #[test]
    fn unique_values_seen_in_pending_count_nothing() {
        let store = MemoryStore::default();
        let mut pending = Vec::new();
        for (i, v) in ["a", "b", "a", "c", "b", "d"].iter().enumerate() {
            let ev = Event {
                time_us: 1_700_000_000_000_000 + i as i64 * 1000,
                count: 1.0,
                unique: Some(v),
            };
            let mine = replay(&[], &pending, &ev, &LIMIT);
            let r = store.decide_at(ev.time_us, &request(1.0, Some(v))).limits[0];
            assert_eq!(mine.rate.to_bits(), r.value.to_bits(), "event {i}");
            assert_eq!(mine.over, r.over, "event {i}");
            if !r.over {
                pending.push(ev);
            }
        }
    }

    #[test]
    fn replay_over_a_stored_record() {
        let store = MemoryStore::default();
        let t0 = 1_700_000_000_000_000;
        store.decide_at(t0, &request(2.0, None));
        let records = store.inspect_key("k");
        let pending = [Event {
            time_us: t0 + 600_000_000,
            count: 1.0,
            unique: None,
        }];
        let new = Event {
            time_us: t0 + 900_000_000,
            count: 1.0,
            unique: None,
        };
        let mine = replay(&records, &pending, &new, &LIMIT);
        store.decide_at(pending[0].time_us, &request(1.0, None));
        let r = store.decide_at(new.time_us, &request(1.0, None)).limits[0];
        assert_eq!(mine.rate.to_bits(), r.value.to_bits());
        assert_eq!(mine.over, r.over);
        assert!(mine.over, "{}", mine.rate);
        assert!(mine.retry_after.is_some_and(|d| d > Duration::ZERO));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// For any burst, replaying the session's pending events over an empty record gives
        /// what the store answers when the same events are stored one by one.
        #[test]
        fn pending_replay_equals_sequential_store(
            steps in proptest::collection::vec((0i64..5_000_000_000, 0u8..4), 1..12),
        ) {
            let store = MemoryStore::default();
            let mut pending = Vec::new();
            let mut t = 1_700_000_000_000_000i64;
            for (gap, count) in steps {
                t += gap;
                let ev = Event { time_us: t, count: f64::from(count), unique: None };
                let mine = replay(&[], &pending, &ev, &LIMIT);
                let r = store.decide_at(t, &request(ev.count, None)).limits[0];
                proptest::prop_assert_eq!(mine.rate.to_bits(), r.value.to_bits());
                proptest::prop_assert_eq!(mine.over, r.over);
                proptest::prop_assert_eq!(mine.retry_after, r.retry_after);
                if !r.over {
                    pending.push(ev);
                }
            }
        }
    }
}
