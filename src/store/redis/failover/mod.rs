//! What a decision gets when Redis does not answer, per limit or globally:
//!
//! * `open`: the limit allows, and the event is counted in a local memory store;
//! * `closed`: the decision fails with [`StoreError::Unavailable`], which the
//!   policy answers with `451 4.3.0`;
//! * `local`: the local memory store decides until Redis answers again.
//!
//! After a failure the store stays on the fallback without waiting for Redis
//! again; one decision (or sweep) per probe interval tries Redis, and the first that
//! succeeds switches back (the local counts are then dropped, so the next
//! outage starts clean). Every switch is logged and counted.
//!
//! The failure mode applies to counting, never to a restriction: each node keeps a copy of
//! the restricted set ([`RestrictedCopy`]), refreshed by the sweep every second and by
//! every restriction and release it makes itself. While Redis cannot be read, a key the
//! copy holds stays restricted (in all three modes); only for the other keys does the mode
//! decide (closed: 451; open and local: let through). While Redis cannot be written, a
//! restriction is made in the copy and recorded in Redis by the first sweep that reaches it
//! (see [`super::copy`] for when it is not). Warnings that would come once per message
//! while Redis is down are told once per [`crate::lograte::EVERY`] with a count.

mod restricted;

use super::copy::RestrictedCopy;
use super::RedisStore;
use crate::lograte::RepeatedWarning;
use crate::store::{
    now_micros, Decision, DecisionResult, Guarded, MemoryStore, Record, Restriction, Store,
    StoreError, StoreFuture,
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
    /// Restrictions made on this node while Redis could not be written.
    pub restricted_here: u64,
    /// Of those, still waiting to be recorded in Redis.
    pub restrictions_pending: u64,
    /// Restrictions made here that reached Redis, by what recording them did: recorded,
    /// kept (Redis held another), released (released meanwhile), expired.
    pub recorded: [u64; 4],
    /// Restrictions the local copy holds (shared and pending).
    pub restrictions_copied: u64,
}

/// The outcomes of recording a restriction made here, in the order of
/// [`FailoverStats::recorded`] (the `outcome` label of their metric).
pub const RECORD_OUTCOMES: [&str; 4] = ["recorded", "kept", "released", "expired"];

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
    copy: RestrictedCopy,
    restricted_here: AtomicU64,
    recorded: [AtomicU64; 4],
    unreadable: RepeatedWarning,
    unwritable: RepeatedWarning,
    not_recorded: RepeatedWarning,
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
            copy: RestrictedCopy::default(),
            restricted_here: AtomicU64::new(0),
            recorded: Default::default(),
            unreadable: RepeatedWarning::new(
                "restricted set not readable; keys this node's copy holds stay restricted",
            ),
            unwritable: RepeatedWarning::new(
                "restrict: Redis cannot be written; restricted on this node, recorded in \
                 Redis when it answers",
            ),
            not_recorded: RepeatedWarning::new(
                "restricted set: the restrictions made while Redis was away are not all \
                 recorded yet",
            ),
        }
    }

    /// This node's copy of the restricted set.
    pub fn restricted_copy(&self) -> &RestrictedCopy {
        &self.copy
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
            restricted_here: l(&self.restricted_here),
            restrictions_pending: self.copy.pending_len() as u64,
            recorded: self.recorded.each_ref().map(l),
            restrictions_copied: self.copy.list(now_micros()).len() as u64,
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

    /// Sends `call` to Redis when it is up or due a probe, and keeps the failover's state:
    /// an answered probe brings Redis back, a failure takes it down. `Ok(Ok(answer))` when
    /// Redis answered; `Ok(Err(why))` when the fallback must answer (Redis is down, or failed
    /// now); `Err` for a request Redis refused as invalid, which no fallback can answer.
    ///
    /// Only a probe brings Redis back: a call sent while Redis was up can be answered after
    /// a later call found it down, and that late answer says nothing about Redis now
    /// (switching back on it would clear the local counts).
    async fn ask<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<Result<T, StoreError>, StoreError> {
        let Some(probe) = self.try_redis() else {
            return Ok(Err(StoreError::Unavailable("Redis is down".into())));
        };
        match call.await {
            Ok(answer) => {
                if probe.is_some() {
                    self.came_back();
                }
                Ok(Ok(answer))
            }
            Err(StoreError::Invalid(e)) => Err(StoreError::Invalid(e)),
            Err(e) => {
                self.went_down(&e);
                Ok(Err(e))
            }
        }
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
        match self.ask(self.redis.decide_at(now_us, decision)).await? {
            Ok(r) => {
                self.redis_decisions.fetch_add(1, Ordering::Relaxed);
                Ok(r)
            }
            Err(_) => self.fallback_local(now_us, decision),
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
        !self.copy.is_empty() || self.redis.restrict_hint()
    }

    fn restricted<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, Option<Restriction>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(None);
            }
            // A restriction made here that Redis does not know yet.
            if let Some(r) = self.copy.check_pending(keys, now_micros()) {
                return Ok(Some(r));
            }
            match self.ask(self.redis.restricted_keys(keys)).await? {
                Ok(r) => Ok(r),
                Err(e) => self.offline_check(keys, e),
            }
        })
    }

    fn decide_unless_restricted<'a>(
        &'a self,
        keys: &'a [String],
        decision: &'a Decision,
    ) -> StoreFuture<'a, Guarded> {
        Box::pin(async move {
            if let Some(r) = self.copy.check_pending(keys, now_micros()) {
                return Ok(Guarded::Restricted(r));
            }
            match self.ask(self.redis.decide_guarded(keys, decision)).await? {
                Ok(g) => {
                    self.redis_decisions.fetch_add(1, Ordering::Relaxed);
                    Ok(g)
                }
                // Redis is down: the copy answers for the set (the failure mode for keys it
                // does not hold), the fallback for the limits.
                Err(e) => self.offline_guarded(keys, decision, e),
            }
        })
    }

    fn restrict_once<'a>(
        &'a self,
        r: Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (Restriction, bool)> {
        Box::pin(async move {
            let key = std::slice::from_ref(&r.key);
            if let Some(old) = self.copy.check_pending(key, now_micros()) {
                return Ok((old, false));
            }
            match self.ask(self.redis.restrict_key_once(&r, dur)).await? {
                Ok((r, made)) => {
                    self.copy.learn(r.clone());
                    Ok((r, made))
                }
                Err(e) => Ok(self.restrict_here(r, dur, true, &e)),
            }
        })
    }

    fn expire_restrictions(&self) -> StoreFuture<'_, Vec<Restriction>> {
        Box::pin(async move {
            self.flush_warnings();
            // Restrictions made here that ended before Redis knew them: this node tells.
            let mut ended = self.copy.purge(now_micros());
            // Redis down (`Ok(Err(_))`): the ended ones of the copy are all there is to tell.
            if let Err(e) = self.ask(self.sync(&mut ended)).await {
                tracing::warn!(error = %e, "restricted set: cannot bring the copy and Redis together");
            }
            Ok(ended)
        })
    }

    fn restrict<'a>(&'a self, r: Restriction, dur: Option<i64>) -> StoreFuture<'a, Restriction> {
        Box::pin(async move {
            match self.ask(self.redis.restrict_key(&r, dur)).await? {
                Ok(r) => {
                    self.copy.learn(r.clone());
                    Ok(r)
                }
                Err(e) => Ok(self.restrict_here(r, dur, false, &e).0),
            }
        })
    }

    /// Ends the restriction of `key`. A restriction only this node holds (made while Redis
    /// could not be written) ends here; one Redis holds needs Redis: while it is away the
    /// release is refused (the error), since other nodes would go on refusing the key and
    /// Redis would still hold it when it answers again.
    fn release<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Restriction>> {
        Box::pin(async move {
            let here = self.copy.release_pending(key, now_micros());
            let down = |e: StoreError| {
                if here.is_some() {
                    return Ok(here.clone());
                }
                if self.copy.is_shared(key, now_micros()) {
                    return Err(StoreError::Unavailable(format!(
                        "{key:?} is restricted fleet-wide and Redis cannot be written ({e}); \
                         release it when Redis answers"
                    )));
                }
                Err(e)
            };
            let released = match self.ask(self.redis.release_key(key)).await? {
                Ok(r) => {
                    self.copy.forget(key);
                    Ok(r.or(here))
                }
                Err(e) => down(e),
            };
            if matches!(released, Ok(Some(_))) {
                // This node's own campaigns (kept while Redis is down) learn of it too.
                self.local.campaign_released(key);
            }
            released
        })
    }

    /// Every restriction in force: Redis' with the ones made here not recorded yet; while
    /// Redis cannot be read, this node's copy.
    fn restrictions(&self) -> StoreFuture<'_, Vec<Restriction>> {
        Box::pin(async move {
            match self.ask(self.redis.restriction_list()).await? {
                Ok(mut list) => {
                    // Where Redis holds the key too, Redis' restriction is the one that
                    // stays (see `copy::Recorded::Kept`).
                    let here: Vec<Restriction> = self
                        .copy
                        .pending(now_micros())
                        .into_iter()
                        .filter(|h| !list.iter().any(|r| r.key == h.key))
                        .collect();
                    list.extend(here);
                    list.sort_by(|a, b| a.key.cmp(&b.key));
                    Ok(list)
                }
                Err(_) => Ok(self.copy.list(now_micros())),
            }
        })
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

    fn campaign_join<'a>(
        &'a self,
        join: &'a crate::store::CampaignJoin,
    ) -> StoreFuture<'a, crate::store::CampaignLedger> {
        Box::pin(async move {
            match self.redis.campaign_join_values(join).await {
                Ok(r) => Ok(r),
                // While Redis is down this node keeps its own campaigns: the copies it sees
                // are still grouped and counted.
                Err(e) if self.policy.default == FailureMode::Closed => Err(e),
                Err(_) => self.local.campaign_join(join).await,
            }
        })
    }

    fn campaign_mark<'a>(
        &'a self,
        id: &'a str,
        limit: &'a str,
        restricted: &'a [String],
        every_us: i64,
    ) -> StoreFuture<'a, crate::store::MarkAnswer> {
        Box::pin(async move {
            let local = self
                .local
                .campaign_mark(id, limit, restricted, every_us)
                .await;
            match self
                .redis
                .campaign_mark_id(id, limit, restricted, every_us)
                .await
            {
                Ok(a) => Ok(a),
                Err(_) => local,
            }
        })
    }

    fn campaigns(&self) -> StoreFuture<'_, Vec<crate::store::Campaign>> {
        Box::pin(async move {
            match self.redis.campaign_list().await {
                Ok(r) => Ok(r),
                Err(_) => self.local.campaigns().await,
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

    fn shares_state(&self) -> bool {
        true
    }

    fn publish_held<'a>(
        &'a self,
        node: &'a str,
        counts: &'a [(String, u64)],
        gone: &'a [String],
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.redis.publish_held_counts(node, counts, gone, ttl))
    }

    fn held_counts<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<(String, u64)>> {
        Box::pin(self.redis.held_counts_of(key))
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
mod tests;
