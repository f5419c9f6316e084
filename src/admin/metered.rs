//! A [`Store`] that counts and times the decisions of the store inside it.

use std::sync::Arc;
use std::time::Instant;

use super::Metrics;
use crate::store::{Decision, DecisionResult, Guarded, Record, Restriction, Store, StoreFuture};

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
                .store_decision(start.elapsed(), r.as_ref().err());
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
                .store_decision(start.elapsed(), r.as_ref().err());
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::gcra::GcraSpec;
    use crate::limit::rate::Rate;
    use crate::store::{Algorithm, LimitRequest, MemoryStore};

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
