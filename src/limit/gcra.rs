//! A token bucket as GCRA (generic cell rate algorithm) with weighted events
//! and an exact retry-after.
//!
//! State is one number per key, the theoretical arrival time (TAT), kept in
//! nanoseconds so that weights and retry times are exact integers.

use super::rate::{parse_burst, Rate, RateError};

/// A GCRA limit: `burst` events at once, refilled at `rate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcraSpec {
    /// Bucket capacity in events (> 0).
    pub burst: f64,
    /// Refill rate.
    pub rate: Rate,
}

/// The result of one GCRA evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcraOutcome {
    /// Bucket level after the event if it passes, in events (0..=burst); when
    /// over, the level the event would have produced.
    pub level: f64,
    /// The event does not fit.
    pub over: bool,
    /// The TAT to store when the event is admitted.
    pub next_tat_ns: i64,
    /// Nanoseconds until this event would fit (0 when it fits now; `None`
    /// when it never fits because its weight exceeds the burst).
    pub retry_after_ns: Option<i64>,
}

impl GcraSpec {
    /// Builds a spec; `burst` and the rate must be positive and finite.
    pub fn new(burst: f64, rate: Rate) -> Option<GcraSpec> {
        (burst > 0.0
            && burst.is_finite()
            && rate.per_second() > 0.0
            && rate.per_second().is_finite())
        .then_some(GcraSpec { burst, rate })
    }

    /// Parses Rspamd-style values: `burst = "100"` (k/m/g allowed) and
    /// `rate = "10 / 1min"`.
    pub fn parse(burst: &str, rate: &str) -> Result<GcraSpec, RateError> {
        let burst_v = parse_burst(burst)?;
        let rate = Rate::parse(rate)?;
        GcraSpec::new(burst_v, rate).ok_or_else(|| RateError::NotPositive(burst.trim().to_string()))
    }

    /// Nanoseconds per event (the emission interval T).
    pub fn emission_ns(&self) -> f64 {
        1e9 / self.rate.per_second()
    }

    /// Evaluates an event of weight `count` at `now_ns` against `tat_ns`
    /// (`None` for a new key, which is the same as a TAT in the past).
    pub fn evaluate(&self, tat_ns: Option<i64>, now_ns: i64, count: f64) -> GcraOutcome {
        let t = self.emission_ns();
        let tau = (self.burst * t).round() as i64;
        let inc = (count.max(0.0) * t).round() as i64;
        let tat = tat_ns.map_or(now_ns, |v| v.max(now_ns));
        let new_tat = tat.saturating_add(inc);
        let allow_at = new_tat.saturating_sub(tau);
        let level = (new_tat - now_ns) as f64 / t;
        if allow_at <= now_ns {
            GcraOutcome {
                level,
                over: false,
                next_tat_ns: new_tat,
                retry_after_ns: Some(0),
            }
        } else {
            let retry = if inc > tau {
                None
            } else {
                Some(allow_at - now_ns)
            };
            GcraOutcome {
                level,
                over: true,
                next_tat_ns: tat,
                retry_after_ns: retry,
            }
        }
    }

    /// The bucket level (events) a stored TAT represents at `now_ns`.
    pub fn level_at(&self, tat_ns: i64, now_ns: i64) -> f64 {
        (tat_ns.saturating_sub(now_ns)).max(0) as f64 / self.emission_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> GcraSpec {
        // burst 3, one event per second
        GcraSpec::new(3.0, Rate::new(1.0, 1.0).unwrap()).unwrap()
    }

    #[test]
    fn burst_then_refill() {
        let s = spec();
        let mut tat = None;
        for _ in 0..3 {
            let o = s.evaluate(tat, 0, 1.0);
            assert!(!o.over);
            tat = Some(o.next_tat_ns);
        }
        let o = s.evaluate(tat, 0, 1.0);
        assert!(o.over);
        assert_eq!(o.retry_after_ns, Some(1_000_000_000));
        let o = s.evaluate(tat, 1_000_000_000, 1.0);
        assert!(!o.over);
    }

    #[test]
    fn weights() {
        let s = spec();
        let o = s.evaluate(None, 0, 2.0);
        assert!(!o.over);
        let o2 = s.evaluate(Some(o.next_tat_ns), 0, 2.0);
        assert!(o2.over);
        assert_eq!(o2.retry_after_ns, Some(1_000_000_000));
        assert_eq!(s.evaluate(None, 0, 4.0).retry_after_ns, None);
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(GcraSpec::new(0.0, Rate::new(1.0, 1.0).unwrap()).is_none());
    }
}
