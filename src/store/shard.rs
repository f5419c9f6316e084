//! One lock's worth of tables: the per-kind hash maps of a memory-store
//! shard and the operations on them (evaluate, write, expire, evict).

use super::eval::{self, Write};
use super::key::Lookup;
use super::table::Table;
use super::{Algorithm, LimitRequest, LimitResult, Record, RecordKind, UniqueRecord};
use crate::limit::bucket::BucketState;
use crate::limit::ewma::{EwmaParams, EwmaState};

/// One lock's worth of tables.
pub(crate) struct Shard {
    pub(crate) ewma: Table<EwmaState>,
    pub(crate) unique: Table<Box<UniqueRecord>>,
    pub(crate) gcra: Table<i64>,
    pub(crate) bucket: Table<BucketState>,
}

/// Which table a request uses. An [`Algorithm::Same`] request uses none (it never
/// writes); it is given the EWMA table.
pub(crate) fn kind_of(req: &LimitRequest) -> RecordKind {
    match (&req.algorithm, &req.unique) {
        (Algorithm::Ewma { .. }, None) | (Algorithm::Same { .. }, _) => RecordKind::Ewma,
        (Algorithm::Ewma { .. }, Some(_)) => RecordKind::Unique,
        (Algorithm::Gcra(_), _) => RecordKind::Gcra,
        (Algorithm::Bucket { .. }, _) => RecordKind::Bucket,
    }
}

/// Inserts into `table`, or overwrites; returns whether the key was new.
fn upsert<V>(table: &mut Table<V>, key: &Lookup<'_>, value: V) -> bool {
    table.upsert(key.id(), key.text(), value)
}

impl Shard {
    pub(crate) fn new() -> Shard {
        Shard {
            ewma: Table::default(),
            unique: Table::default(),
            gcra: Table::default(),
            bucket: Table::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ewma.len() + self.unique.len() + self.gcra.len() + self.bucket.len()
    }

    pub(crate) fn contains(&self, kind: RecordKind, key: &Lookup<'_>) -> bool {
        match kind {
            RecordKind::Ewma => self.ewma.contains(&key.id()),
            RecordKind::Unique => self.unique.contains(&key.id()),
            RecordKind::Gcra => self.gcra.contains(&key.id()),
            RecordKind::Bucket => self.bucket.contains(&key.id()),
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
                    None => eval::ewma(self.ewma.get(&key.id()), req, &params, now_us, suppress),
                    Some(value) => eval::unique(
                        self.unique.get(&key.id()).map(|b| &**b),
                        req,
                        value,
                        &params,
                        *unique_kind,
                        now_us,
                        suppress,
                    ),
                }
            }
            Algorithm::Gcra(spec) => eval::gcra(
                self.gcra.get(&key.id()).copied(),
                req,
                spec,
                now_us,
                suppress,
            ),
            Algorithm::Bucket { spec, op } => {
                eval::bucket(self.bucket.get(&key.id()), req, spec, *op, now_us, suppress)
            }
            // Answered by the decision from an earlier request (memory.rs decide_many);
            // reaching here means there is none.
            Algorithm::Same { .. } => (eval::invalid_same(), Write::Nothing),
        }
    }

    /// The EWMA state stored for the EWMA request `req` (plain or unique record).
    pub(crate) fn ewma_state(&self, req: &LimitRequest, key: &Lookup<'_>) -> Option<EwmaState> {
        match req.unique {
            None => self.ewma.get(&key.id()).copied(),
            Some(_) => self.unique.get(&key.id()).map(|r| r.state),
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
                let rec = match self.unique.get_mut(&key.id()) {
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
                        self.unique.upsert(key.id(), key.text(), rec);
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
            RecordKind::Ewma => self.ewma.get(&key.id()).map(|s| Record::Ewma(*s)),
            RecordKind::Unique => self
                .unique
                .get(&key.id())
                .map(|r| Record::Unique((**r).clone())),
            RecordKind::Gcra => self
                .gcra
                .get(&key.id())
                .map(|t| Record::Gcra { tat_ns: *t }),
            RecordKind::Bucket => self.bucket.get(&key.id()).map(|b| Record::Bucket(*b)),
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
            RecordKind::Ewma => self.ewma.remove(&key.id()).is_some(),
            RecordKind::Unique => self.unique.remove(&key.id()).is_some(),
            RecordKind::Gcra => self.gcra.remove(&key.id()).is_some(),
            RecordKind::Bucket => self.bucket.remove(&key.id()).is_some(),
        }
    }

    /// Drops idle records; returns how many.
    pub(crate) fn expire(&mut self, now_us: i64, ttl_us: i64) -> usize {
        let before = self.len();
        let fresh = |t: i64| now_us.saturating_sub(t) <= ttl_us;
        self.ewma.retain(|s| fresh(s.time_us));
        self.unique.retain(|r| fresh(r.state.time_us));
        // A TAT in the past is exactly a new key.
        let now_ns = now_us.saturating_mul(1000);
        self.gcra.retain(|tat| *tat > now_ns);
        self.bucket.retain(|b| fresh((b.last_ms * 1000.0) as i64));
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
        self.ewma.retain(|s| take(s.time_us));
        self.unique.retain(|r| take(r.state.time_us));
        self.gcra.retain(|t| take(*t / 1000));
        self.bucket.retain(|b| take((b.last_ms * 1000.0) as i64));
        n - left
    }

    /// Every entry of every table, for iteration by key text.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&str, Record)) {
        for e in self.ewma.iter() {
            f(e.text.as_str(), Record::Ewma(e.value));
        }
        for e in self.unique.iter() {
            f(e.text.as_str(), Record::Unique((*e.value).clone()));
        }
        for e in self.gcra.iter() {
            f(e.text.as_str(), Record::Gcra { tat_ns: e.value });
        }
        for e in self.bucket.iter() {
            f(e.text.as_str(), Record::Bucket(e.value));
        }
    }

    /// Removes every record.
    pub(crate) fn clear(&mut self) {
        self.ewma.clear();
        self.unique.clear();
        self.gcra.clear();
        self.bucket.clear();
    }

    pub(crate) fn approx_bytes(&self) -> usize {
        fn table<V>(t: &Table<V>) -> usize {
            t.heap_bytes()
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
