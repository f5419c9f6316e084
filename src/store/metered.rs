//! A [`Store`] that counts and times the decisions of the store inside it, and the store's
//! own figures (memory keys, Redis failover) in the exposition.

use std::sync::Arc;
use std::time::Instant;

use crate::metrics::Metrics;
use crate::store::open::Opened;
use crate::store::redis::failover::RECORD_OUTCOMES;
use crate::store::{
    Decision, DecisionResult, Guarded, Record, Restriction, Store, StoreError, StoreFuture,
};

/// Makes the store's own figures part of the exposition: key counts and evictions of the
/// memory store, or the state and counts of Redis behind its failure mode.
pub fn register_store_figures(metrics: &Metrics, store: &Opened) {
    match store {
        Opened::Memory(m) => {
            let m = m.clone();
            metrics.scrape("store", move |w| {
                let s = m.stats();
                w.gauges(
                    "floodgate_store_keys",
                    "Keys in the memory store, by record kind.",
                    "kind",
                    [
                        ("ewma", s.ewma_keys),
                        ("unique", s.unique_keys),
                        ("gcra", s.gcra_keys),
                        ("bucket", s.bucket_keys),
                    ]
                    .map(|(k, n)| (k, i64::try_from(n).unwrap_or(i64::MAX))),
                );
                w.counter(
                    "floodgate_store_evictions_total",
                    "Keys evicted from the memory store because of the key cap.",
                    s.evictions,
                );
            });
        }
        Opened::Redis(f) => {
            let f = f.clone();
            metrics.scrape("store", move |w| {
                let s = f.stats();
                w.gauge(
                    "floodgate_redis_down",
                    "1 while Redis is considered down and the failure mode applies.",
                    i64::from(s.down),
                );
                w.counters(
                    "floodgate_redis_decisions_total",
                    "Decisions by who answered them.",
                    "answered_by",
                    [
                        ("redis", s.redis_decisions),
                        ("fallback", s.fallback_decisions),
                    ],
                );
                w.counter(
                    "floodgate_redis_closed_failures_total",
                    "Decisions refused because a closed limit could not be checked.",
                    s.closed_failures,
                );
                w.counter(
                    "floodgate_redis_errors_total",
                    "Redis errors and timeouts.",
                    s.redis_errors,
                );
                w.counters(
                    "floodgate_redis_switches_total",
                    "Switches between Redis and the failure mode.",
                    "to",
                    [
                        ("fallback", s.switches_to_fallback),
                        ("redis", s.switches_to_redis),
                    ],
                );
                w.gauge(
                    "floodgate_redis_restrictions_copied",
                    "Restrictions in force in this node's copy of the restricted set.",
                    i64::try_from(s.restrictions_copied).unwrap_or(i64::MAX),
                );
                w.counter(
                    "floodgate_redis_restricted_here_total",
                    "Restrictions made on this node while Redis could not be written.",
                    s.restricted_here,
                );
                w.gauge(
                    "floodgate_redis_restrictions_pending",
                    "Restrictions made on this node that wait to be recorded in Redis.",
                    i64::try_from(s.restrictions_pending).unwrap_or(i64::MAX),
                );
                w.counters(
                    "floodgate_redis_restrictions_recorded_total",
                    "Restrictions made while Redis was away, by what recording them did.",
                    "outcome",
                    std::array::from_fn::<_, 4, _>(|i| (RECORD_OUTCOMES[i], s.recorded[i])),
                );
            });
        }
    }
}

/// Wraps a store: every decision is counted, timed into the latency histogram, and its
/// failures counted by kind. Inspect and reset pass straight through (they are the admin's
/// own reads, not traffic).
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl MeteredStore {
    /// `inner`, reporting to `metrics`.
    pub fn new(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> MeteredStore {
        MeteredStore { inner, metrics }
    }
}

impl Store for MeteredStore {
    fn decide<'a>(&'a self, decision: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        Box::pin(async move {
            let start = Instant::now();
            let r = self.inner.decide(decision).await;
            self.metrics
                .store_decision(start.elapsed(), r.as_ref().err().map(StoreError::label));
            r
        })
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        self.inner.inspect(key)
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        self.inner.reset(key)
    }

    fn may_restrict(&self) -> bool {
        self.inner.may_restrict()
    }

    fn restricted<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, Option<Restriction>> {
        self.inner.restricted(keys)
    }

    fn restrict<'a>(&'a self, r: Restriction, dur: Option<i64>) -> StoreFuture<'a, Restriction> {
        self.inner.restrict(r, dur)
    }

    fn release<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Restriction>> {
        self.inner.release(key)
    }

    fn restrictions(&self) -> StoreFuture<'_, Vec<Restriction>> {
        self.inner.restrictions()
    }

    fn restrict_once<'a>(
        &'a self,
        r: Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (Restriction, bool)> {
        self.inner.restrict_once(r, dur)
    }

    fn decide_unless_restricted<'a>(
        &'a self,
        keys: &'a [String],
        decision: &'a Decision,
    ) -> StoreFuture<'a, Guarded> {
        // A decision like any other: counted and timed (the check rides along).
        Box::pin(async move {
            let start = Instant::now();
            let r = self.inner.decide_unless_restricted(keys, decision).await;
            self.metrics
                .store_decision(start.elapsed(), r.as_ref().err().map(StoreError::label));
            r
        })
    }

    fn expire_restrictions(&self) -> StoreFuture<'_, Vec<Restriction>> {
        self.inner.expire_restrictions()
    }

    fn ratio<'a>(
        &'a self,
        key: &'a str,
        window: crate::store::RatioWindow,
        add: crate::store::RatioCounts,
    ) -> StoreFuture<'a, crate::store::RatioCounts> {
        self.inner.ratio(key, window, add)
    }

    fn campaign_join<'a>(
        &'a self,
        join: &'a crate::store::CampaignJoin,
    ) -> StoreFuture<'a, crate::store::CampaignLedger> {
        self.inner.campaign_join(join)
    }

    fn campaign_mark<'a>(
        &'a self,
        id: &'a str,
        limit: &'a str,
        restricted: &'a [String],
        every_us: i64,
    ) -> StoreFuture<'a, crate::store::MarkAnswer> {
        self.inner.campaign_mark(id, limit, restricted, every_us)
    }

    fn campaigns(&self) -> StoreFuture<'_, Vec<crate::store::Campaign>> {
        self.inner.campaigns()
    }

    fn save_baselines<'a>(
        &'a self,
        limit: &'a str,
        set: &'a crate::store::BaselineSet,
    ) -> StoreFuture<'a, ()> {
        self.inner.save_baselines(limit, set)
    }

    fn load_baselines<'a>(
        &'a self,
        limit: &'a str,
    ) -> StoreFuture<'a, Option<crate::store::BaselineSet>> {
        self.inner.load_baselines(limit)
    }

    fn shares_state(&self) -> bool {
        self.inner.shares_state()
    }

    fn publish_held<'a>(
        &'a self,
        node: &'a str,
        counts: &'a [(String, u64)],
        gone: &'a [String],
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, ()> {
        self.inner.publish_held(node, counts, gone, ttl)
    }

    fn held_counts<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<(String, u64)>> {
        self.inner.held_counts(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::gcra::GcraSpec;
    use crate::limit::rate::Rate;
    use crate::store::{Algorithm, LimitRequest, MemoryStore};

    #[test]
    fn store_errors_are_labelled_as_the_metrics_count_them() {
        let labels = [
            StoreError::Unavailable(String::new()).label(),
            StoreError::Invalid(String::new()).label(),
        ];
        assert_eq!(labels, crate::metrics::STORE_ERRORS);
    }

    #[tokio::test]
    async fn counts_decisions() {
        let m = Arc::new(Metrics::new());
        let s = MeteredStore::new(Arc::new(MemoryStore::default()), m.clone());
        let d = Decision {
            limits: vec![LimitRequest {
                key: "k".into(),
                algorithm: Algorithm::Gcra(
                    GcraSpec::new(2.0, Rate::new(1.0, 60.0).unwrap()).unwrap(),
                ),
                count: 1.0,
                unique: None,
                blocking: true,
            }],
        };
        for _ in 0..3 {
            s.decide(&d).await.unwrap();
        }
        assert_eq!(m.store_decisions.get(), 3);
        assert_eq!(m.store_latency.snapshot().1, 3);
        assert_eq!(s.inspect("k").await.unwrap().len(), 1);
        assert_eq!(s.reset("k").await.unwrap(), 1);
        assert_eq!(m.store_decisions.get(), 3);
    }
}
