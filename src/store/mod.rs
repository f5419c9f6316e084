//! Applying one decision atomically to the state of its keys.
//!
//! A [`Decision`] is the list of limits that one SMTP event must pass. The
//! [`Store`] trait is what the proxy calls; [`MemoryStore`] implements it in
//! process (a Redis store can implement it too). All stores give the same
//! answers for the same sequence of decisions. [`metered::MeteredStore`] wraps any store to
//! count and time its decisions in the metrics.
//!
//! Semantics: the decision is *refused* iff some blocking limit is over. Then
//! leaky limits, token buckets and bucket checks store nothing (no partial
//! charging) while strict limits still store (Exim charges attempts in strict
//! mode). When not refused, every limit follows its own rule: strict stores,
//! leaky stores iff it is not itself over, readonly never stores.

pub mod baseline;
pub mod campaign;
mod eval;
mod key;
mod memory;
pub mod metered;
pub mod open;
pub mod ratio;
pub mod redis;
mod restrict;
mod shard;
mod snapshot;
mod table;

pub use baseline::BaselineSet;
pub use campaign::{Campaign, CampaignJoin, CampaignLedger, CampaignSender, MarkAnswer};
pub use key::ThinKey;
pub use memory::{run_expiry, MemoryConfig, MemoryStats, MemoryStore};
pub use ratio::{RatioCounts, RatioWindow};
pub use restrict::{RestrictFor, RestrictForError, RestrictedSet, Restriction};
pub use snapshot::{run_snapshots, Corruption, SnapshotError};

use crate::limit::bucket::{BucketOp, BucketSpec, BucketState};
use crate::limit::ewma::EwmaState;
use crate::limit::gcra::GcraSpec;
use crate::limit::spec::UpdateMode;
use crate::limit::unique::{UniqueKind, UniqueSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The algorithm and parameters of one limit.
#[derive(Debug, Clone, PartialEq)]
pub enum Algorithm {
    /// Exim's EWMA (`ratelimit`).
    Ewma {
        /// The limit m.
        limit: f64,
        /// The period p in seconds.
        period_secs: u32,
        /// Leaky, strict or readonly.
        mode: UpdateMode,
        /// The set kind used when the request carries a unique value.
        unique_kind: UniqueKind,
    },
    /// Token bucket (GCRA).
    Gcra(GcraSpec),
    /// Rspamd-style leaky bucket: one of check, commit or cancel.
    Bucket {
        /// Capacity, leak and multipliers.
        spec: BucketSpec,
        /// What to do.
        op: BucketOp,
    },
    /// Exim's result cache (exim-ratelimit.md §4 step 1): answered from request `of` of
    /// the same decision, which must come earlier and be [`Algorithm::Ewma`]. Used when two
    /// Exim limits of one event share a database key and a cache: Exim evaluates the first
    /// and answers the second from the first's rate with its own m.
    ///
    /// The result's value is request `of`'s value (the rate); `over` is `value >= limit`
    /// (as for [`Algorithm::Ewma`]; a NaN on either side is over, m = 0 always is);
    /// `stored` is false and `seen` is `None`: nothing is read or written, and the
    /// request's own `key`, `count` and `unique` are ignored. When over, `retry_after` is
    /// computed as for an over EWMA of limit `limit` on request `of`'s key, period and count:
    /// from the rate that stays stored after request `of` (its rate if it stored, else the
    /// decayed stored rate) until an event of `of`'s count would be under `limit`.
    ///
    /// Being over refuses the decision when `blocking`, like any limit, so the
    /// all-or-nothing rule holds: leaky limits and buckets are not charged, strict ones are.
    ///
    /// A request whose `of` is not an earlier EWMA request of its decision is invalid:
    /// [`Decision::validate`] and every [`Store::decide`] reject it with
    /// [`StoreError::Invalid`]; the infallible [`MemoryStore::decide_at`] answers it
    /// `over = false` with value 0 and refuses nothing.
    Same {
        /// Index (in [`Decision::limits`]) of the request whose answer this one shares.
        of: usize,
        /// This request's own limit m.
        limit: f64,
    },
}

/// One limit of a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitRequest {
    /// The database key (for Exim limits, [`crate::limit::LimitSpec::database_key`]).
    pub key: String,
    /// Algorithm and parameters.
    pub algorithm: Algorithm,
    /// Amount of this event (messages, recipients, bytes…).
    pub count: f64,
    /// The unique-event value (EWMA only): counted only if new to the key's set.
    pub unique: Option<String>,
    /// Whether being over refuses the whole decision (false for warn-only limits).
    pub blocking: bool,
}

/// All limits one event must pass, applied all-or-nothing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// The limits, in order.
    pub limits: Vec<LimitRequest>,
}

impl Decision {
    /// Checks what a store cannot apply as asked: every [`Algorithm::Same`] must name an
    /// earlier [`Algorithm::Ewma`] request of this decision.
    pub fn validate(&self) -> Result<(), StoreError> {
        for (i, req) in self.limits.iter().enumerate() {
            if let Algorithm::Same { of, .. } = req.algorithm {
                if !same_target_ok(&self.limits, i, of) {
                    return Err(StoreError::Invalid(format!(
                        "limit {i} ({}) is answered from limit {of}, which is not an earlier \
                         EWMA limit of the decision",
                        req.key
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether request `i` may be answered from request `of` of `limits`.
pub(crate) fn same_target_ok(limits: &[LimitRequest], i: usize, of: usize) -> bool {
    of < i && matches!(limits.get(of), Some(r) if matches!(r.algorithm, Algorithm::Ewma { .. }))
}

/// The answer for one limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitResult {
    /// EWMA: the rate (`$sender_rate`); GCRA and buckets: the level in events.
    pub value: f64,
    /// The limit is over (EWMA: `rate >= m`).
    pub over: bool,
    /// The new state was written.
    pub stored: bool,
    /// For unique limits: whether the value was already in the set.
    pub seen: Option<bool>,
    /// When over: how long until the same event would pass, if computable.
    pub retry_after: Option<Duration>,
}

/// The answer for a whole decision.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DecisionResult {
    /// Some blocking limit is over.
    pub refused: bool,
    /// One result per limit, in order.
    pub limits: Vec<LimitResult>,
}

/// Which table a record lives in. The same key text under different kinds
/// names different records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// EWMA without a unique set.
    Ewma,
    /// EWMA with a unique set (keys contain `unique/`).
    Unique,
    /// GCRA.
    Gcra,
    /// Rspamd-style bucket.
    Bucket,
}

/// An EWMA record with its unique-event set.
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueRecord {
    /// Rate and time.
    pub state: EwmaState,
    /// Creation time of the set, whole seconds.
    pub created_s: i64,
    /// The set.
    pub set: UniqueSet,
}

/// A stored record, as seen by inspect and snapshots.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// EWMA state.
    Ewma(EwmaState),
    /// EWMA state with a unique set.
    Unique(UniqueRecord),
    /// GCRA theoretical arrival time, nanoseconds since the epoch.
    Gcra {
        /// TAT in nanoseconds.
        tat_ns: i64,
    },
    /// Bucket state.
    Bucket(BucketState),
}

impl Record {
    /// The table this record belongs to.
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Ewma(_) => RecordKind::Ewma,
            Record::Unique(_) => RecordKind::Unique,
            Record::Gcra { .. } => RecordKind::Gcra,
            Record::Bucket(_) => RecordKind::Bucket,
        }
    }
}

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend cannot be reached.
    #[error("rate limit store not available: {0}")]
    Unavailable(String),
    /// The request cannot be applied.
    #[error("invalid rate limit request: {0}")]
    Invalid(String),
}

impl StoreError {
    /// The `kind` label of `floodgate_store_errors_total`.
    pub fn label(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Invalid(_) => "invalid",
        }
    }
}

/// A boxed future returned by [`Store`] methods.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A rate-limit state store.
pub trait Store: Send + Sync {
    /// Applies one decision atomically at the store's current time.
    fn decide<'a>(&'a self, decision: &'a Decision) -> StoreFuture<'a, DecisionResult>;

    /// Reads every record stored under `key` (read-only).
    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>>;

    /// Removes every record stored under `key`; returns how many were removed.
    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize>;

    /// Whether a restriction check could find anything, answered without asking the
    /// backend: the memory store knows (one atomic load); Redis answers from its last check
    /// (see [`redis::RedisStore::restrict_hint`]). The policy checks every MAIL FROM while
    /// a limit restricts, and otherwise only when this says so.
    fn may_restrict(&self) -> bool {
        false
    }

    /// The restriction in force on the first of `keys` that has one, at the store's time.
    fn restricted<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, Option<Restriction>> {
        let _ = keys;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Restricts `r.key` from the store's now for `dur` microseconds (`None`: until
    /// released), replacing any restriction of the key; returns it as stored (with its times).
    fn restrict<'a>(&'a self, r: Restriction, dur: Option<i64>) -> StoreFuture<'a, Restriction> {
        let _ = (r, dur);
        Box::pin(std::future::ready(Err(StoreError::Invalid(
            "this store keeps no restricted set".into(),
        ))))
    }

    /// Ends the restriction of `key`; returns it, or `None` when the key was not restricted.
    fn release<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Restriction>> {
        let _ = key;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Every restriction in force, by key.
    fn restrictions(&self) -> StoreFuture<'_, Vec<Restriction>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Restricts `r.key` as [`Store::restrict`] does, unless a restriction of the key is in
    /// force: answers the restriction in force and whether this call made it (so that of
    /// two sessions restricting one key at once, one tells of it).
    fn restrict_once<'a>(
        &'a self,
        r: Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (Restriction, bool)> {
        Box::pin(async move { self.restrict(r, dur).await.map(|r| (r, true)) })
    }

    /// Checks `keys` against the restricted set and, only when none is restricted, applies
    /// `decision`: the MAIL FROM check and the MAIL stage's limits in one step (Redis: one
    /// round trip). A failure to read the set is an error, as for [`Store::restricted`].
    fn decide_unless_restricted<'a>(
        &'a self,
        keys: &'a [String],
        decision: &'a Decision,
    ) -> StoreFuture<'a, Guarded> {
        Box::pin(async move {
            if let Some(r) = self.restricted(keys).await? {
                return Ok(Guarded::Restricted(r));
            }
            self.decide(decision).await.map(Guarded::Decided)
        })
    }

    /// Removes every restriction whose time is over and answers them. Each expired
    /// restriction is answered once, to one caller, however many nodes share the set: the
    /// caller tells of its release.
    fn expire_restrictions(&self) -> StoreFuture<'_, Vec<Restriction>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Adds `add` to the ratio window of `key` (see [`ratio`]) at the store's time and
    /// answers the counts over the window; a zero `add` only reads.
    fn ratio<'a>(
        &'a self,
        key: &'a str,
        window: RatioWindow,
        add: RatioCounts,
    ) -> StoreFuture<'a, RatioCounts> {
        let _ = (key, window, add);
        Box::pin(std::future::ready(Err(StoreError::Invalid(
            "this store keeps no ratio windows".into(),
        ))))
    }

    /// Notes one message in the campaign it belongs to (see [`campaign`]: its bands are
    /// grouped, campaigns they link merged) at the store's time; answers that campaign.
    fn campaign_join<'a>(&'a self, join: &'a CampaignJoin) -> StoreFuture<'a, CampaignLedger> {
        let _ = join;
        Box::pin(std::future::ready(Err(StoreError::Invalid(
            "this store keeps no campaign ledgers".into(),
        ))))
    }

    /// Marks campaign `id` as found by `limit` (its limit is over), records that it
    /// restricted the senders `restricted`, and answers whether its alert is due (first
    /// found, or `every_us` after its last alert). One call, atomic for a fleet.
    fn campaign_mark<'a>(
        &'a self,
        id: &'a str,
        limit: &'a str,
        restricted: &'a [String],
        every_us: i64,
    ) -> StoreFuture<'a, MarkAnswer> {
        let _ = (id, limit, restricted, every_us);
        Box::pin(std::future::ready(Ok(MarkAnswer::Quiet)))
    }

    /// The campaigns found in the last 7 days, most recently marked first.
    fn campaigns(&self) -> StoreFuture<'_, Vec<Campaign>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Keeps limit `limit`'s per-key baselines (replacing those it had), so that a restart
    /// finds them. A store that keeps none ignores them.
    fn save_baselines<'a>(&'a self, limit: &'a str, set: &'a BaselineSet) -> StoreFuture<'a, ()> {
        let _ = (limit, set);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Limit `limit`'s per-key baselines as last saved, if any.
    fn load_baselines<'a>(&'a self, limit: &'a str) -> StoreFuture<'a, Option<BaselineSet>> {
        let _ = limit;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Whether several nodes share this store (Redis): then each publishes what it holds
    /// (see [`Store::publish_held`]).
    fn shares_state(&self) -> bool {
        false
    }

    /// Publishes node `node`'s counts of held messages per key, believed for `ttl`, and
    /// withdraws its counts of the keys in `gone`. A store no other node reads ignores them.
    fn publish_held<'a>(
        &'a self,
        node: &'a str,
        counts: &'a [(String, u64)],
        gone: &'a [String],
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, ()> {
        let _ = (node, counts, gone, ttl);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Each node's published count of held messages for `key` that is still believed.
    fn held_counts<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<(String, u64)>> {
        let _ = key;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

/// What [`Store::decide_unless_restricted`] answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Guarded {
    /// A key is restricted: this restriction; the decision was not applied.
    Restricted(Restriction),
    /// No key is restricted: the decision's answer.
    Decided(DecisionResult),
}

/// Microseconds since the Unix epoch from the system clock (gettimeofday-like).
pub fn now_micros() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}
