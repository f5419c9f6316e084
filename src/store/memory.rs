//! The in-process store: sharded hash tables behind mutexes, one lock
//! section per decision, idle expiry and a key cap with eviction.

use super::eval::{self, Write};
use super::key::Lookup;
use super::shard::{kind_of, Shard};
use super::{
    same_target_ok, Algorithm, Decision, DecisionResult, LimitRequest, LimitResult, Record,
    RecordKind, Store, StoreFuture,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use smallvec::SmallVec;

/// One write to take back if the decision is refused: the locked shard (its position among
/// the decision's guards), the record kind, the request whose key it wrote, and the record
/// the key held before.
type Undo = (usize, RecordKind, usize, Option<Record>);

/// Settings of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Most keys kept (all record kinds together). When a shard is full the
    /// least recently updated sixteenth of it is evicted.
    pub max_keys: usize,
    /// Number of lock shards (rounded up to a power of two).
    pub shards: usize,
    /// Records not updated for this long are dropped by [`MemoryStore::expire_idle`]
    /// (token buckets are dropped as soon as they are full again, which is exact).
    pub idle_ttl: Duration,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_keys: 4_000_000,
            shards: 64,
            // Like exim_tidydb's default.
            idle_ttl: Duration::from_secs(30 * 86400),
        }
    }
}

/// Counters and sizes of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// EWMA keys.
    pub ewma_keys: usize,
    /// EWMA keys with unique sets.
    pub unique_keys: usize,
    /// GCRA keys.
    pub gcra_keys: usize,
    /// Bucket keys.
    pub bucket_keys: usize,
    /// Keys evicted because of the cap, since start.
    pub evictions: u64,
    /// Estimated heap bytes: table slots at their capacity, key texts, sets.
    pub approx_bytes: usize,
}

/// The in-memory store.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    per_shard_cap: usize,
    config: MemoryConfig,
    evictions: AtomicU64,
    restricted: super::RestrictedSet,
    ratios: super::ratio::RatioTable,
    baselines: super::baseline::BaselineShelf,
    campaigns: super::campaign::CampaignBook,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(MemoryConfig::default())
    }
}

impl MemoryStore {
    /// Remembers that an admin released `key` now, for the campaigns' evidence rule (see
    /// [`super::campaign`]).
    pub fn campaign_released(&self, key: &str) {
        self.campaigns.released(key, super::now_micros());
    }

    /// An empty store.
    pub fn new(config: MemoryConfig) -> MemoryStore {
        let n = config.shards.clamp(1, 1 << 16).next_power_of_two();
        let shards = (0..n).map(|_| Mutex::new(Shard::new())).collect();
        MemoryStore {
            shards,
            per_shard_cap: config.max_keys.div_ceil(n).max(1),
            config,
            evictions: AtomicU64::new(0),
            restricted: super::RestrictedSet::default(),
            ratios: super::ratio::RatioTable::default(),
            baselines: super::baseline::BaselineShelf::default(),
            campaigns: super::campaign::CampaignBook::default(),
        }
    }

    /// The per-key baselines (kept in the snapshot).
    pub fn baseline_shelf(&self) -> &super::baseline::BaselineShelf {
        &self.baselines
    }

    /// The restricted set (kept in the snapshot).
    pub fn restricted_set(&self) -> &super::RestrictedSet {
        &self.restricted
    }

    /// The configuration.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// The shard of a key: low bits of the second half of its id (the
    /// tables position records by the first half, which is independent).
    fn shard_of(&self, key: &Lookup<'_>) -> usize {
        (key.id().hi as usize) & (self.shards.len() - 1)
    }

    fn lock(&self, idx: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot leave a half-written record
        // (writes are single assignments), so a poisoned lock is usable.
        self.shards[idx].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes room for one new key in `shard` if it is at the cap.
    fn make_room(&self, shard: &mut Shard) {
        if shard.len() >= self.per_shard_cap {
            let n = (self.per_shard_cap / 16).max(1);
            let evicted = shard.evict_oldest(n);
            self.evictions.fetch_add(evicted as u64, Ordering::Relaxed);
        }
    }

    fn write(&self, shard: &mut Shard, req: &LimitRequest, key: &Lookup<'_>, write: Write<'_>) {
        if matches!(write, Write::Nothing) {
            return;
        }
        if shard.len() >= self.per_shard_cap && !shard.contains(kind_of(req), key) {
            self.make_room(shard);
        }
        shard.apply(key, write);
    }

    /// Applies one decision at time `now_us` (microseconds since the epoch).
    pub fn decide_at(&self, now_us: i64, decision: &Decision) -> DecisionResult {
        let mut out = DecisionResult {
            refused: false,
            limits: Vec::with_capacity(decision.limits.len()),
        };
        self.decide_into(now_us, decision, &mut out);
        out
    }

    /// Like [`MemoryStore::decide_at`], but writes the answer into `out`,
    /// reusing its vector: a caller that keeps `out` between decisions makes
    /// a one-limit decision on an existing key without heap allocation.
    pub fn decide_into(&self, now_us: i64, decision: &Decision, out: &mut DecisionResult) {
        out.limits.clear();
        out.refused = false;
        match decision.limits.as_slice() {
            [] => {}
            [req] => {
                // The fast path: one hash of the key text, one lock, no
                // lock ordering or undo log.
                let key = Lookup::new(&req.key);
                let mut shard = self.lock(self.shard_of(&key));
                let (result, write) = shard.eval(req, &key, now_us, false);
                self.write(&mut shard, req, &key, write);
                drop(shard);
                out.refused = req.blocking && result.over;
                out.limits.push(result);
            }
            reqs => self.decide_many(now_us, reqs, out),
        }
    }

    /// Several limits: lock every shard involved (in index order, so two
    /// decisions cannot deadlock), evaluate in order with writes visible to
    /// later limits, and on refusal undo and re-run with leaky writes suppressed.
    fn decide_many(&self, now_us: i64, reqs: &[LimitRequest], out: &mut DecisionResult) {
        // Bookkeeping stays inline (no allocation) up to INLINE limits.
        const INLINE: usize = 8;
        let mut keys: SmallVec<[Lookup<'_>; INLINE]> = SmallVec::new();
        let mut idx: SmallVec<[usize; INLINE]> = SmallVec::new();
        for r in reqs {
            let key = Lookup::new(&r.key);
            idx.push(self.shard_of(&key));
            keys.push(key);
        }
        // The distinct shards in ascending order, each locked once. A
        // decision has a handful of limits, so the quadratic scans are cheap.
        let mut guards: SmallVec<[(usize, MutexGuard<'_, Shard>); INLINE]> = SmallVec::new();
        let mut last: Option<usize> = None;
        while let Some(next) = idx
            .iter()
            .copied()
            .filter(|&i| last.is_none_or(|l| i > l))
            .min()
        {
            guards.push((next, self.lock(next)));
            last = Some(next);
        }
        let mut pos: SmallVec<[usize; INLINE]> = SmallVec::new();
        for &i in idx.iter() {
            pos.push(guards.iter().position(|(g, _)| *g == i).unwrap_or(0));
        }
        let mut undo: SmallVec<[Undo; INLINE]> = SmallVec::new();
        let results = &mut out.limits;
        for (n, (req, &p)) in reqs.iter().zip(pos.iter()).enumerate() {
            if let Some(result) = same(reqs, results, &keys, &pos, &guards, n, now_us) {
                results.push(result);
                continue;
            }
            let shard = &mut *guards[p].1;
            let key = &keys[n];
            let (result, write) = shard.eval(req, key, now_us, false);
            if !matches!(write, Write::Nothing) {
                let kind = kind_of(req);
                if !undo
                    .iter()
                    .any(|&(sp, k, i, _)| sp == p && k == kind && keys[i].id() == key.id())
                {
                    undo.push((p, kind, n, shard.get_record(kind, key)));
                }
            }
            self.write(shard, req, key, write);
            results.push(result);
        }
        let refused = reqs
            .iter()
            .zip(results.iter())
            .any(|(r, res)| r.blocking && res.over);
        if refused {
            while let Some((p, kind, n, old)) = undo.pop() {
                let shard = &mut *guards[p].1;
                match old {
                    Some(rec) => {
                        shard.put_record(&keys[n], rec);
                    }
                    None => {
                        shard.remove(kind, &keys[n]);
                    }
                }
            }
            results.clear();
            for (n, (req, &p)) in reqs.iter().zip(pos.iter()).enumerate() {
                if let Some(result) = same(reqs, results, &keys, &pos, &guards, n, now_us) {
                    results.push(result);
                    continue;
                }
                let shard = &mut *guards[p].1;
                let (result, write) = shard.eval(req, &keys[n], now_us, true);
                self.write(shard, req, &keys[n], write);
                results.push(result);
            }
        }
        out.refused = refused;
    }

    /// Every record stored under `key`, read-only.
    pub fn inspect_key(&self, key: &str) -> Vec<Record> {
        let key = Lookup::new(key);
        let shard = self.lock(self.shard_of(&key));
        [
            RecordKind::Ewma,
            RecordKind::Unique,
            RecordKind::Gcra,
            RecordKind::Bucket,
        ]
        .into_iter()
        .filter_map(|k| shard.get_record(k, &key))
        .collect()
    }

    /// Removes every record under `key`; returns how many.
    pub fn reset_key(&self, key: &str) -> usize {
        let ratio = usize::from(self.ratios.reset(key));
        let key = Lookup::new(key);
        let mut shard = self.lock(self.shard_of(&key));
        [
            RecordKind::Ewma,
            RecordKind::Unique,
            RecordKind::Gcra,
            RecordKind::Bucket,
        ]
        .into_iter()
        .filter(|&k| shard.remove(k, &key))
        .count()
            + ratio
    }

    /// Adds `add` to the ratio window of `key` at `now_us`; the counts over the window.
    pub fn ratio_at(
        &self,
        key: &str,
        window: super::RatioWindow,
        add: super::RatioCounts,
        now_us: i64,
    ) -> super::RatioCounts {
        self.ratios.apply(key, window, add, now_us)
    }

    /// Drops records idle for longer than the configured TTL at `now_us`.
    pub fn expire_idle(&self, now_us: i64) -> usize {
        let ttl = i64::try_from(self.config.idle_ttl.as_micros()).unwrap_or(i64::MAX);
        (0..self.shards.len())
            .map(|i| self.lock(i).expire(now_us, ttl))
            .sum()
    }

    /// Key counts, evictions and an estimate of the heap used.
    pub fn stats(&self) -> MemoryStats {
        let mut s = MemoryStats {
            evictions: self.evictions.load(Ordering::Relaxed),
            ..Default::default()
        };
        for i in 0..self.shards.len() {
            let shard = self.lock(i);
            s.ewma_keys += shard.ewma.len();
            s.unique_keys += shard.unique.len();
            s.gcra_keys += shard.gcra.len();
            s.bucket_keys += shard.bucket.len();
            s.approx_bytes += shard.approx_bytes();
        }
        s
    }

    /// Total number of keys.
    pub fn len(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).len()).sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` for every record, one shard locked at a time.
    pub fn for_each_record(&self, mut f: impl FnMut(&str, Record)) {
        for i in 0..self.shards.len() {
            self.lock(i).for_each(&mut f);
        }
    }

    /// Stores `rec` under `key`, replacing any record of the same kind
    /// (subject to the key cap).
    pub fn insert_record(&self, key: &str, rec: Record) {
        let key = Lookup::new(key);
        let mut shard = self.lock(self.shard_of(&key));
        if !shard.contains(rec.kind(), &key) {
            self.make_room(&mut shard);
        }
        shard.put_record(&key, rec);
    }

    /// Removes every record.
    pub fn clear(&self) {
        for i in 0..self.shards.len() {
            self.lock(i).clear();
        }
    }
}

/// The answer of request `n` when it is a valid [`Algorithm::Same`]: from the result of
/// its earlier EWMA request and the state now stored on that request's key. `None` for
/// any other request (an invalid `Same` is answered by [`Shard::eval`]).
fn same(
    reqs: &[LimitRequest],
    results: &[LimitResult],
    keys: &[Lookup<'_>],
    pos: &[usize],
    guards: &[(usize, MutexGuard<'_, Shard>)],
    n: usize,
    now_us: i64,
) -> Option<LimitResult> {
    let Algorithm::Same { of, limit } = reqs[n].algorithm else {
        return None;
    };
    if !same_target_ok(reqs, n, of) {
        return None;
    }
    let kept = guards[pos[of]].1.ewma_state(&reqs[of], &keys[of]);
    Some(eval::same(
        &reqs[of],
        &results[of],
        kept.as_ref(),
        limit,
        now_us,
    ))
}

/// Calls [`MemoryStore::expire_idle`] every `interval` until `shutdown` is
/// cancelled.
pub async fn run_expiry(
    store: std::sync::Arc<MemoryStore>,
    interval: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                let store = store.clone();
                let removed = tokio::task::spawn_blocking(move || store.expire_idle(super::now_micros())).await;
                if let Ok(n) = removed {
                    tracing::debug!(removed = n, "expired idle rate-limit keys");
                }
            }
        }
    }
}

impl Store for MemoryStore {
    fn decide<'a>(&'a self, decision: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        let result = decision
            .validate()
            .map(|()| self.decide_at(super::now_micros(), decision));
        Box::pin(std::future::ready(result))
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        let records = self.inspect_key(key);
        Box::pin(std::future::ready(Ok(records)))
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        let n = self.reset_key(key);
        Box::pin(std::future::ready(Ok(n)))
    }

    fn may_restrict(&self) -> bool {
        !self.restricted.is_empty()
    }

    fn restricted<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, Option<super::Restriction>> {
        let r = self.restricted.check(keys, super::now_micros());
        Box::pin(std::future::ready(Ok(r)))
    }

    fn restrict<'a>(
        &'a self,
        r: super::Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, super::Restriction> {
        let r = self.restricted.insert(r, dur, super::now_micros());
        Box::pin(std::future::ready(Ok(r)))
    }

    fn release<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<super::Restriction>> {
        let now = super::now_micros();
        let r = self.restricted.remove_in_force(key, now);
        if r.is_some() {
            // A campaign does not restrict it again for copies sent before now.
            self.campaigns.released(key, now);
        }
        Box::pin(std::future::ready(Ok(r)))
    }

    fn ratio<'a>(
        &'a self,
        key: &'a str,
        window: super::RatioWindow,
        add: super::RatioCounts,
    ) -> StoreFuture<'a, super::RatioCounts> {
        let now = super::now_micros();
        Box::pin(std::future::ready(Ok(self.ratio_at(key, window, add, now))))
    }

    fn campaign_join<'a>(
        &'a self,
        join: &'a super::CampaignJoin,
    ) -> StoreFuture<'a, super::CampaignLedger> {
        let v = self.campaigns.join(join, super::now_micros());
        Box::pin(std::future::ready(Ok(v)))
    }

    fn campaign_mark<'a>(
        &'a self,
        id: &'a str,
        limit: &'a str,
        restricted: &'a [String],
        every_us: i64,
    ) -> StoreFuture<'a, super::MarkAnswer> {
        let v = self
            .campaigns
            .mark(id, limit, restricted, every_us, super::now_micros());
        Box::pin(std::future::ready(Ok(v)))
    }

    fn campaigns(&self) -> StoreFuture<'_, Vec<super::Campaign>> {
        let v = self.campaigns.campaigns(super::now_micros());
        Box::pin(std::future::ready(Ok(v)))
    }

    fn restrictions(&self) -> StoreFuture<'_, Vec<super::Restriction>> {
        let v = self.restricted.list(super::now_micros());
        Box::pin(std::future::ready(Ok(v)))
    }

    fn restrict_once<'a>(
        &'a self,
        r: super::Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (super::Restriction, bool)> {
        let r = self.restricted.insert_once(r, dur, super::now_micros());
        Box::pin(std::future::ready(Ok(r)))
    }

    fn expire_restrictions(&self) -> StoreFuture<'_, Vec<super::Restriction>> {
        let v = self.restricted.purge(super::now_micros());
        Box::pin(std::future::ready(Ok(v)))
    }

    fn save_baselines<'a>(
        &'a self,
        limit: &'a str,
        set: &'a super::BaselineSet,
    ) -> StoreFuture<'a, ()> {
        self.baselines.put(limit, set.clone());
        Box::pin(std::future::ready(Ok(())))
    }

    fn load_baselines<'a>(&'a self, limit: &'a str) -> StoreFuture<'a, Option<super::BaselineSet>> {
        Box::pin(std::future::ready(Ok(self.baselines.get(limit))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::ewma::{self, EwmaState};
    use crate::limit::gcra::GcraSpec;
    use crate::limit::rate::Rate;
    use crate::limit::spec::UpdateMode;
    use crate::limit::unique::UniqueKind;
    use crate::store::StoreError;

    const T0: i64 = 1_700_000_000_000_000;

    /// The stored entries of each record kind keep their size, and the per-decision
    /// bookkeeping on the stack is no bigger than it was with a hand-written inline vector
    /// (288, 160, 224 and 864 bytes for 8 items).
    #[test]
    fn record_and_bookkeeping_sizes() {
        use super::super::table::Entry;
        use crate::limit::bucket::BucketState;
        use std::mem::size_of;
        assert_eq!(size_of::<Option<Entry<EwmaState>>>(), 40);
        assert_eq!(size_of::<Option<Entry<i64>>>(), 32);
        assert_eq!(size_of::<Option<Entry<BucketState>>>(), 56);
        assert_eq!(
            size_of::<Option<Entry<Box<crate::store::UniqueRecord>>>>(),
            32
        );
        assert_eq!(size_of::<Record>(), 80);
        type Guard<'a> = (usize, MutexGuard<'a, Shard>);
        assert!(size_of::<SmallVec<[Lookup<'static>; 8]>>() <= 288);
        assert!(size_of::<SmallVec<[usize; 8]>>() <= 160);
        assert!(size_of::<SmallVec<[Guard<'static>; 8]>>() <= 224);
        assert!(size_of::<SmallVec<[Undo; 8]>>() <= 864);
    }

    fn ewma_req(key: &str, limit: f64, mode: UpdateMode, blocking: bool) -> LimitRequest {
        LimitRequest {
            key: key.into(),
            algorithm: Algorithm::Ewma {
                limit,
                period_secs: 3600,
                mode,
                unique_kind: UniqueKind::Bloom,
            },
            count: 1.0,
            unique: None,
            blocking,
        }
    }

    fn same(of: usize, limit: f64, blocking: bool) -> LimitRequest {
        LimitRequest {
            // Ignored, like the count.
            key: "ignored".into(),
            algorithm: Algorithm::Same { of, limit },
            count: 7.0,
            unique: None,
            blocking,
        }
    }

    fn gcra(key: &str) -> LimitRequest {
        LimitRequest {
            key: key.into(),
            algorithm: Algorithm::Gcra(GcraSpec::new(5.0, Rate::new(1.0, 1.0).unwrap()).unwrap()),
            count: 1.0,
            unique: None,
            blocking: true,
        }
    }

    fn rate(store: &MemoryStore, key: &str) -> Option<EwmaState> {
        store.inspect_key(key).into_iter().find_map(|r| match r {
            Record::Ewma(s) => Some(s),
            _ => None,
        })
    }

    /// Answered from the earlier rate with its own m; counted once, nothing written for it.
    #[test]
    fn same_shares_the_rate_and_counts_once() {
        let store = MemoryStore::default();
        let d = Decision {
            limits: vec![
                ewma_req("k", 10.0, UpdateMode::Strict, true),
                same(0, 1.0, false),
                same(0, 1.5, true),
            ],
        };
        let r = store.decide_at(T0, &d);
        assert!(!r.refused, "the over alias does not block");
        assert_eq!(r.limits[0].value, 1.0);
        let alias = r.limits[1];
        assert_eq!((alias.value, alias.over, alias.stored), (1.0, true, false));
        assert_eq!(alias.seen, None);
        // Over with count 1 >= m 1: no wait is enough.
        assert_eq!(alias.retry_after, None);
        assert!(!r.limits[2].over);
        assert_eq!(r.limits[2].retry_after, Some(Duration::ZERO));
        assert_eq!(
            rate(&store, "k"),
            Some(EwmaState {
                time_us: T0,
                rate: 1.0
            })
        );
        assert!(store.inspect_key("ignored").is_empty());
    }

    /// A blocking alias over refuses the decision: leaky limits and GCRA are not charged,
    /// and the retry counts from the rate that stays stored (the decayed record).
    #[test]
    fn same_refusal_is_all_or_nothing() {
        let store = MemoryStore::default();
        store.insert_record(
            "k",
            Record::Ewma(EwmaState {
                time_us: T0,
                rate: 3.0,
            }),
        );
        let now = T0 + 36_000_000;
        let d = Decision {
            limits: vec![
                ewma_req("k", 10.0, UpdateMode::Leaky, true),
                gcra("g"),
                same(0, 2.0, true),
            ],
        };
        let r = store.decide_at(now, &d);
        assert!(r.refused);
        let prev = EwmaState {
            time_us: T0,
            rate: 3.0,
        };
        let fresh = ewma::next_rate(Some(&prev), now, 1.0, 3600);
        assert_eq!(r.limits[0].value, fresh);
        assert!(!r.limits[0].over && !r.limits[0].stored);
        assert_eq!(r.limits[2].value, fresh);
        assert!(r.limits[2].over);
        let kept = ewma::decayed_rate(&prev, now, 3600);
        let wait = ewma::retry_after_secs(kept, 1.0, 2.0, 3600).unwrap();
        assert_eq!(r.limits[2].retry_after, Some(Duration::from_secs_f64(wait)));
        // 3600 · ln(2.970149 / (2 - 1)) = 3919.0 s.
        assert!((3918.9..3919.1).contains(&wait), "{wait}");
        assert_eq!(rate(&store, "k"), Some(prev), "leaky not charged");
        assert!(store.inspect_key("g").is_empty(), "GCRA not charged");
        // A strict first limit is still charged; the retry then counts from its new rate.
        let d = Decision {
            limits: vec![
                ewma_req("k", 10.0, UpdateMode::Strict, true),
                same(0, 2.0, true),
            ],
        };
        let r = store.decide_at(now, &d);
        assert!(r.refused && r.limits[0].stored);
        let wait = ewma::retry_after_secs(fresh, 1.0, 2.0, 3600).unwrap();
        assert_eq!(r.limits[1].retry_after, Some(Duration::from_secs_f64(wait)));
        assert_eq!(
            rate(&store, "k"),
            Some(EwmaState {
                time_us: now,
                rate: fresh
            })
        );
    }

    /// A readonly first limit: the alias gets the decayed rate and nothing is written.
    #[test]
    fn same_after_readonly_counts_nothing() {
        let store = MemoryStore::default();
        let prev = EwmaState {
            time_us: T0,
            rate: 4.5,
        };
        store.insert_record("k", Record::Ewma(prev));
        let now = T0 + 36_000_000;
        let d = Decision {
            limits: vec![
                ewma_req("k", 2.0, UpdateMode::Readonly, false),
                same(0, 4.0, true),
            ],
        };
        let r = store.decide_at(now, &d);
        let decayed = ewma::decayed_rate(&prev, now, 3600);
        assert_eq!(r.limits[1].value, decayed);
        assert!(r.refused && r.limits[1].over);
        // Readonly attempts add nothing: the wait is for the decay alone.
        let wait = ewma::retry_after_secs(decayed, 0.0, 4.0, 3600).unwrap();
        assert_eq!(r.limits[1].retry_after, Some(Duration::from_secs_f64(wait)));
        assert_eq!(rate(&store, "k"), Some(prev));
    }

    /// `of` not an earlier EWMA request: the trait refuses it as invalid; the infallible
    /// decide_at answers it not over.
    #[test]
    fn invalid_same_is_refused() {
        let store = MemoryStore::default();
        let bad = [
            vec![same(0, 1.0, true)],
            vec![
                same(1, 1.0, true),
                ewma_req("k", 1.0, UpdateMode::Strict, true),
            ],
            vec![gcra("g"), same(0, 1.0, true)],
            vec![
                ewma_req("k", 9.0, UpdateMode::Strict, true),
                same(5, 1.0, true),
            ],
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for limits in bad {
            let d = Decision { limits };
            assert!(matches!(d.validate(), Err(StoreError::Invalid(_))), "{d:?}");
            assert!(matches!(
                rt.block_on(store.decide(&d)),
                Err(StoreError::Invalid(_))
            ));
            let r = store.decide_at(T0, &d);
            let i = d
                .limits
                .iter()
                .position(|l| matches!(l.algorithm, Algorithm::Same { .. }))
                .unwrap();
            assert_eq!(r.limits[i], eval::invalid_same());
        }
        let ok = Decision {
            limits: vec![
                ewma_req("k", 1.0, UpdateMode::Strict, true),
                same(0, 1.0, true),
            ],
        };
        assert!(ok.validate().is_ok());
    }
}
