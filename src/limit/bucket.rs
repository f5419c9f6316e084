//! An Rspamd-compatible leaky bucket (peers.md §1.3): a level that drains at
//! `rate`, a reservation for events that passed the check but are not yet
//! committed, and dynamic multipliers moved by whether messages turn out ham or spam.
//!
//! One deliberate difference: the capacity never falls below one event, so
//! the dynamic burst multiplier cannot deadlock a key (Rspamd issue #4637).

use super::rate::{parse_burst, Rate, RateError};

/// Dynamic multiplier settings (Rspamd's defaults via `Default`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Multipliers {
    /// Leak multiplier factor for ham (1.01).
    pub ham_factor_rate: f64,
    /// Leak multiplier factor for spam (0.99).
    pub spam_factor_rate: f64,
    /// Capacity multiplier factor for ham (1.02).
    pub ham_factor_burst: f64,
    /// Capacity multiplier factor for spam (0.98).
    pub spam_factor_burst: f64,
    /// Bound of the leak multiplier: it stays within about [1/x, x] (5).
    pub max_rate_mult: f64,
    /// Bound of the capacity multiplier (10).
    pub max_bucket_mult: f64,
}

impl Default for Multipliers {
    fn default() -> Self {
        Multipliers {
            ham_factor_rate: 1.01,
            spam_factor_rate: 0.99,
            ham_factor_burst: 1.02,
            spam_factor_burst: 0.98,
            max_rate_mult: 5.0,
            max_bucket_mult: 10.0,
        }
    }
}

/// A bucket: capacity `burst`, draining at `rate`, optionally dynamic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketSpec {
    /// Capacity in events.
    pub burst: f64,
    /// Leak rate.
    pub rate: Rate,
    /// Dynamic multipliers (`None`: Rspamd's default since 3.9, off).
    pub dynamic: Option<Multipliers>,
}

impl BucketSpec {
    /// Parses Rspamd's `burst = "100"` and `rate = "10 / 1min"` values.
    pub fn parse(burst: &str, rate: &str) -> Result<BucketSpec, RateError> {
        Ok(BucketSpec {
            burst: parse_burst(burst)?,
            rate: Rate::parse(rate)?,
            dynamic: None,
        })
    }

    /// Rspamd's simplified form `"2 / 5m"`: burst 2, leaking 2 per 5 minutes.
    pub fn parse_simple(text: &str) -> Result<BucketSpec, RateError> {
        let rate = Rate::parse(text)?;
        Ok(BucketSpec {
            burst: rate.amount(),
            rate,
            dynamic: None,
        })
    }
}

/// What the message turned out to be (ham, spam or neither), which moves the dynamic
/// multipliers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageClass {
    /// Ham: multipliers grow.
    Ham,
    /// Spam/junk: multipliers shrink.
    Spam,
    /// Anything else: no change.
    Other,
}

/// One bucket operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BucketOp {
    /// The check (prefilter): leak, compare, reserve when allowed.
    Check,
    /// The message was accepted: commit the reservation, move the multipliers.
    Commit(MessageClass),
    /// The message was refused or dropped: release the reservation.
    Cancel,
}

/// The state of one bucket key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    /// Time of the last leak/update, milliseconds.
    pub last_ms: f64,
    /// Committed level.
    pub level: f64,
    /// Reserved (in-flight) amount.
    pub pending: f64,
    /// Dynamic leak multiplier × 10000.
    pub dyn_rate: u32,
    /// Dynamic capacity multiplier × 10000.
    pub dyn_burst: u32,
}

/// The result of one bucket operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketOutcome {
    /// Level after leaking (before this event is committed).
    pub level: f64,
    /// The check refused the event.
    pub over: bool,
    /// State to store (a check that is over stores the leak only).
    pub next: BucketState,
    /// Milliseconds until the event would fit, when it can ever fit.
    pub retry_after_ms: Option<f64>,
}

impl BucketSpec {
    fn leak_per_ms(&self, st: &BucketState) -> f64 {
        let base = self.rate.per_second() / 1000.0;
        if self.dynamic.is_some() {
            let m = f64::from(st.dyn_rate) / 10000.0;
            base * if m == 0.0 { 0.0001 } else { m }
        } else {
            base
        }
    }

    /// Capacity with the dynamic multiplier, never below one event.
    pub fn capacity(&self, st: &BucketState) -> f64 {
        let cap = if self.dynamic.is_some() {
            self.burst * f64::from(st.dyn_burst) / 10000.0
        } else {
            self.burst
        };
        cap.max(1.0)
    }

    /// Applies `op` with `n` events (recipients, at least 1) at `now_ms`.
    pub fn apply(
        &self,
        prev: Option<&BucketState>,
        now_ms: f64,
        n: f64,
        op: BucketOp,
    ) -> BucketOutcome {
        let n = n.max(1.0);
        match op {
            BucketOp::Check => self.check(prev, now_ms, n),
            BucketOp::Commit(class) => {
                let mut st = prev.copied().unwrap_or(BucketState {
                    last_ms: now_ms,
                    level: 0.0,
                    pending: n,
                    dyn_rate: 10000,
                    dyn_burst: 10000,
                });
                if let Some(m) = self.dynamic {
                    let (fr, fb) = match class {
                        MessageClass::Ham => (m.ham_factor_rate, m.ham_factor_burst),
                        MessageClass::Spam => (m.spam_factor_rate, m.spam_factor_burst),
                        MessageClass::Other => (1.0, 1.0),
                    };
                    st.dyn_rate = step_mult(st.dyn_rate, fr, m.max_rate_mult);
                    st.dyn_burst = step_mult(st.dyn_burst, fb, m.max_bucket_mult);
                }
                st.level = if st.level < 0.0 { n } else { st.level + n };
                st.pending = (st.pending - n).max(0.0);
                st.last_ms = now_ms;
                BucketOutcome {
                    level: st.level,
                    over: false,
                    next: st,
                    retry_after_ms: Some(0.0),
                }
            }
            BucketOp::Cancel => {
                let mut st = prev.copied().unwrap_or(BucketState {
                    last_ms: now_ms,
                    level: 0.0,
                    pending: 0.0,
                    dyn_rate: 10000,
                    dyn_burst: 10000,
                });
                st.pending = (st.pending - n).max(0.0);
                st.last_ms = now_ms;
                BucketOutcome {
                    level: st.level,
                    over: false,
                    next: st,
                    retry_after_ms: Some(0.0),
                }
            }
        }
    }

    fn check(&self, prev: Option<&BucketState>, now_ms: f64, n: f64) -> BucketOutcome {
        let Some(prev) = prev else {
            // A new key always passes and reserves n.
            let st = BucketState {
                last_ms: now_ms,
                level: 0.0,
                pending: n,
                dyn_rate: 10000,
                dyn_burst: 10000,
            };
            return BucketOutcome {
                level: 0.0,
                over: false,
                next: st,
                retry_after_ms: Some(0.0),
            };
        };
        let mut st = *prev;
        st.level = st.level.max(0.0);
        st.pending = st.pending.max(0.0);
        let leak = self.leak_per_ms(&st);
        if st.level > 0.0 && st.last_ms < now_ms {
            let leaked = ((now_ms - st.last_ms) * leak).min(st.level);
            st.level -= leaked;
            st.last_ms = now_ms;
        }
        let cap = self.capacity(&st);
        let total = st.pending + n;
        if st.level + total > cap {
            let excess = st.level + total - cap;
            // Only committed level drains; in-flight reservations must settle first.
            let retry = (total <= cap && leak > 0.0).then(|| excess / leak);
            BucketOutcome {
                level: st.level,
                over: true,
                next: st,
                retry_after_ms: retry,
            }
        } else {
            st.pending += n;
            BucketOutcome {
                level: st.level,
                over: false,
                next: st,
                retry_after_ms: Some(0.0),
            }
        }
    }
}

/// Rspamd's multiplier step: the bound is tested before multiplying.
fn step_mult(cur: u32, factor: f64, max: f64) -> u32 {
    if max <= 1.0 {
        return cur;
    }
    let mut x = f64::from(cur) / 10000.0;
    if (factor > 1.0 && x < max) || (factor < 1.0 && x > 1.0 / max) {
        x *= factor;
    }
    ((x * 10000.0).floor() as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(burst: f64, per_sec: f64) -> BucketSpec {
        BucketSpec {
            burst,
            rate: Rate::new(per_sec, 1.0).unwrap(),
            dynamic: None,
        }
    }

    fn run(s: &BucketSpec, st: &mut Option<BucketState>, now: f64, op: BucketOp) -> BucketOutcome {
        let o = s.apply(st.as_ref(), now, 1.0, op);
        *st = Some(o.next);
        o
    }

    #[test]
    fn capacity_and_leak() {
        let s = spec(2.0, 1.0);
        let mut st = None;
        for _ in 0..2 {
            assert!(!run(&s, &mut st, 0.0, BucketOp::Check).over);
            run(&s, &mut st, 0.0, BucketOp::Commit(MessageClass::Other));
        }
        let o = run(&s, &mut st, 0.0, BucketOp::Check);
        assert!(o.over);
        assert_eq!(o.retry_after_ms, Some(1000.0));
        assert!(!run(&s, &mut st, 1000.0, BucketOp::Check).over);
    }

    #[test]
    fn reservation_blocks_then_cancel_frees() {
        let s = spec(1.0, 1.0);
        let mut st = None;
        assert!(!run(&s, &mut st, 0.0, BucketOp::Check).over);
        assert!(run(&s, &mut st, 0.0, BucketOp::Check).over);
        run(&s, &mut st, 0.0, BucketOp::Cancel);
        assert!(!run(&s, &mut st, 0.0, BucketOp::Check).over);
    }

    #[test]
    fn multiplier_bounds_and_overshoot() {
        let m = Multipliers::default();
        let mut x = 10000;
        for _ in 0..1000 {
            x = step_mult(x, m.spam_factor_burst, m.max_bucket_mult);
        }
        // Bound tested before multiplying: overshoots just below 0.1.
        assert!((981..1000).contains(&x), "{x}");
        let mut y = 10000;
        for _ in 0..1000 {
            y = step_mult(y, m.ham_factor_rate, m.max_rate_mult);
        }
        assert!((50000..50500).contains(&y), "{y}");
    }

    #[test]
    fn no_deadlock_issue_4637() {
        let mut s = spec(10.0, 1.0);
        s.dynamic = Some(Multipliers::default());
        let st = BucketState {
            last_ms: 0.0,
            level: 0.0,
            pending: 0.0,
            dyn_rate: 10000,
            dyn_burst: 987,
        };
        assert!(s.capacity(&st) >= 1.0);
        let o = s.apply(Some(&st), 1.0, 1.0, BucketOp::Check);
        assert!(!o.over);
    }
}
