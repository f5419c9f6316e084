//! Timeouts, not lockouts, after failed AUTH (seed 004): per client IP and per attempted
//! user name, the delay before answering a failed AUTH doubles with each recent failure and
//! decays with time, so a legitimate user is slowed down for a while, never locked out.
//!
//! The failure count is an Exim EWMA rate (strict, period = `decay`) per key: after k quick
//! failures it is about k, and it falls by a factor e every `decay`. The delay is
//! `base · 2^(n−1)` for the larger of the two counts n, capped at `max`.

use std::time::Duration;

use super::model::AuthDelay;
use crate::limit::spec::UpdateMode;
use crate::limit::unique::UniqueKind;
use crate::store::{Algorithm, Decision, LimitRequest};

/// The two store keys of a failed attempt.
pub fn failure_keys(cfg: &AuthDelay, ip: Option<&str>, user: Option<&str>) -> Vec<String> {
    let mut keys = Vec::with_capacity(2);
    if let Some(ip) = ip {
        keys.push(format!("authfail/{}s/ip/{ip}", cfg.decay_secs));
    }
    if let Some(u) = user.filter(|u| !u.is_empty()) {
        keys.push(format!(
            "authfail/{}s/user/{}",
            cfg.decay_secs,
            u.to_lowercase()
        ));
    }
    keys
}

/// The decision that counts one failure under `keys`.
pub fn failure_decision(cfg: &AuthDelay, keys: Vec<String>) -> Decision {
    Decision {
        limits: keys
            .into_iter()
            .map(|key| LimitRequest {
                key,
                algorithm: Algorithm::Ewma {
                    limit: f64::INFINITY,
                    period_secs: cfg.decay_secs,
                    mode: UpdateMode::Strict,
                    unique_kind: UniqueKind::Bloom,
                },
                count: 1.0,
                unique: None,
                blocking: false,
            })
            .collect(),
    }
}

/// The delay for a failure count `n` (the EWMA rate after this failure).
pub fn delay_for(cfg: &AuthDelay, n: f64) -> Duration {
    // Failures in quick succession decay by a hair between them: count to 1/100.
    let n = (n * 100.0).round() / 100.0;
    if !n.is_finite() || n < 1.0 {
        return if n.is_finite() && n > 0.0 {
            cfg.base
        } else {
            Duration::ZERO
        };
    }
    // 2^(n-1), computed in floating point and capped before it can overflow.
    let factor = (n - 1.0).min(30.0).exp2();
    cfg.base.mul_f64(factor).min(cfg.max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn cfg() -> AuthDelay {
        AuthDelay {
            enabled: true,
            base: Duration::from_millis(100),
            max: Duration::from_secs(3),
            decay_secs: 600,
        }
    }

    #[test]
    fn doubling_then_capped() {
        let c = cfg();
        assert_eq!(delay_for(&c, 1.0), Duration::from_millis(100));
        assert_eq!(delay_for(&c, 2.0), Duration::from_millis(200));
        assert_eq!(delay_for(&c, 3.0), Duration::from_millis(400));
        assert_eq!(delay_for(&c, 50.0), Duration::from_secs(3));
        assert_eq!(delay_for(&c, 0.0), Duration::ZERO);
        assert_eq!(delay_for(&c, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn failures_double_and_decay() {
        let c = cfg();
        let store = MemoryStore::default();
        let keys = failure_keys(&c, Some("192.0.2.1"), Some("Alice"));
        assert_eq!(keys[1], "authfail/600s/user/alice");
        let d = failure_decision(&c, keys);
        let t0 = 1_000_000_000_000i64;
        let mut delays = Vec::new();
        for i in 0..3 {
            let r = store.decide_at(t0 + i * 1000, &d);
            let n = r.limits.iter().map(|l| l.value).fold(0.0, f64::max);
            delays.push(delay_for(&c, n).as_millis() / 10 * 10);
        }
        assert_eq!(delays, vec![100, 200, 400]);
        // After ten decay periods the count is nearly gone: back to the base delay.
        let r = store.decide_at(t0 + 6_000_000_000, &d);
        let n = r.limits.iter().map(|l| l.value).fold(0.0, f64::max);
        assert!(delay_for(&c, n) <= Duration::from_millis(110), "{n}");
    }
}
