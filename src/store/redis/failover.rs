//! What a decision gets when Redis does not answer, per limit or globally:
//!
//! * `open`: the limit allows, and the event is counted in a local memory store;
//! * `closed`: the decision fails with [`StoreError::Unavailable`], which the
//!   policy answers with `451 4.3.0`;
//! * `local`: the local memory store decides until Redis answers again.
//!
//! After a failure the store stays on the fallback without waiting for Redis
//! again; one decision per probe interval tries Redis, and the first that
//! succeeds switches back (the local state is then dropped, so the next
//! outage starts clean). Every switch is logged and counted.

use super::RedisStore;
use crate::store::{
    Decision, DecisionResult, Guarded, MemoryStore, Record, Store, StoreError, StoreFuture,
};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One failure mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Allow, and count locally.
    Open,
    /// Defer (451 4.3.0).
    Closed,
    /// Decide with the local memory store.
    #[default]
    Local,
}

impl FailureMode {
    /// Parses `open`, `closed` or `local`.
    pub fn parse(word: &str) -> Option<FailureMode> {
        match word {
            "open" => Some(FailureMode::Open),
            "closed" => Some(FailureMode::Closed),
            "local" => Some(FailureMode::Local),
            _ => None,
        }
    }

    /// The config word.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::Local => "local",
        }
    }
}

/// The global failure mode with per-limit overrides.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FailurePolicy {
    /// Mode of limits no override names.
    pub default: FailureMode,
    /// `(key prefix, mode)`: a limit whose key starts with the prefix uses
    /// the mode (the longest matching prefix wins).
    pub overrides: Vec<(String, FailureMode)>,
}

impl FailurePolicy {
    /// The mode of the limit with key `key`.
    pub fn mode_for(&self, key: &str) -> FailureMode {
        self.overrides
            .iter()
            .filter(|(p, _)| key.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
            .map_or(self.default, |&(_, m)| m)
    }
}

/// Counters of a [`FailoverStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailoverStats {
    /// Redis is considered down now.
    pub down: bool,
    /// Decisions answered by Redis.
    pub redis_decisions: u64,
    /// Decisions answered by the fallback.
    pub fallback_decisions: u64,
    /// Decisions refused because a closed limit could not be checked.
    pub closed_failures: u64,
    /// Redis errors and timeouts.
    pub redis_errors: u64,
    /// Switches from Redis to the fallback.
    pub switches_to_fallback: u64,
    /// Switches back to Redis.
    pub switches_to_redis: u64,
}

/// A Redis store with a failure mode.
pub struct FailoverStore {
    redis: Arc<RedisStore>,
    local: MemoryStore,
    policy: FailurePolicy,
    probe_every_us: i64,
    down: AtomicBool,
    last_probe_us: AtomicI64,
    probing: AtomicBool,
    redis_decisions: AtomicU64,
    fallback_decisions: AtomicU64,
    closed_failures: AtomicU64,
    redis_errors: AtomicU64,
    switches_to_fallback: AtomicU64,
    switches_to_redis: AtomicU64,
}

impl std::fmt::Debug for FailoverStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailoverStore")
            .field("redis", &self.redis)
            .field("policy", &self.policy)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Clears the probe flag however the probe ends.
struct ProbeGuard<'a>(&'a AtomicBool);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl FailoverStore {
    /// Wraps `redis`; while it is down, one decision per `probe_interval` tries it again.
    pub fn new(
        redis: Arc<RedisStore>,
        policy: FailurePolicy,
        probe_interval: Duration,
    ) -> FailoverStore {
        FailoverStore {
            redis,
            local: MemoryStore::default(),
            policy,
            probe_every_us: i64::try_from(probe_interval.as_micros()).unwrap_or(i64::MAX),
            down: AtomicBool::new(false),
            last_probe_us: AtomicI64::new(0),
            probing: AtomicBool::new(false),
            redis_decisions: AtomicU64::new(0),
            fallback_decisions: AtomicU64::new(0),
            closed_failures: AtomicU64::new(0),
            redis_errors: AtomicU64::new(0),
            switches_to_fallback: AtomicU64::new(0),
            switches_to_redis: AtomicU64::new(0),
        }
    }

    /// The Redis store inside.
    pub fn redis(&self) -> &Arc<RedisStore> {
        &self.redis
    }

    /// The failure policy.
    pub fn policy(&self) -> &FailurePolicy {
        &self.policy
    }

    /// Counters and the current state.
    pub fn stats(&self) -> FailoverStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FailoverStats {
            down: self.down.load(Ordering::Acquire),
            redis_decisions: l(&self.redis_decisions),
            fallback_decisions: l(&self.fallback_decisions),
            closed_failures: l(&self.closed_failures),
            redis_errors: l(&self.redis_errors),
            switches_to_fallback: l(&self.switches_to_fallback),
            switches_to_redis: l(&self.switches_to_redis),
        }
    }

    /// Whether this call should use Redis: always when up; when down, one
    /// caller per probe interval.
    fn try_redis(&self) -> Option<Option<ProbeGuard<'_>>> {
        if !self.down.load(Ordering::Acquire) {
            return Some(None);
        }
        let now = crate::store::now_micros();
        let last = self.last_probe_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) < self.probe_every_us {
            return None;
        }
        if self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        self.last_probe_us.store(now, Ordering::Relaxed);
        Some(Some(ProbeGuard(&self.probing)))
    }

    fn went_down(&self, err: &StoreError) {
        self.redis_errors.fetch_add(1, Ordering::Relaxed);
        self.last_probe_us
            .store(crate::store::now_micros(), Ordering::Relaxed);
        if !self.down.swap(true, Ordering::AcqRel) {
            self.switches_to_fallback.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, mode = self.policy.default.as_str(),
                "rate-limit store: Redis unavailable, using the failure mode");
        }
    }

    fn came_back(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            self.switches_to_redis.fetch_add(1, Ordering::Relaxed);
            self.local.clear();
            tracing::info!("rate-limit store: Redis answers again, shared limits resume");
        }
    }

    /// Applies `decision` with the failure modes, at the local clock.
    pub fn fallback(&self, decision: &Decision) -> Result<DecisionResult, StoreError> {
        self.fallback_at(crate::store::now_micros(), decision)
    }

    /// [`FailoverStore::fallback`] at `now_us`.
    pub fn fallback_at(
        &self,
        now_us: i64,
        decision: &Decision,
    ) -> Result<DecisionResult, StoreError> {
        // As the Redis store would (encode): an invalid request is an error, not a fallback.
        decision.validate()?;
        let modes: Vec<FailureMode> = decision
            .limits
            .iter()
            .map(|l| self.policy.mode_for(&l.key))
            .collect();
        if decision
            .limits
            .iter()
            .zip(&modes)
            .any(|(l, &m)| l.blocking && m == FailureMode::Closed)
        {
            self.closed_failures.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Unavailable(
                "Redis is unavailable and a limit of this decision fails closed".into(),
            ));
        }
        self.fallback_decisions.fetch_add(1, Ordering::Relaxed);
        // Open (and non-blocking closed) limits count locally but never refuse.
        let mut local = decision.clone();
        for (l, &m) in local.limits.iter_mut().zip(&modes) {
            if m != FailureMode::Local {
                l.blocking = false;
            }
        }
        let mut result = self.local.decide_at(now_us, &local);
        for (r, &m) in result.limits.iter_mut().zip(&modes) {
            if m != FailureMode::Local {
                r.over = false;
                r.retry_after = Some(Duration::ZERO);
            }
        }
        Ok(result)
    }

    /// Decides with Redis when it is up (or probing), else with the fallback.
    pub async fn decide_with(
        &self,
        now_us: Option<i64>,
        decision: &Decision,
    ) -> Result<DecisionResult, StoreError> {
        let Some(probe) = self.try_redis() else {
            return self.fallback_local(now_us, decision);
        };
        match self.redis.decide_at(now_us, decision).await {
            Ok(r) => {
                self.redis_decisions.fetch_add(1, Ordering::Relaxed);
                // Only a probe brings Redis back. A call sent while Redis was up can be
                // answered after a later call found it down: that late answer says nothing
                // about Redis now, and switching back on it would clear the local counts.
                if probe.is_some() {
                    self.came_back();
                }
                Ok(r)
            }
            Err(StoreError::Invalid(e)) => Err(StoreError::Invalid(e)),
            Err(e) => {
                self.went_down(&e);
                self.fallback_local(now_us, decision)
            }
        }
    }

    /// The restricted set could not be read: the store's failure mode decides, as for a
    /// limit: closed refuses (the error, answered 451), open and local let the event
    /// through (there is no local copy of the set). Logged either way.
    fn unreadable(&self, e: StoreError) -> Result<(), StoreError> {
        let mode = self.policy.default;
        tracing::warn!(error = %e, failure_mode = mode.as_str(), "restricted set not readable");
        if mode == FailureMode::Closed {
            Err(e)
        } else {
            Ok(())
        }
    }

    fn fallback_local(
        &self,
        now_us: Option<i64>,
        decision: &Decision,
    ) -> Result<DecisionResult, StoreError> {
        self.fallback_at(now_us.unwrap_or_else(crate::store::now_micros), decision)
    }
}

impl Store for FailoverStore {
    fn decide<'a>(&'a self, decision: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        Box::pin(self.decide_with(None, decision))
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        Box::pin(async move {
            match self.redis.inspect_key(key).await {
                Ok(r) => Ok(r),
                Err(_) if self.down.load(Ordering::Acquire) => Ok(self.local.inspect_key(key)),
                Err(e) => Err(e),
            }
        })
    }

    fn may_restrict(&self) -> bool {
        self.redis.restrict_hint()
    }

    fn restricted<'a>(
        &'a self,
        keys: &'a [String],
    ) -> StoreFuture<'a, Option<crate::store::Restriction>> {
        Box::pin(async move {
            match self.redis.restricted_keys(keys).await {
                Ok(r) => Ok(r),
                Err(e) => self.unreadable(e).map(|()| None),
            }
        })
    }

    fn decide_unless_restricted<'a>(
        &'a self,
        keys: &'a [String],
        decision: &'a Decision,
    ) -> StoreFuture<'a, Guarded> {
        Box::pin(async move {
            let Some(probe) = self.try_redis() else {
                // Redis is down and this is no probe: the failure mode answers for the set,
                // the fallback for the limits.
                self.unreadable(StoreError::Unavailable("Redis is down".into()))?;
                return self.fallback_local(None, decision).map(Guarded::Decided);
            };
            match self.redis.decide_guarded(keys, decision).await {
                Ok(g) => {
                    self.redis_decisions.fetch_add(1, Ordering::Relaxed);
                    if probe.is_some() {
                        self.came_back();
                    }
                    Ok(g)
                }
                Err(StoreError::Invalid(e)) => Err(StoreError::Invalid(e)),
                Err(e) => {
                    self.went_down(&e);
                    self.unreadable(e)?;
                    self.fallback_local(None, decision).map(Guarded::Decided)
                }
            }
        })
    }

    fn restrict_once<'a>(
        &'a self,
        r: crate::store::Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (crate::store::Restriction, bool)> {
        Box::pin(async move { self.redis.restrict_key_once(&r, dur).await })
    }

    fn expire_restrictions(&self) -> StoreFuture<'_, Vec<crate::store::Restriction>> {
        Box::pin(self.redis.sweep_restrictions())
    }

    fn restrict<'a>(
        &'a self,
        r: crate::store::Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, crate::store::Restriction> {
        Box::pin(async move { self.redis.restrict_key(&r, dur).await })
    }

    fn release<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<crate::store::Restriction>> {
        Box::pin(self.redis.release_key(key))
    }

    fn restrictions(&self) -> StoreFuture<'_, Vec<crate::store::Restriction>> {
        Box::pin(self.redis.restriction_list())
    }

    fn ratio<'a>(
        &'a self,
        key: &'a str,
        window: crate::store::RatioWindow,
        add: crate::store::RatioCounts,
    ) -> StoreFuture<'a, crate::store::RatioCounts> {
        Box::pin(async move {
            match self.redis.ratio_key(key, window, add).await {
                Ok(r) => Ok(r),
                // While Redis is down the local store keeps counting, as for limits.
                // The store's failure mode decides, as for a limit: closed refuses (451),
                // open and local count locally meanwhile.
                Err(e) if self.policy.default == FailureMode::Closed => Err(e),
                Err(_) => Ok(self
                    .local
                    .ratio_at(key, window, add, crate::store::now_micros())),
            }
        })
    }

    fn save_baselines<'a>(
        &'a self,
        limit: &'a str,
        set: &'a crate::store::BaselineSet,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.redis.save_baseline_set(limit, set))
    }

    fn load_baselines<'a>(
        &'a self,
        limit: &'a str,
    ) -> StoreFuture<'a, Option<crate::store::BaselineSet>> {
        Box::pin(self.redis.load_baseline_set(limit))
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        Box::pin(async move {
            let local = self.local.reset_key(key);
            match self.redis.reset_key(key).await {
                Ok(n) => Ok(n),
                Err(_) if self.down.load(Ordering::Acquire) => Ok(local),
                Err(e) => Err(e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let p = FailurePolicy {
            default: FailureMode::Open,
            overrides: vec![
                ("1h/".into(), FailureMode::Local),
                ("1h/per_rcpt/".into(), FailureMode::Closed),
            ],
        };
        assert_eq!(p.mode_for("1d/x"), FailureMode::Open);
        assert_eq!(p.mode_for("1h/per_mail/x"), FailureMode::Local);
        assert_eq!(p.mode_for("1h/per_rcpt/x"), FailureMode::Closed);
        for w in ["open", "closed", "local"] {
            assert_eq!(FailureMode::parse(w).unwrap().as_str(), w);
        }
        assert_eq!(FailureMode::parse("x"), None);
    }
}
