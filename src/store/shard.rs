//! One lock's worth of tables: the per-kind hash maps of a memory-store
//! shard and the operations on them (evaluate, write, expire, evict).

use super::eval::{self, Write};
use super::key::{AsKey, IdentityHasher, Lookup, ThinKey};
use super::{Algorithm, LimitRequest, LimitResult, Record, RecordKind, UniqueRecord};
use crate::limit::bucket::BucketState;
use crate::limit::ewma::{EwmaParams, EwmaState};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

type Table<V> = HashMap<ThinKey, V, BuildHasherDefault<IdentityHasher>>;

/// One lock's worth of tables.
pub(crate) struct Shard {
    pub(crate) ewma: Table<EwmaState>,
    pub(crate) unique: Table<Box<UniqueRecord>>,
    pub(crate) gcra: Table<i64>,
    pub(crate) bucket: Table<BucketState>,
}

/// Which table a request uses.
pub(crate) fn kind_of(req: &LimitRequest) -> RecordKind {
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
    pub(crate) fn new() -> Shard {
        Shard {
            ewma: HashMap::default(),
            unique: HashMap::default(),
            gcra: HashMap::default(),
            bucket: HashMap::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ewma.len() + self.unique.len() + self.gcra.len() + self.bucket.len()
    }

    pub(crate) fn contains(&self, kind: RecordKind, key: &Lookup<'_>) -> bool {
        match kind {
            RecordKind::Ewma => self.ewma.contains_key(q(key)),
            RecordKind::Unique => self.unique.contains_key(q(key)),
            RecordKind::Gcra => self.gcra.contains_key(q(key)),
            RecordKind::Bucket => self.bucket.contains_key(q(key)),
        }
    }

    /// Evaluates `req` against this shard's current state.
    pub(crate) fn eval<'a>(
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
    pub(crate) fn apply(&mut self, key: &Lookup<'_>, write: Write<'_>) {
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

    pub(crate) fn get_record(&self, kind: RecordKind, key: &Lookup<'_>) -> Option<Record> {
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

    pub(crate) fn put_record(&mut self, key: &Lookup<'_>, rec: Record) -> bool {
        match rec {
            Record::Ewma(s) => upsert(&mut self.ewma, key, s),
            Record::Unique(r) => upsert(&mut self.unique, key, Box::new(r)),
            Record::Gcra { tat_ns } => upsert(&mut self.gcra, key, tat_ns),
            Record::Bucket(b) => upsert(&mut self.bucket, key, b),
        }
    }

    pub(crate) fn remove(&mut self, kind: RecordKind, key: &Lookup<'_>) -> bool {
        match kind {
            RecordKind::Ewma => self.ewma.remove(q(key)).is_some(),
            RecordKind::Unique => self.unique.remove(q(key)).is_some(),
            RecordKind::Gcra => self.gcra.remove(q(key)).is_some(),
            RecordKind::Bucket => self.bucket.remove(q(key)).is_some(),
        }
    }

    /// Drops idle records; returns how many.
    pub(crate) fn expire(&mut self, now_us: i64, ttl_us: i64) -> usize {
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
    pub(crate) fn evict_oldest(&mut self, n: usize) -> usize {
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

    pub(crate) fn approx_bytes(&self) -> usize {
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
