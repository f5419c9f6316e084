//! Exim's exponentially weighted moving average, bit for bit (exim-ratelimit.md §4).

use super::spec::UpdateMode;

/// The stored state of one EWMA key: time of the last stored update and the rate then.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EwmaState {
    /// Time of the last stored update, microseconds since the Unix epoch.
    pub time_us: i64,
    /// Smoothed rate in events per period.
    pub rate: f64,
}

/// Parameters of one EWMA evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EwmaParams {
    /// The limit m; the event is over when `rate >= limit`.
    pub limit: f64,
    /// The smoothing period p in whole seconds.
    pub period_secs: u32,
    /// Leaky, strict or readonly.
    pub mode: UpdateMode,
}

/// The result of one EWMA evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EwmaOutcome {
    /// The computed rate (`$sender_rate`).
    pub rate: f64,
    /// `rate >= limit`.
    pub over: bool,
    /// Whether Exim would store the new state (strict, or leaky and not over).
    pub store: bool,
    /// The state to store when `store` is true.
    pub next: EwmaState,
}

/// Converts microseconds to Exim's `sec + usec / 1e6` double.
///
/// The order matters for the last bits: Exim builds each time stamp from
/// `gettimeofday` this way before subtracting.
pub fn exim_seconds(time_us: i64) -> f64 {
    let secs = time_us.div_euclid(1_000_000);
    let usec = time_us.rem_euclid(1_000_000);
    secs as f64 + usec as f64 / 1_000_000.0
}

/// Computes the new rate exactly as Exim does.
///
/// `prev` is the stored state (`None` for a new key), `count` the amount of
/// this event (0 for readonly or an already-seen unique event).
pub fn next_rate(prev: Option<&EwmaState>, now_us: i64, count: f64, period_secs: u32) -> f64 {
    let Some(prev) = prev else {
        return count;
    };
    let mut interval = exim_seconds(now_us) - exim_seconds(prev.time_us);
    if interval <= 0.0 {
        interval = 1e-9;
    }
    let i_over_p = interval / f64::from(period_secs);
    let a = (-i_over_p).exp();
    // Exim: ((1 - a) * count) / i_over_p + a * rate, left to right.
    let mut rate = (1.0 - a) * count / i_over_p + a * prev.rate;
    if rate < count {
        rate = count;
    }
    rate
}

/// Exim's test of a rate against its limit m: over when `rate >= m`. Exim computes
/// `rate < limit ? FAIL : OK`, so a NaN on either side is over (and m = 0 always is).
pub fn is_over(rate: f64, limit: f64) -> bool {
    rate.partial_cmp(&limit) != Some(std::cmp::Ordering::Less)
}

/// One evaluation of an Exim limit on a key's state.
pub fn evaluate(
    prev: Option<&EwmaState>,
    now_us: i64,
    count: f64,
    params: &EwmaParams,
) -> EwmaOutcome {
    let count = if params.mode == UpdateMode::Readonly {
        0.0
    } else {
        count
    };
    let rate = next_rate(prev, now_us, count, params.period_secs);
    let over = is_over(rate, params.limit);
    let store = match params.mode {
        UpdateMode::Strict => true,
        UpdateMode::Leaky => !over,
        UpdateMode::Readonly => false,
    };
    EwmaOutcome {
        rate,
        over,
        store,
        next: EwmaState {
            time_us: now_us,
            rate,
        },
    }
}

/// The rate a stored state has decayed to at `now_us` (a readonly view).
pub fn decayed_rate(state: &EwmaState, now_us: i64, period_secs: u32) -> f64 {
    next_rate(Some(state), now_us, 0.0, period_secs)
}

/// Seconds to wait before an event of `count` would be under `limit`, given
/// the rate `rate` that stays stored now. `None` when no wait is enough
/// (`count >= limit`: the floor keeps the rate at least `count`).
///
/// Uses `rate · e^(−w/p) + count < limit`, which is sufficient because the
/// EWMA adds less than `count` after any positive gap.
pub fn retry_after_secs(rate: f64, count: f64, limit: f64, period_secs: u32) -> Option<f64> {
    if limit.partial_cmp(&count) != Some(std::cmp::Ordering::Greater) || !rate.is_finite() {
        return None;
    }
    let room = limit - count;
    if rate < room {
        return Some(0.0);
    }
    Some(f64::from(period_secs) * (rate / room).ln())
}

/// Tony Finch's burst size: events that can be sent at interval `i` seconds,
/// starting from rate `r0`, before the pure EWMA reaches `m`
/// (`n = rk · ln((r0 − rk)/(m − rk))` with `rk = p/i`). Infinite when `rk <= m`.
pub fn burst_size(period: f64, limit: f64, interval: f64, r0: f64) -> f64 {
    let rk = period / interval;
    if rk <= limit {
        return f64::INFINITY;
    }
    rk * ((r0 - rk) / (limit - rk)).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_key_is_count() {
        assert_eq!(next_rate(None, 5, 3.0, 3600), 3.0);
    }

    #[test]
    fn same_instant_uses_1e9() {
        let s = EwmaState {
            time_us: 10,
            rate: 1.0,
        };
        let r = next_rate(Some(&s), 10, 1.0, 3600);
        assert!((r - 2.00000008).abs() < 1e-8, "{r}");
        let back = next_rate(Some(&s), 5, 1.0, 3600);
        assert_eq!(r, back);
    }

    #[test]
    fn floor_applies_only_with_count() {
        let s = EwmaState {
            time_us: 0,
            rate: 1.0,
        };
        assert_eq!(next_rate(Some(&s), 100_000_000, 1.0, 1), 1.0);
        let r = next_rate(Some(&s), 3_000_000, 0.0, 1);
        assert!((r - (-3f64).exp()).abs() < 1e-15);
    }

    #[test]
    fn retry_after() {
        assert_eq!(retry_after_secs(6.0, 1.0, 1.0, 10), None);
        assert_eq!(retry_after_secs(0.5, 1.0, 2.0, 10), Some(0.0));
        let w = retry_after_secs(6.0, 0.0, 2.0, 10).unwrap();
        assert!((w - 10.0 * 3f64.ln()).abs() < 1e-12);
    }
}
