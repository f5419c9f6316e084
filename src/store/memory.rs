//! The in-process store: sharded hash tables behind mutexes, one lock
//! section per decision, idle expiry and a key cap with eviction.

use super::eval::{self, Write};
use super::key::{AsKey, IdentityHasher, Lookup, ThinKey};
use super::{
    Algorithm, Decision, DecisionResult, LimitRequest, LimitResult, Record, RecordKind, Store,
    StoreFuture, UniqueRecord,
};
use crate::limit::bucket::BucketState;
use crate::limit::ewma::{EwmaParams, EwmaState};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

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

type Table<V> = HashMap<ThinKey, V, BuildHasherDefault<IdentityHasher>>;

/// One lock's worth of tables.
struct Shard {
    ewma: Table<EwmaState>,
    unique: Table<Box<UniqueRecord>>,
    gcra: Table<i64>,
    bucket: Table<BucketState>,
}

/// Which table a request uses.
fn kind_of(req: &LimitRequest) -> RecordKind {
    match (&req.algorithm, &req.unique) {
        (Algorithm::Ewma { .. }, None) => RecordKind::Ewma,
        (Algorithm::Ewma { .. }, Some(_)) => RecordKind::Unique,
        (Algorithm::Gcra(_), _) => RecordKind::Gcra,
        (Algorithm::Bucket { .. }, _) => RecordKind::Bucket,
    }
}

/// The table-lookup form of a key.
fn q<'k>(key: &'k Lookup<'_>) -> &'k (dyn AsKey + 'k) {
    key
}

/// Inserts into `table`, or overwrites; returns whether the key was new.
fn upsert<V>(table: &mut Table<V>, key: &Lookup<'_>, value: V) -> bool {
    match table.get_mut(q(key)) {
        Some(slot) => {
            *slot = value;
            false
        }
        None => {
            table.insert(ThinKey::new(key.text()), value);
            true
        }
    }
}

impl Shard {
    fn new() -> Shard {
        Shard {
            ewma: HashMap::default(),
            unique: HashMap::default(),
            gcra: HashMap::default(),
            bucket: HashMap::default(),
        }
    }

    fn len(&self) -> usize {
        self.ewma.len() + self.unique.len() + self.gcra.len() + self.bucket.len()
    }

    fn contains(&self, kind: RecordKind, key: &Lookup<'_>) -> bool {
        match kind {
            RecordKind::Ewma => self.ewma.contains_key(q(key)),
            RecordKind::Unique => self.unique.contains_key(q(key)),
            RecordKind::Gcra => self.gcra.contains_key(q(key)),
            RecordKind::Bucket => self.bucket.contains_key(q(key)),
        }
    }

    /// Evaluates `req` against this shard's current state.
    fn eval<'a>(
        &self,
        req: &'a LimitRequest,
        key: &Lookup<'_>,
        now_us: i64,
        suppress: bool,
    ) -> (LimitResult, Write<'a>) {
        match &req.algorithm {
            Algorithm::Ewma {
                limit,
                period_secs,
                mode,
                unique_kind,
            } => {
                let params = EwmaParams {
                    limit: *limit,
                    period_secs: *period_secs,
                    mode: *mode,
                };
                match &req.unique {
                    None => eval::ewma(self.ewma.get(q(key)), req, &params, now_us, suppress),
                    Some(value) => eval::unique(
                        self.unique.get(q(key)).map(|b| &**b),
                        req,
                        value,
                        &params,
                        *unique_kind,
                        now_us,
                        suppress,
                    ),
                }
            }
            Algorithm::Gcra(spec) => {
                eval::gcra(self.gcra.get(q(key)).copied(), req, spec, now_us, suppress)
            }
            Algorithm::Bucket { spec, op } => {
                eval::bucket(self.bucket.get(q(key)), req, spec, *op, now_us, suppress)
            }
        }
    }

    /// Performs a write. The caller has made room for a new key.
    fn apply(&mut self, key: &Lookup<'_>, write: Write<'_>) {
        match write {
            Write::Nothing => {}
            Write::Ewma(state) => {
                upsert(&mut self.ewma, key, state);
            }
            Write::Gcra(tat) => {
                upsert(&mut self.gcra, key, tat);
            }
            Write::Bucket(state) => {
                upsert(&mut self.bucket, key, state);
            }
            Write::Unique {
                state,
                new_set,
                insert,
            } => {
                let rec = match self.unique.get_mut(q(key)) {
                    Some(rec) => rec,
                    None => {
                        // A new record always comes with a fresh set from eval.
                        let (created_s, set) = match new_set {
                            Some(s) => s,
                            None => return,
                        };
                        let mut rec = Box::new(UniqueRecord {
                            state,
                            created_s,
                            set,
                        });
                        if let Some(v) = insert {
                            rec.set.insert(v);
                        }
                        self.unique.insert(ThinKey::new(key.text()), rec);
                        return;
                    }
                };
                if let Some((created_s, set)) = new_set {
                    rec.created_s = created_s;
                    rec.set = set;
                }
                rec.state = state;
                if let Some(v) = insert {
                    rec.set.insert(v);
                }
            }
        }
    }

    fn get_record(&self, kind: RecordKind, key: &Lookup<'_>) -> Option<Record> {
        match kind {
            RecordKind::Ewma => self.ewma.get(q(key)).map(|s| Record::Ewma(*s)),
            RecordKind::Unique => self
                .unique
                .get(q(key))
                .map(|r| Record::Unique((**r).clone())),
            RecordKind::Gcra => self.gcra.get(q(key)).map(|t| Record::Gcra { tat_ns: *t }),
            RecordKind::Bucket => self.bucket.get(q(key)).map(|b| Record::Bucket(*b)),
        }
    }

    fn put_record(&mut self, key: &Lookup<'_>, rec: Record) -> bool {
        match rec {
            Record::Ewma(s) => upsert(&mut self.ewma, key, s),
            Record::Unique(r) => upsert(&mut self.unique, key, Box::new(r)),
            Record::Gcra { tat_ns } => upsert(&mut self.gcra, key, tat_ns),
            Record::Bucket(b) => upsert(&mut self.bucket, key, b),
        }
    }

    fn remove(&mut self, kind: RecordKind, key: &Lookup<'_>) -> bool {
        match kind {
            RecordKind::Ewma => self.ewma.remove(q(key)).is_some(),
            RecordKind::Unique => self.unique.remove(q(key)).is_some(),
            RecordKind::Gcra => self.gcra.remove(q(key)).is_some(),
            RecordKind::Bucket => self.bucket.remove(q(key)).is_some(),
        }
    }

    /// Drops idle records; returns how many.
    fn expire(&mut self, now_us: i64, ttl_us: i64) -> usize {
        let before = self.len();
        let fresh = |t: i64| now_us.saturating_sub(t) <= ttl_us;
        self.ewma.retain(|_, s| fresh(s.time_us));
        self.unique.retain(|_, r| fresh(r.state.time_us));
        // A TAT in the past is exactly a new key.
        let now_ns = now_us.saturating_mul(1000);
        self.gcra.retain(|_, tat| *tat > now_ns);
        self.bucket
            .retain(|_, b| fresh((b.last_ms * 1000.0) as i64));
        before - self.len()
    }

    /// Evicts about `n` least recently updated records; returns how many.
    fn evict_oldest(&mut self, n: usize) -> usize {
        let mut times: Vec<i64> = Vec::with_capacity(self.len());
        times.extend(self.ewma.values().map(|s| s.time_us));
        times.extend(self.unique.values().map(|r| r.state.time_us));
        times.extend(self.gcra.values().map(|t| t / 1000));
        times.extend(self.bucket.values().map(|b| (b.last_ms * 1000.0) as i64));
        if times.is_empty() || n == 0 {
            return 0;
        }
        let n = n.min(times.len());
        let (_, &mut threshold, _) = times.select_nth_unstable(n - 1);
        let mut left = n;
        let mut take = |t: i64| {
            if t <= threshold && left > 0 {
                left -= 1;
                false
            } else {
                true
            }
        };
        self.ewma.retain(|_, s| take(s.time_us));
        self.unique.retain(|_, r| take(r.state.time_us));
        self.gcra.retain(|_, t| take(*t / 1000));
        self.bucket.retain(|_, b| take((b.last_ms * 1000.0) as i64));
        n - left
    }

    fn approx_bytes(&self) -> usize {
        fn table<V>(t: &Table<V>) -> usize {
            // hashbrown: one slot plus one control byte per bucket; capacity is
            // 7/8 of the buckets.
            let buckets = if t.capacity() == 0 {
                0
            } else {
                (t.capacity() * 8 / 7).next_power_of_two()
            };
            buckets * (std::mem::size_of::<(ThinKey, V)>() + 1)
                + t.keys().map(ThinKey::heap_bytes).sum::<usize>()
        }
        table(&self.ewma)
            + table(&self.unique)
            + self
                .unique
                .values()
                .map(|r| std::mem::size_of::<UniqueRecord>() + r.set.heap_bytes())
                .sum::<usize>()
            + table(&self.gcra)
            + table(&self.bucket)
    }
}

/// The in-memory store.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    per_shard_cap: usize,
    config: MemoryConfig,
    evictions: AtomicU64,
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
    /// An empty store.
    pub fn new(config: MemoryConfig) -> MemoryStore {
        let n = config.shards.clamp(1, 1 << 16).next_power_of_two();
        let shards = (0..n).map(|_| Mutex::new(Shard::new())).collect();
        MemoryStore {
            shards,
            per_shard_cap: config.max_keys.div_ceil(n).max(1),
            config,
            evictions: AtomicU64::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// The shard of a key: hash bits 40 and up. The tables use the same hash
    /// but take their bucket index from the low bits and their tag from the
    /// top 7 bits, so a shard's keys still spread over its table.
    fn shard_of(&self, key: &Lookup<'_>) -> usize {
        ((key.hash() >> 40) as usize) & (self.shards.len() - 1)
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
        match decision.limits.as_slice() {
            [] => DecisionResult::default(),
            [req] => {
                let key = Lookup::new(&req.key);
                let mut shard = self.lock(self.shard_of(&key));
                let (result, write) = shard.eval(req, &key, now_us, false);
                self.write(&mut shard, req, &key, write);
                DecisionResult {
                    refused: req.blocking && result.over,
                    limits: vec![result],
                }
            }
            reqs => self.decide_many(now_us, reqs),
        }
    }

    /// Several limits: lock every shard involved (in index order, so two
    /// decisions cannot deadlock), evaluate in order with writes visible to
    /// later limits, and on refusal undo and re-run with leaky writes suppressed.
    fn decide_many(&self, now_us: i64, reqs: &[LimitRequest]) -> DecisionResult {
        let keys: Vec<Lookup<'_>> = reqs.iter().map(|r| Lookup::new(&r.key)).collect();
        let idx: Vec<usize> = keys.iter().map(|k| self.shard_of(k)).collect();
        let mut order = idx.clone();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| self.lock(i)).collect();
        let pos: Vec<usize> = idx
            .iter()
            .map(|i| order.binary_search(i).unwrap_or(0))
            .collect();
        let mut undo: Vec<(usize, RecordKind, usize, Option<Record>)> = Vec::new();
        let mut results = Vec::with_capacity(reqs.len());
        for (n, (req, &p)) in reqs.iter().zip(&pos).enumerate() {
            let shard = &mut *guards[p];
            let key = &keys[n];
            let (result, write) = shard.eval(req, key, now_us, false);
            if !matches!(write, Write::Nothing) {
                let kind = kind_of(req);
                if !undo
                    .iter()
                    .any(|&(sp, k, i, _)| sp == p && k == kind && reqs[i].key == req.key)
                {
                    undo.push((p, kind, n, shard.get_record(kind, key)));
                }
            }
            self.write(shard, req, key, write);
            results.push(result);
        }
        let refused = reqs
            .iter()
            .zip(&results)
            .any(|(r, res)| r.blocking && res.over);
        if refused {
            for (p, kind, n, old) in undo.into_iter().rev() {
                let shard = &mut *guards[p];
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
            for (n, (req, &p)) in reqs.iter().zip(&pos).enumerate() {
                let shard = &mut *guards[p];
                let (result, write) = shard.eval(req, &keys[n], now_us, true);
                self.write(shard, req, &keys[n], write);
                results.push(result);
            }
        }
        DecisionResult {
            refused,
            limits: results,
        }
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
            let shard = self.lock(i);
            for (k, v) in &shard.ewma {
                f(k.as_str(), Record::Ewma(*v));
            }
            for (k, v) in &shard.unique {
                f(k.as_str(), Record::Unique((**v).clone()));
            }
            for (k, v) in &shard.gcra {
                f(k.as_str(), Record::Gcra { tat_ns: *v });
            }
            for (k, v) in &shard.bucket {
                f(k.as_str(), Record::Bucket(*v));
            }
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
            let mut s = self.lock(i);
            s.ewma.clear();
            s.unique.clear();
            s.gcra.clear();
            s.bucket.clear();
        }
    }
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
        let result = self.decide_at(super::now_micros(), decision);
        Box::pin(std::future::ready(Ok(result)))
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        let records = self.inspect_key(key);
        Box::pin(std::future::ready(Ok(records)))
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        let n = self.reset_key(key);
        Box::pin(std::future::ready(Ok(n)))
    }
}
