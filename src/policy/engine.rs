//! The rate-limit policy: at each stage, every applicable limit of the current config
//! generation is decided as one; the strongest countermeasure of the limits that are over
//! wins.
//!
//! Charging (issue item 6):
//! * strict limits charge attempts at check time, as in Exim;
//! * leaky Exim and GCRA limits on recipients and bytes are *checked* without storing and
//!   *charged* when upstream accepts the message. For Exim limits the check reads the stored
//!   record and replays this session's own pending events, each at its own check time, then
//!   the new one, with Exim's formula (see `policy::replay`): one session gets exactly
//!   Exim's answers. The charge applies the accepted events one by one, in order, at commit
//!   time (the store takes no explicit time): the stored rate differs from Exim's by the
//!   decay between check and commit, and by the rounding of same-instant intervals (Exim's
//!   `1e-9` s floor; at most about 0.02 % of each event's count at p = 1h, 0.2 % at p = 1d).
//!   GCRA checks are a dry run that adds the session's pending amount to the new one.
//!   Concurrent sessions may each pass the check before either commits: the overshoot is
//!   bounded by the events in flight at once;
//! * buckets reserve at check time, commit on upstream's 2xx (ham) or 5xx (spam, when
//!   dynamic multipliers are on) and cancel on refusal or abandonment: exact.
//!
//! A dry run is a decision holding the limits plus a sentinel request that is always over:
//! the store then refuses it and writes nothing for leaky limits, but still answers
//! `over` for each limit, atomically.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tracing::{info, warn};

use super::action::{self, header_line, var_value, Outcome};
use super::alert::{Crossed, Evaluated, Observer};
use super::authdelay;
use super::charge;
use super::concurrency::{SlotGuard, Slots};
use super::evidence::{Evidence, Fact};
use super::model::{Action, Counted, LimitDef, PolicyModel, RateDef};
use super::replay::{self, replay};
use super::request::{apply_result, request};
use super::{BoxFuture, Facts, Policy, SessionPolicy, Stage, Verdict};
use crate::limit::bucket::{BucketOp, Verdict as Spamminess};
use crate::limit::ewma::is_over;
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::Rate;
use crate::limit::spec::UpdateMode;
use crate::limit::SessionCache;
use crate::smtp::reply::Reply;
use crate::store::{
    now_micros, Algorithm, Decision, Guarded, LimitRequest, LimitResult, Restriction, Store,
    StoreError,
};

/// The policy's clock: microseconds since the Unix epoch. It times this session's pending
/// events for the replay of leaky Exim limits, so it must agree with the store's clock.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The sentinel of a dry run: always over, never written (its weight exceeds its burst).
fn sentinel() -> LimitRequest {
    LimitRequest {
        key: "floodgate/dry-run".into(),
        algorithm: Algorithm::Gcra(
            GcraSpec::new(1.0, Rate::new(1.0, 1.0).expect("rate")).expect("spec"),
        ),
        count: 2.0,
        unique: None,
        blocking: true,
    }
}

struct Inner {
    current: RwLock<Arc<PolicyModel>>,
    /// Moves on at every [`RatePolicy::install`]. Sessions keep the model they last read
    /// and read `current` again only when this has moved: a load of a value written only on
    /// reload, where taking the lock and counting the `Arc` at every command would pass
    /// their cache lines between the workers' cores.
    generation: AtomicU64,
    store: Arc<dyn Store>,
    slots: Arc<Slots>,
    clock: Clock,
    /// The event log and alerts, when installed.
    observer: std::sync::OnceLock<Arc<dyn Observer>>,
    metrics: Arc<crate::admin::Metrics>,
    /// Whether the generation in force reads the header From.
    header_from: std::sync::atomic::AtomicBool,
    /// What this node saw of each key recently (for restriction notices).
    evidence: Evidence,
    /// The paced messages waiting, when installed: a key with some queues its later
    /// messages behind them.
    paced: std::sync::OnceLock<Arc<crate::hold::pace::PaceBook>>,
    /// Sends the mail of `notify_user`, when installed.
    notifier: std::sync::OnceLock<Arc<dyn super::notice::Notifier>>,
    /// Queued messages whose bounces and deferrals are still to come.
    queued: Arc<crate::outcomes::index::Index>,
}

/// The floodgate policy: the current generation of limits over one store that outlives
/// reloads.
#[derive(Clone)]
pub struct RatePolicy {
    inner: Arc<Inner>,
}

impl RatePolicy {
    /// A policy running `model` over `store`, on the system clock.
    pub fn new(model: Arc<PolicyModel>, store: Arc<dyn Store>) -> RatePolicy {
        RatePolicy::with_clock(model, store, Arc::new(now_micros))
    }

    /// A policy running `model` over `store`, timing checks with `clock` (for tests that
    /// replay the same times elsewhere; the store keeps its own clock).
    pub fn with_clock(model: Arc<PolicyModel>, store: Arc<dyn Store>, clock: Clock) -> RatePolicy {
        RatePolicy::build(model, store, clock, Arc::default())
    }

    /// A policy running `model` over `store` on the system clock, counting the limits found
    /// over in `metrics`.
    pub fn with_metrics(
        model: Arc<PolicyModel>,
        store: Arc<dyn Store>,
        metrics: Arc<crate::admin::Metrics>,
    ) -> RatePolicy {
        RatePolicy::build(model, store, Arc::new(now_micros), metrics)
    }

    fn build(
        model: Arc<PolicyModel>,
        store: Arc<dyn Store>,
        clock: Clock,
        metrics: Arc<crate::admin::Metrics>,
    ) -> RatePolicy {
        RatePolicy {
            inner: Arc::new(Inner {
                header_from: (model.reads_header_from()
                    || model.restricts()
                    || model.follows_outcomes())
                .into(),
                current: RwLock::new(model),
                generation: AtomicU64::new(0),
                store,
                slots: Arc::new(Slots::default()),
                clock,
                observer: std::sync::OnceLock::new(),
                metrics,
                evidence: Evidence::default(),
                paced: std::sync::OnceLock::new(),
                notifier: std::sync::OnceLock::new(),
                queued: Arc::default(),
            }),
        }
    }

    /// Makes `model` the generation every later check uses (sessions in flight included).
    pub fn install(&self, model: Arc<PolicyModel>) {
        self.inner.header_from.store(
            model.reads_header_from() || model.restricts() || model.follows_outcomes(),
            Ordering::Relaxed,
        );
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = model;
        self.inner.generation.fetch_add(1, Ordering::Release);
    }

    /// Installs the observer that sees every evaluation and every limit over (the event log
    /// and alerts). Only the first call takes effect.
    pub fn observe(&self, observer: Arc<dyn Observer>) {
        let _ = self.inner.observer.set(observer);
    }

    /// Installs the book of paced messages waiting: while a key of an `action = "pace"`
    /// limit has messages waiting, its later messages are paced too, behind them, so they
    /// leave in order. Only the first call takes effect.
    pub fn pace_with(&self, book: Arc<crate::hold::pace::PaceBook>) {
        let _ = self.inner.paced.set(book);
    }

    /// Installs what sends the mail of `notify_user` (through upstream). Only the first
    /// call takes effect; without one, no such mail is sent.
    pub fn notify_with(&self, notifier: Arc<dyn super::notice::Notifier>) {
        let _ = self.inner.notifier.set(notifier);
    }

    /// Ends every restriction whose time is over and tells of each (log, metric, alert);
    /// see [`super::expiry`]. Returns how many ended.
    pub async fn expire_restrictions(&self) -> Result<usize, StoreError> {
        let host = self.current().hostname.clone();
        super::expiry::sweep(
            &*self.inner.store,
            self.inner.observer.get(),
            &self.inner.metrics,
            &self.inner.evidence,
            &host,
        )
        .await
    }

    /// What this node saw recently of the first of `keys` it knows (see
    /// [`Evidence::of`]).
    pub fn evidence(&self, keys: &[&str]) -> serde_json::Value {
        self.inner.evidence.of(keys)
    }

    /// Brings the `held` count of a restriction's evidence up to this node's (see
    /// [`Evidence::update_held`]).
    pub fn update_held(&self, evidence: &mut serde_json::Value, keys: &[&str]) {
        self.inner.evidence.update_held(evidence, keys);
    }

    /// The index of queued messages whose outcomes are still to come.
    pub fn queue_index(&self) -> &Arc<crate::outcomes::index::Index> {
        &self.inner.queued
    }

    /// The store the policy decides against.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The observer (event log and alerts), once installed.
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.inner.observer.get()
    }

    /// The generation in force.
    pub fn current(&self) -> Arc<PolicyModel> {
        self.inner
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Policy for RatePolicy {
    fn session(&self) -> Box<dyn SessionPolicy> {
        let mut cache = SessionCache::new();
        cache.start_connection();
        // The generation before the model: a reload in between is only read again later.
        let generation = self.inner.generation.load(Ordering::Acquire);
        Box::new(RateSession {
            model: self.current(),
            generation,
            inner: self.inner.clone(),
            cache,
            step: Vec::new(),
            txn: Vec::new(),
            headers: Vec::new(),
            slots: HashMap::new(),
            unavailable: std::sync::atomic::AtomicBool::new(false),
            tally: charge::Tally::default(),
        })
    }

    fn reads_header_from(&self) -> bool {
        self.inner.header_from.load(Ordering::Relaxed)
    }

    fn reload(&self, model: Arc<PolicyModel>) {
        self.install(model);
    }
}

/// A charge to settle when upstream answers.
#[derive(Clone, Debug)]
struct Pending {
    key: String,
    algorithm: Algorithm,
    count: f64,
    unique: Option<String>,
    /// When it was checked (the policy clock), for the replay of leaky Exim limits.
    time_us: i64,
}

impl Pending {
    /// The charge of a checked event, applied as checked once upstream accepts (an EWMA
    /// limit is then stored whatever its mode: the check already decided).
    fn charge(req: &LimitRequest, time_us: i64) -> Pending {
        let mut algorithm = req.algorithm.clone();
        if let Algorithm::Ewma { mode, .. } = &mut algorithm {
            *mode = UpdateMode::Strict;
        }
        Pending {
            key: req.key.clone(),
            algorithm,
            count: req.count,
            unique: req.unique.clone(),
            time_us,
        }
    }

    fn is_bucket(&self) -> bool {
        matches!(self.algorithm, Algorithm::Bucket { .. })
    }

    fn is_ewma(&self) -> bool {
        matches!(self.algorithm, Algorithm::Ewma { .. })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// From the Exim session cache; nothing is asked.
    Cached,
    /// Decided and stored now.
    Now,
    /// Checked now without storing; charged on upstream's acceptance.
    DryRun,
    /// Leaky Exim on recipients or bytes: replayed over the stored record and this
    /// session's pending events; charged on upstream's acceptance.
    Replay,
    /// Bucket check that reserves; settled on upstream's answer.
    Reserve,
    /// Bucket check, committed at once.
    BucketNow,
    /// Concurrency slot.
    Slot,
    /// A ratio, read from its window.
    Ratio,
    /// Answered from the earlier Exim limit at this index of the check, which has the same
    /// database key and cache (Exim's cache, exim-ratelimit.md §4 step 1): its rate against
    /// this limit's own m; nothing is counted or remembered.
    Same(usize),
}

struct Eval<'m> {
    def: &'m LimitDef,
    class: Class,
    key: String,
    /// The key text (for the observer).
    key_text: String,
    req: Option<LimitRequest>,
    outcome: Outcome,
    slot: Option<SlotGuard>,
    /// A [`Class::Replay`] that computed its rate (the store could be read): a rate Exim
    /// would remember.
    replayed: bool,
}

struct RateSession {
    inner: Arc<Inner>,
    /// The generation of limits this session last read, and its number
    /// ([`Inner::generation`]).
    model: Arc<PolicyModel>,
    generation: u64,
    cache: SessionCache,
    /// Charges of the MAIL or RCPT being judged (kept if upstream accepts it).
    step: Vec<Pending>,
    /// Charges of the transaction (settled at end of data).
    txn: Vec<Pending>,
    /// Headers for the message: limit name → line.
    headers: Vec<(String, String)>,
    /// Concurrency slots held: limit name → guard.
    slots: HashMap<String, SlotGuard>,
    /// Set when the store answered "unavailable" (Redis down, a limit failing closed)
    /// during the current check.
    unavailable: std::sync::atomic::AtomicBool,
    /// Upstream's answers to this transaction's recipients (ratio limits and outcome
    /// counts only).
    tally: charge::Tally,
}

impl RateSession {
    /// The generation in force, for a whole check.
    fn model(&mut self) -> Arc<PolicyModel> {
        self.refresh();
        self.model.clone()
    }

    /// Reads the generation in force again if a reload installed one since the last read.
    fn refresh(&mut self) {
        let generation = self.inner.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.model = self
                .inner
                .current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            self.generation = generation;
        }
    }

    /// Charges of this session not yet in the store, per key (for GCRA dry runs).
    fn local_pending(&self, key: &str) -> f64 {
        self.txn
            .iter()
            .chain(&self.step)
            .filter(|p| !p.is_bucket() && !p.is_ewma() && p.key == key)
            .map(|p| p.count)
            .sum()
    }

    /// Exim's answer for `req` (a leaky EWMA request) at `now_us`: the stored record, then
    /// this session's pending events on the key in the order they were checked, then `req`.
    /// `None` when the store cannot be read (the caller fails open).
    async fn replayed(&self, req: &LimitRequest, now_us: i64) -> Option<replay::Replayed> {
        let Algorithm::Ewma {
            limit,
            period_secs,
            unique_kind,
            ..
        } = req.algorithm
        else {
            return None;
        };
        let records = match self.inner.store.inspect(&req.key).await {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "rate limit store failed; letting the event through");
                return None;
            }
        };
        // txn holds earlier steps (in order), step the command being judged.
        let pending: Vec<replay::Event<'_>> = self
            .txn
            .iter()
            .chain(&self.step)
            .filter(|p| p.is_ewma() && p.key == req.key)
            .map(|p| replay::Event {
                time_us: p.time_us,
                count: p.count,
                unique: p.unique.as_deref(),
            })
            .collect();
        let new = replay::Event {
            time_us: now_us,
            count: req.count,
            unique: req.unique.as_deref(),
        };
        let limit = replay::Limit {
            limit,
            period_secs,
            unique_kind,
        };
        Some(replay(&records, &pending, &new, &limit))
    }

    fn applies(def: &LimitDef, stage: Stage, facts: &Facts, model: &PolicyModel) -> bool {
        def.stage == stage
            && def
                .when
                .as_ref()
                .is_none_or(|c| c.eval(facts, &model.lists))
    }

    async fn decide(&self, d: &Decision) -> Option<Vec<LimitResult>> {
        if d.limits.is_empty() {
            return Some(Vec::new());
        }
        match self.inner.store.decide(d).await {
            Ok(r) => Some(r.limits),
            Err(StoreError::Unavailable(why)) => {
                // The store's failure mode says "closed": the check answers 451 4.3.0.
                warn!(error = %why, "rate limit store unavailable; failing closed");
                self.unavailable.store(true, Ordering::Relaxed);
                None
            }
            Err(e) => {
                // Fail open, visibly: a malformed request must not stop all mail.
                warn!(error = %e, "rate limit store failed; letting the event through");
                None
            }
        }
    }

    async fn run_check(&mut self, stage: Stage, facts: &Facts) -> Verdict {
        let model = self.model();
        let now_us = (self.inner.clock)();
        self.cache.start_command();
        if stage == Stage::Mail {
            self.cache.reset_message();
            self.headers.clear();
            self.tally_abandoned();
        }
        let restricts = model.restricts();
        if restricts {
            self.note_evidence(stage, facts, now_us);
        }
        // The restricted set is checked at MAIL FROM: within the stage's decision when there
        // is one (one round trip with Redis), else on its own before anything is counted.
        // Until it passed, evaluations are not told (a restricted key's are not).
        let mut guard: Option<Vec<String>> = None;
        if stage == Stage::Mail && (restricts || self.inner.store.may_restrict()) {
            guard = Some(restrict_candidates(&model, facts)).filter(|k| !k.is_empty());
        }
        let mut evals: Vec<Eval<'_>> = Vec::new();
        for def in &model.limits {
            if !Self::applies(def, stage, facts, &model) {
                continue;
            }
            let key_text = match &def.key {
                Some(t) => {
                    t.expand(|v, out| var_value(v, facts, Some(def), None, &model.hostname, out))
                }
                None => facts.client_ip.map(|i| i.to_string()).unwrap_or_default(),
            };
            let (mut req, mut outcome) = request(def, &model, stage, facts, &key_text);
            let auth_fail = def.counted == Counted::AuthFailures;
            let class = match &def.rate {
                RateDef::Concurrency(_) => {
                    if self.slots.contains_key(&def.name) {
                        continue;
                    }
                    Class::Slot
                }
                RateDef::Ratio(_) => Class::Ratio,
                // Upstream's outcomes are charged when they happen: would one more be over?
                _ if def.counted.outcome() => {
                    req.count = 1.0;
                    Class::DryRun
                }
                _ if auth_fail => {
                    // Before an AUTH exchange: would one more failure be over?
                    req.count = 1.0;
                    if matches!(req.algorithm, Algorithm::Bucket { .. }) {
                        Class::BucketNow
                    } else {
                        Class::DryRun
                    }
                }
                RateDef::Bucket(_)
                    if def.counted.reserved() || def.counted == Counted::Messages =>
                {
                    Class::Reserve
                }
                RateDef::Bucket(_) => Class::BucketNow,
                RateDef::Exim { resolved, .. } => {
                    if let Some(rate) = self.cache.get(resolved.cache, &req.key) {
                        outcome.value = rate;
                        outcome.over = is_over(rate, outcome.limit);
                        Class::Cached
                    } else if let Some(j) = evals.iter().position(|e| {
                        // An earlier limit of this check already puts the key in the cache
                        // (a cached one would have answered above).
                        matches!(e.class, Class::Now | Class::Replay)
                            && e.key == req.key
                            && matches!(&e.def.rate, RateDef::Exim { resolved: r, .. }
                                if r.cache == resolved.cache)
                    }) {
                        Class::Same(j)
                    } else if def.mode == UpdateMode::Leaky && def.counted.reserved() {
                        Class::Replay
                    } else {
                        Class::Now
                    }
                }
                RateDef::Gcra(_) if def.mode == UpdateMode::Leaky && def.counted.reserved() => {
                    Class::DryRun
                }
                RateDef::Gcra(_) => Class::Now,
            };
            let key = req.key.clone();
            if let Some(o) = self.inner.observer.get().filter(|_| guard.is_none()) {
                // Evaluations only: cached answers and concurrency slots are not; auth
                // failures are told when they happen (auth_result).
                if !matches!(
                    class,
                    Class::Cached | Class::Same(_) | Class::Slot | Class::Ratio
                ) && !auth_fail
                    && !def.counted.outcome()
                {
                    o.evaluated(&Evaluated {
                        def,
                        key: &key_text,
                        count: req.count,
                        unique: req.unique.as_deref(),
                        own_limit: outcome.from_list.then_some(outcome.limit),
                        time_us: now_us,
                    });
                }
            }
            evals.push(Eval {
                def,
                class,
                key,
                key_text,
                req: Some(req),
                outcome,
                slot: None,
                replayed: false,
            });
        }
        if let Some(keys) = guard.take() {
            if folds_restricted(&evals) {
                guard = Some(keys);
            } else {
                if let Some(v) = self.check_restricted(&model, facts, &keys, now_us).await {
                    return v;
                }
                self.tell_evaluated(&evals, now_us);
            }
        }
        if evals.is_empty() {
            return Verdict::Continue;
        }
        // Concurrency slots first (local, exact).
        let mut refused = false;
        for e in evals.iter_mut().filter(|e| e.class == Class::Slot) {
            let RateDef::Concurrency(max) = e.def.rate else {
                continue;
            };
            match self.inner.slots.acquire(&e.key, max) {
                Ok(g) => {
                    e.outcome.value = self.inner.slots.held(&e.key) as f64;
                    e.slot = Some(g);
                }
                Err(held) => {
                    e.outcome.value = held as f64 + 1.0;
                    e.outcome.over = true;
                    refused |= e.def.action.blocks();
                }
            }
        }
        // Ratios: read from their windows.
        for e in evals.iter_mut().filter(|e| e.class == Class::Ratio) {
            let RateDef::Ratio(r) = &e.def.rate else {
                continue;
            };
            match self
                .inner
                .store
                .ratio(&e.key, r.window(), Default::default())
                .await
            {
                Ok(c) => {
                    let (value, over) = r.judge(c);
                    e.outcome.value = value;
                    e.outcome.over = over;
                    refused |= over && e.def.action.blocks();
                }
                Err(StoreError::Unavailable(why)) => {
                    warn!(error = %why, limit = %e.def.name, "ratio window unavailable; failing closed");
                    self.unavailable.store(true, Ordering::Relaxed);
                }
                Err(err) => {
                    warn!(error = %err, limit = %e.def.name, "ratio window not readable; letting the event through");
                }
            }
        }
        // Leaky Exim limits on reserved counts: Exim's own sequence, replayed.
        for j in 0..evals.len() {
            if evals[j].class != Class::Replay {
                continue;
            }
            let req = evals[j].req.as_ref().expect("request");
            let Some(r) = self.replayed(req, now_us).await else {
                continue;
            };
            let e = &mut evals[j];
            e.replayed = true;
            e.outcome.value = r.rate;
            e.outcome.over = r.over;
            e.outcome.retry_after = r.retry_after;
            refused |= r.over && e.def.action.blocks();
            // Limits answered from this one's rate (Exim's cache), each with its own m.
            for a in evals.iter_mut().filter(|a| a.class == Class::Same(j)) {
                let o = &mut a.outcome;
                o.value = r.rate;
                o.over = is_over(r.rate, o.limit);
                let blocks = o.over && a.def.action.blocks();
                // The replayed event is charged only if nothing refuses it.
                o.retry_after = r.retry_for(o.limit, !r.over && !blocks && !refused);
                refused |= blocks;
            }
        }
        // Dry run.
        let dry: Vec<usize> = (0..evals.len())
            .filter(|&i| evals[i].class == Class::DryRun)
            .collect();
        if !dry.is_empty() {
            let mut d = Decision::default();
            for &i in &dry {
                let mut r = evals[i].req.clone().expect("request");
                r.count += self.local_pending(&r.key);
                if let Algorithm::Ewma { mode, .. } = &mut r.algorithm {
                    *mode = UpdateMode::Leaky;
                }
                d.limits.push(r);
            }
            d.limits.push(sentinel());
            if let Some(results) = self.decide(&d).await {
                for (&i, r) in dry.iter().zip(&results) {
                    apply_result(&mut evals[i].outcome, r);
                    refused |= r.over && evals[i].def.action.blocks();
                }
            }
        }
        refused |= evals
            .iter()
            .any(|e| e.class == Class::Cached && e.outcome.over && e.def.action.blocks());
        // The decision that stores.
        let now: Vec<usize> = (0..evals.len())
            .filter(|&i| match evals[i].class {
                Class::Now | Class::Reserve | Class::BucketNow => true,
                Class::Same(j) => evals[j].class == Class::Now,
                _ => false,
            })
            .collect();
        if !now.is_empty() {
            let mut d = Decision::default();
            for &i in &now {
                let mut req = evals[i].req.clone().expect("request");
                if let Class::Same(j) = evals[i].class {
                    // Answered by the store from j's fresh rate, in the same decision (so a
                    // refusal it causes is all-or-nothing like any other).
                    let of = now.iter().position(|&k| k == j).expect("earlier limit");
                    req.algorithm = Algorithm::Same {
                        of,
                        limit: evals[i].outcome.limit,
                    };
                    req.unique = None;
                }
                d.limits.push(req);
            }
            if refused {
                // Someone already refused: strict limits still charge, nothing else does.
                d.limits.push(sentinel());
            }
            let results = match guard.take() {
                Some(keys) => match self.decide_guarded(&keys, &d, &model, facts, now_us).await {
                    Ok(r) => {
                        self.tell_evaluated(&evals, now_us);
                        r
                    }
                    Err(v) => return v,
                },
                None => self.decide(&d).await,
            };
            if let Some(results) = results {
                for (&i, r) in now.iter().zip(&results) {
                    apply_result(&mut evals[i].outcome, r);
                }
                refused |= now
                    .iter()
                    .zip(&results)
                    .any(|(&i, r)| r.over && evals[i].def.action.blocks());
            }
        }
        // Settle.
        let mut commit_now = Decision::default();
        for e in &mut evals {
            let req = e.req.as_ref().expect("request");
            match e.class {
                Class::Now => {
                    if let RateDef::Exim { resolved, .. } = &e.def.rate {
                        self.cache
                            .remember(resolved.cache, &req.key, e.outcome.value);
                    }
                }
                // A dry-run charge is due, over or not, once upstream accepts; Exim's leaky
                // mode stores only an event that is not over (a warn, header or delay limit
                // lets an over event through uncharged).
                Class::DryRun
                    if !refused
                        && e.def.counted != Counted::AuthFailures
                        && !e.def.counted.outcome() =>
                {
                    self.pending_for(stage).push(Pending::charge(req, now_us));
                }
                Class::Replay => {
                    // Exim remembers the rate it computed, stored or not (a store that could
                    // not be read computed none).
                    if let (RateDef::Exim { resolved, .. }, true) = (&e.def.rate, e.replayed) {
                        self.cache
                            .remember(resolved.cache, &req.key, e.outcome.value);
                    }
                    if !refused && !e.outcome.over {
                        self.pending_for(stage).push(Pending::charge(req, now_us));
                    }
                }
                Class::Reserve if !refused && !e.outcome.over => {
                    let p = Pending {
                        key: req.key.clone(),
                        algorithm: req.algorithm.clone(),
                        count: req.count,
                        unique: None,
                        time_us: now_us,
                    };
                    self.pending_for(stage).push(p);
                }
                Class::BucketNow if !refused && !e.outcome.over => {
                    let mut r = req.clone();
                    if let Algorithm::Bucket { op, .. } = &mut r.algorithm {
                        *op = BucketOp::Commit(Spamminess::Other);
                    }
                    r.blocking = false;
                    commit_now.limits.push(r);
                }
                Class::Slot if !refused => {
                    if let Some(g) = e.slot.take() {
                        self.slots.insert(e.def.name.clone(), g);
                    }
                }
                _ => {}
            }
        }
        if !commit_now.limits.is_empty() {
            self.decide(&commit_now).await;
        }
        if self.unavailable.swap(false, Ordering::Relaxed)
            && evals.iter().any(|e| e.def.action.blocks())
        {
            let host = &model.hostname;
            let text = format!("4.3.0 {host} Rate limit service unavailable, try again later");
            return if stage == Stage::Connect {
                Verdict::Disconnect(Reply::new(421, text))
            } else {
                Verdict::Reply(Reply::new(451, text))
            };
        }
        // Countermeasures.
        let mut strongest: Option<&Eval<'_>> = None;
        for e in &evals {
            if e.def.action == Action::Header && stage != Stage::Connect {
                let line = header_line(e.def, &e.outcome);
                self.headers.retain(|(n, _)| n != &e.def.name);
                self.headers.push((e.def.name.clone(), line));
            }
            if !e.outcome.over {
                continue;
            }
            self.inner
                .metrics
                .verdict(&e.def.name, e.def.action.as_str());
            info!(
                limit = %e.def.name,
                stage = stage.as_str(),
                key = %e.key,
                rate = e.outcome.value,
                limit_value = %e.outcome.limit_text,
                action = e.def.action.as_str(),
                client = %facts.client_ip.map(|i| i.to_string()).unwrap_or_default(),
                user = facts.user.as_deref().unwrap_or(""),
                "rate limit over"
            );
            if let Some(o) = self.inner.observer.get() {
                o.crossed(&Crossed {
                    def: e.def,
                    key: &e.key_text,
                    outcome: &e.outcome,
                    stage,
                    facts,
                    time_us: now_us,
                });
            }
            if strongest.is_none_or(|s| e.def.action.rank() > s.def.action.rank()) {
                strongest = Some(e);
            }
        }
        if strongest.is_none_or(|s| s.def.action.rank() < Action::Pace.rank()) {
            if let Some(v) = self.queue_behind_paced(&evals) {
                return v;
            }
        }
        let Some(s) = strongest else {
            return Verdict::Continue;
        };
        let mut restricted: Option<(&LimitDef, Restriction)> = None;
        for e in evals
            .iter()
            .filter(|e| e.outcome.over && e.def.action == Action::Restrict)
        {
            if let Some(r) = self.restrict_over(e, facts, &model).await {
                restricted.get_or_insert((e.def, r));
            }
        }
        if restricts {
            let key = evidence_key(facts);
            self.inner.evidence.note(&key, Fact::Refused, now_us);
        }
        if let (Action::Restrict, Some((def, r))) = (s.def.action, &restricted) {
            let holds = def.restrict.as_ref().is_some_and(|x| x.hold);
            if holds
                && matches!(
                    stage,
                    Stage::Mail | Stage::Rcpt | Stage::Data | Stage::Message
                )
            {
                // while_restricted = "hold": the message that tripped it is held too.
                self.inner
                    .evidence
                    .note(&evidence_key(facts), Fact::Held, now_us);
                return Verdict::Hold(super::HoldOrder {
                    limit: r.limit.clone(),
                    key: r.key.clone(),
                    answer: super::TakenAnswer::Hold,
                });
            }
            let reply = action::restricted_reply(Some(def), r, facts, &model.hostname);
            return if stage == Stage::Connect {
                Verdict::Disconnect(reply)
            } else {
                Verdict::Reply(reply)
            };
        }
        if s.def.action.takes_message() {
            let answer = match s.def.action {
                Action::Reroute => super::TakenAnswer::Reroute,
                Action::Pace => match s.def.pace_rate() {
                    Some(r) => super::TakenAnswer::Pace(r),
                    None => super::TakenAnswer::Hold,
                },
                _ => super::TakenAnswer::Hold,
            };
            if restricts && !matches!(answer, super::TakenAnswer::Reroute) {
                self.inner
                    .evidence
                    .note(&evidence_key(facts), Fact::Held, now_us);
            }
            return Verdict::Hold(super::HoldOrder {
                limit: s.def.name.clone(),
                key: s.key_text.clone(),
                answer,
            });
        }
        let v = action::verdict(s.def, stage, facts, &s.outcome, &model.hostname);
        if let Verdict::Delay(d) = &v {
            info!(limit = %s.def.name, delay_ms = d.as_millis() as u64, "rate limit delay");
        }
        v
    }

    /// A pace order for an event of a key that has paced messages waiting, over its limit
    /// or not: it queues behind them, so the key's messages leave in the order they came.
    fn queue_behind_paced(&self, evals: &[Eval<'_>]) -> Option<Verdict> {
        let book = self.inner.paced.get()?;
        let e = evals
            .iter()
            .find(|e| e.def.action == Action::Pace && book.pending(&e.def.name, &e.key_text))?;
        let rate = e.def.pace_rate()?;
        info!(limit = %e.def.name, key = %e.key_text, "message paced behind earlier paced messages");
        Some(Verdict::Hold(super::HoldOrder {
            limit: e.def.name.clone(),
            key: e.key_text.clone(),
            answer: super::TakenAnswer::Pace(rate),
        }))
    }

    /// Charges one `counted` event (an outcome count) to the rate limits counting it.
    async fn charge_now(&self, model: &PolicyModel, facts: &Facts, counted: Counted) {
        let limits = charge::rate_limits(model, facts, counted);
        if limits.is_empty() {
            return;
        }
        let now_us = (self.inner.clock)();
        let mut d = Decision::default();
        for (def, key_text) in &limits {
            if let Some(o) = self.inner.observer.get() {
                o.evaluated(&Evaluated {
                    def,
                    key: key_text,
                    count: 1.0,
                    unique: None,
                    own_limit: None,
                    time_us: now_us,
                });
            }
            d.limits
                .push(charge::charge_request(def, model, facts, key_text, 1));
        }
        self.decide(&d).await;
    }

    /// Adds to ratio windows.
    async fn add_ratios(&self, charges: &[charge::RatioCharge]) {
        for c in charges {
            if let Err(e) = self.inner.store.ratio(&c.key, c.window, c.add).await {
                warn!(error = %e, limit = %c.limit, key = %c.key, "ratio window not updated");
            }
        }
    }

    /// Upstream answered a recipient: tallied for ratios; a refusal is charged now.
    async fn rcpt_answered(&mut self, facts: &Facts, reply: &Reply) {
        let model = self.model();
        if !model.follows_outcomes() {
            return;
        }
        match reply.code / 100 {
            2 => self
                .tally
                .accepted
                .push(facts.recipient.clone().unwrap_or_default()),
            5 => {
                self.tally.refused += 1;
                self.charge_now(&model, facts, Counted::RefusedRecipients)
                    .await;
            }
            _ => return,
        }
        self.tally.if_abandoned =
            charge::ratio_charges(&model, facts, &self.tally, charge::End::Abandoned);
    }

    /// Upstream answered the end of data: refused messages charged, ratio windows
    /// updated, and a queued message remembered for its later outcomes.
    async fn message_answered(&mut self, facts: &Facts, reply: &Reply) {
        let model = self.model();
        if !model.follows_outcomes() {
            return;
        }
        let tally = std::mem::take(&mut self.tally);
        let end = match reply.code / 100 {
            2 | 5 => charge::End::Answered {
                refused: reply.code / 100 == 5,
                bytes: facts.message_size,
            },
            _ => charge::End::Abandoned,
        };
        if reply.code / 100 == 5 {
            self.charge_now(&model, facts, Counted::RefusedMessages)
                .await;
        }
        self.add_ratios(&charge::ratio_charges(&model, facts, &tally, end))
            .await;
        if !reply.is_completion() {
            return;
        }
        let keys = charge::queued_keys(&model, facts);
        if keys.is_empty() {
            return;
        }
        let Some(id) = crate::outcomes::queue_id::parse(&reply.lines) else {
            warn!(
                upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
                "no queue id in upstream's answer: the message's bounces cannot be counted"
            );
            return;
        };
        let queued = crate::outcomes::index::Queued {
            keys,
            recipients: tally.accepted,
        };
        if let Some(o) = self.inner.observer.get() {
            o.queued(id, &queued, (self.inner.clock)());
        }
        self.inner.queued.insert(id, queued);
    }

    /// A transaction ended without a message upstream answered: its recipients still
    /// count in ratio windows (from a synchronous context).
    fn tally_abandoned(&mut self) {
        let tally = std::mem::take(&mut self.tally);
        if tally.if_abandoned.is_empty() {
            return;
        }
        let store = self.inner.store.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                for c in tally.if_abandoned {
                    if let Err(e) = store.ratio(&c.key, c.window, c.add).await {
                        warn!(error = %e, limit = %c.limit, "ratio window not updated");
                    }
                }
            });
        }
    }

    /// Notes what this event says about its key (restricting configs only).
    fn note_evidence(&self, stage: Stage, facts: &Facts, now_us: i64) {
        let fact = match stage {
            Stage::Mail => Fact::Mail(facts.client_ip),
            Stage::Rcpt => match facts.recipient.as_deref() {
                Some(r) => Fact::Recipient(r),
                None => return,
            },
            Stage::Message => match facts.subject.as_deref() {
                Some(s) => Fact::Subject(s),
                None => return,
            },
            _ => return,
        };
        self.inner.evidence.note(&evidence_key(facts), fact, now_us);
    }

    /// The restricted answer when one of `keys` (the session's candidates) is restricted;
    /// the store's failure mode when the set cannot be read.
    async fn check_restricted(
        &self,
        model: &PolicyModel,
        facts: &Facts,
        keys: &[String],
        now_us: i64,
    ) -> Option<Verdict> {
        match self.inner.store.restricted(keys).await {
            Ok(None) => None,
            Ok(Some(r)) => Some(self.restricted_verdict(model, facts, r, now_us)),
            Err(e) => Some(unreadable_verdict(model, &e)),
        }
    }

    /// The MAIL stage's decision guarded by the restricted set (see
    /// [`Store::decide_unless_restricted`]): `Err` with the answer when a key is restricted
    /// or the set cannot be read; else the decision's results as [`RateSession::decide`].
    async fn decide_guarded(
        &self,
        keys: &[String],
        d: &Decision,
        model: &PolicyModel,
        facts: &Facts,
        now_us: i64,
    ) -> Result<Option<Vec<LimitResult>>, Verdict> {
        match self.inner.store.decide_unless_restricted(keys, d).await {
            Ok(Guarded::Decided(r)) => Ok(Some(r.limits)),
            Ok(Guarded::Restricted(r)) => Err(self.restricted_verdict(model, facts, r, now_us)),
            Err(StoreError::Invalid(e)) => {
                // As for any decision: fail open, visibly; the set is still checked.
                warn!(error = %e, "rate limit store failed; letting the event through");
                match self.check_restricted(model, facts, keys, now_us).await {
                    Some(v) => Err(v),
                    None => Ok(None),
                }
            }
            Err(e) => Err(unreadable_verdict(model, &e)),
        }
    }

    /// Tells the observer of the evaluations of a check (once the restricted set let it on).
    fn tell_evaluated(&self, evals: &[Eval<'_>], now_us: i64) {
        let Some(o) = self.inner.observer.get() else {
            return;
        };
        for e in evals {
            let Some(req) = &e.req else { continue };
            if matches!(e.class, Class::Cached | Class::Same(_) | Class::Slot)
                || e.def.counted == Counted::AuthFailures
            {
                continue;
            }
            o.evaluated(&Evaluated {
                def: e.def,
                key: &e.key_text,
                count: req.count,
                unique: req.unique.as_deref(),
                own_limit: e.outcome.from_list.then_some(e.outcome.limit),
                time_us: now_us,
            });
        }
    }

    /// The answer to a MAIL FROM of a restricted key: the restricted reply, or the message
    /// taken to be held (`while_restricted = "hold"`).
    fn restricted_verdict(
        &self,
        model: &PolicyModel,
        facts: &Facts,
        r: Restriction,
        now_us: i64,
    ) -> Verdict {
        self.inner.metrics.restriction("refused");
        let def = model.limits.iter().find(|d| d.name == r.limit);
        let holds = def.is_some_and(|d| d.restrict.as_ref().is_some_and(|x| x.hold));
        if model.restricts() {
            let fact = if holds { Fact::Held } else { Fact::Refused };
            self.inner.evidence.note(&evidence_key(facts), fact, now_us);
        }
        info!(
            key = %r.key,
            limit = %r.limit,
            client = %facts.client_ip.map(|i| i.to_string()).unwrap_or_default(),
            user = facts.user.as_deref().unwrap_or(""),
            while_restricted = if holds { "hold" } else { "defer" },
            "restricted key refused"
        );
        if holds {
            // while_restricted = "hold": the message is taken and held, not refused.
            return Verdict::Hold(super::HoldOrder {
                limit: r.limit.clone(),
                key: r.key.clone(),
                answer: super::TakenAnswer::Hold,
            });
        }
        Verdict::Reply(action::restricted_reply(def, &r, facts, &model.hostname))
    }

    /// Puts the key of an over `restrict` limit in the restricted set; tells the log, the
    /// metrics and the alerts. `None` when the store could not take it (the event is then
    /// deferred as by `defer`).
    async fn restrict_over(
        &self,
        e: &Eval<'_>,
        facts: &Facts,
        model: &PolicyModel,
    ) -> Option<Restriction> {
        let rdef = e.def.restrict.as_ref()?;
        let key = match &rdef.key {
            Some(t) => t.expand(|v, out| {
                var_value(
                    v,
                    facts,
                    Some(e.def),
                    Some(&e.outcome),
                    &model.hostname,
                    out,
                )
            }),
            None => e.key_text.clone(),
        };
        if key.is_empty() {
            warn!(limit = %e.def.name, "restrict: the restrict key is empty; not restricting");
            return None;
        }
        let ekey = evidence_key(facts);
        let by = format!("limit {} on {}", e.def.name, model.hostname);
        let reason = format!(
            "rate {} over the limit {} per {}",
            (e.outcome.value * 10.0).round() / 10.0,
            e.outcome.limit_text,
            e.outcome.period_text
        );
        let r = Restriction {
            key: key.clone(),
            limit: e.def.name.clone(),
            since_us: 0,
            until_us: None,
            rate: Some(e.outcome.value),
            limit_text: format!("{} / {}", e.outcome.limit_text, e.outcome.period_text),
            by: by.clone(),
            reason: reason.clone(),
            evidence: self.inner.evidence.of(&[key.as_str(), ekey.as_str()]),
        };
        match self
            .inner
            .store
            .restrict_once(r, rdef.duration.micros())
            .await
        {
            // Another session restricted the key meanwhile: it told of it.
            Ok((r, false)) => Some(r),
            Ok((r, true)) => {
                // The restriction takes over from the limit's record of the key: when it
                // ends (by time or release) the key starts afresh instead of being
                // restricted again by the rate that restricted it.
                if let Err(err) = self.inner.store.reset(&e.key).await {
                    warn!(error = %err, key = %e.key, "restrict: the limit's record was not reset");
                }
                self.inner.metrics.restriction("restricted");
                info!(
                    key = %r.key,
                    limit = %r.limit,
                    until = %r.until_us.map_or_else(|| "until_released".into(), crate::report::time::rfc3339),
                    rate = e.outcome.value,
                    by = %by,
                    "key restricted"
                );
                if let Some(o) = self.inner.observer.get() {
                    o.restriction(&super::alert::restriction_notice(
                        "floodgate.restricted",
                        &r,
                        &by,
                        &reason,
                        &model.hostname,
                    ));
                }
                self.notify_user(e.def, &r, facts, &model.hostname);
                Some(r)
            }
            Err(err) => {
                warn!(error = %err, key = %key, limit = %e.def.name,
                    "restrict: the store could not record the restriction");
                None
            }
        }
    }

    /// Hands the `notify_user` mail of a new restriction to the notifier (never blocks).
    fn notify_user(&self, def: &LimitDef, r: &Restriction, facts: &Facts, hostname: &str) {
        let date = now_micros().div_euclid(1_000_000);
        match super::notice::user_notice(def, r, facts, hostname, date) {
            Ok(None) => {}
            Ok(Some(n)) => match self.inner.notifier.get() {
                Some(sender) => sender.notify(n),
                None => warn!(key = %r.key, "notify_user: no way to send mail here; not told"),
            },
            Err(err) => {
                self.inner.metrics.restriction("user_notice_failed");
                warn!(key = %r.key, limit = %def.name, error = %err, "notify_user: not sent");
            }
        }
    }

    fn pending_for(&mut self, stage: Stage) -> &mut Vec<Pending> {
        match stage {
            Stage::Mail | Stage::Rcpt => &mut self.step,
            _ => &mut self.txn,
        }
    }

    /// A decision that settles `pending`: commit (with a verdict for dynamic buckets) or not.
    fn settle(pending: Vec<Pending>, commit: Option<Spamminess>) -> Decision {
        let mut d = Decision::default();
        // Sum non-unique charges per key: one request per key and algorithm. EWMA events
        // stay one request each, in the order they were checked, as Exim stores them.
        let mut merged: Vec<Pending> = Vec::new();
        for p in pending {
            if p.unique.is_none() && !p.is_ewma() {
                if let Some(m) = merged
                    .iter_mut()
                    .find(|m| m.unique.is_none() && m.key == p.key && m.algorithm == p.algorithm)
                {
                    m.count += p.count;
                    continue;
                }
            }
            merged.push(p);
        }
        for p in merged {
            let algorithm = match (p.algorithm, commit) {
                (Algorithm::Bucket { spec, .. }, Some(v)) => Algorithm::Bucket {
                    spec,
                    op: BucketOp::Commit(v),
                },
                (Algorithm::Bucket { spec, .. }, None) => Algorithm::Bucket {
                    spec,
                    op: BucketOp::Cancel,
                },
                (other, Some(_)) => other,
                // Nothing was stored for a dry-run charge: dropping it is the refund.
                (_, None) => continue,
            };
            d.limits.push(LimitRequest {
                key: p.key,
                algorithm,
                count: p.count,
                unique: p.unique,
                blocking: false,
            });
        }
        d
    }

    /// Releases pending charges from a synchronous context (abandon, drop).
    fn release_detached(&self, pending: Vec<Pending>) {
        let d = Self::settle(pending, None);
        if d.limits.is_empty() {
            return;
        }
        let store = self.inner.store.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                if let Err(e) = store.decide(&d).await {
                    warn!(error = %e, "cannot release rate limit reservations");
                }
            });
        }
    }

    async fn auth_result(&mut self, facts: &Facts) -> Verdict {
        if facts.auth_succeeded {
            return Verdict::Continue;
        }
        let model = self.model();
        // auth_failures limits count the failure now.
        let mut d = Decision::default();
        for def in &model.limits {
            if def.counted != Counted::AuthFailures
                || !Self::applies(def, Stage::Auth, facts, &model)
            {
                continue;
            }
            let key_text = match &def.key {
                Some(t) => {
                    t.expand(|v, out| var_value(v, facts, Some(def), None, &model.hostname, out))
                }
                None => facts.client_ip.map(|i| i.to_string()).unwrap_or_default(),
            };
            let (mut req, outcome) = request(def, &model, Stage::Auth, facts, &key_text);
            if let Some(o) = self.inner.observer.get() {
                o.evaluated(&Evaluated {
                    def,
                    key: &key_text,
                    count: req.count,
                    unique: req.unique.as_deref(),
                    own_limit: outcome.from_list.then_some(outcome.limit),
                    time_us: (self.inner.clock)(),
                });
            }
            req.blocking = false;
            if let Algorithm::Bucket { op, .. } = &mut req.algorithm {
                *op = BucketOp::Commit(Spamminess::Other);
            }
            d.limits.push(req);
        }
        self.decide(&d).await;
        if !model.auth.enabled {
            return Verdict::Continue;
        }
        let ip = facts.client_ip.map(|i| i.to_string());
        let keys =
            authdelay::failure_keys(&model.auth, ip.as_deref(), facts.auth_attempt.as_deref());
        let d = authdelay::failure_decision(&model.auth, keys);
        let Some(results) = self.decide(&d).await else {
            return Verdict::Continue;
        };
        let n = results.iter().map(|r| r.value).fold(0.0, f64::max);
        let delay = authdelay::delay_for(&model.auth, n);
        info!(
            client = %ip.as_deref().unwrap_or(""),
            user = facts.auth_attempt.as_deref().unwrap_or(""),
            failures = (n * 100.0).round() / 100.0,
            delay_ms = delay.as_millis() as u64,
            "auth failure delay"
        );
        if delay.is_zero() {
            Verdict::Continue
        } else {
            Verdict::Delay(delay)
        }
    }

    async fn message_result(&mut self, reply: &Reply) -> Verdict {
        let mut pending = std::mem::take(&mut self.txn);
        pending.append(&mut self.step);
        let mut d = match reply.code / 100 {
            2 => Self::settle(pending, Some(Spamminess::Ham)),
            // Upstream refused it for good: for dynamic buckets that is spam (charged, and the
            // multipliers shrink); everything else is released.
            5 => {
                let (spam, rest): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|p| {
                    matches!(p.algorithm, Algorithm::Bucket { spec, .. } if spec.dynamic.is_some())
                });
                let mut d = Self::settle(spam, Some(Spamminess::Spam));
                d.limits.extend(Self::settle(rest, None).limits);
                d
            }
            _ => Self::settle(pending, None),
        };
        d.limits.shrink_to_fit();
        self.decide(&d).await;
        self.headers.clear();
        self.cache.reset_message();
        Verdict::Continue
    }
}

/// Whether the MAIL stage's restricted-set check can ride on its storing decision: there is
/// one, and no store call comes before it (no replay, no dry run).
fn folds_restricted(evals: &[Eval<'_>]) -> bool {
    evals
        .iter()
        .any(|e| matches!(e.class, Class::Now | Class::Reserve | Class::BucketNow))
        && !evals
            .iter()
            .any(|e| matches!(e.class, Class::Replay | Class::DryRun))
}

/// The answer when the restricted set cannot be read and the store's failure mode is
/// closed: 451 4.3.0.
fn unreadable_verdict(model: &PolicyModel, e: &StoreError) -> Verdict {
    warn!(error = %e, "restricted set unavailable; failing closed");
    let host = &model.hostname;
    Verdict::Reply(Reply::new(
        451,
        format!("4.3.0 {host} Rate limit service unavailable, try again later"),
    ))
}

/// The key evidence is noted under: the authenticated user, else the client address.
fn evidence_key(facts: &Facts) -> String {
    match (&facts.user, facts.client_ip) {
        (Some(u), _) => u.clone(),
        (None, Some(ip)) => ip.to_string(),
        (None, None) => String::new(),
    }
}

/// The keys of a session that a restriction can name: the user, the client address, and the
/// restrict key of every restricting limit as this session expands it.
fn restrict_candidates(model: &PolicyModel, facts: &Facts) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(2);
    if let Some(u) = &facts.user {
        keys.push(u.clone());
    }
    if let Some(ip) = facts.client_ip {
        keys.push(ip.to_string());
    }
    for def in &model.limits {
        let Some(r) = &def.restrict else { continue };
        let t = r.key.as_ref().or(def.key.as_ref());
        let Some(t) = t else { continue };
        let k = t.expand(|v, out| var_value(v, facts, Some(def), None, &model.hostname, out));
        if !k.is_empty() && !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

impl SessionPolicy for RateSession {
    fn check<'a>(&'a mut self, stage: Stage, facts: &'a Facts) -> BoxFuture<'a, Verdict> {
        Box::pin(self.run_check(stage, facts))
    }

    fn check_now(&mut self, stage: Stage, _facts: &Facts) -> Option<Verdict> {
        self.refresh();
        if stage == Stage::Mail {
            // A transaction that ended without upstream's answer to a message (held, say).
            self.tally_abandoned();
        }
        if self.model.limits.iter().any(|d| d.stage == stage) {
            return None;
        }
        // The restricted set is checked at MAIL, and evidence noted at MAIL, RCPT and the
        // end of the message.
        if matches!(stage, Stage::Mail | Stage::Rcpt | Stage::Message)
            && (self.model.restricts() || (stage == Stage::Mail && self.inner.store.may_restrict()))
        {
            return None;
        }
        // What run_check does when no limit is at this stage.
        self.cache.start_command();
        if stage == Stage::Mail {
            self.cache.reset_message();
            self.headers.clear();
        }
        Some(Verdict::Continue)
    }

    fn after_upstream_now(
        &mut self,
        stage: Stage,
        _facts: &Facts,
        _reply: &Reply,
    ) -> Option<Verdict> {
        // What after_upstream does when nothing is pending: there is nothing to settle.
        if charge::stage_followed(&self.model, stage) {
            return None;
        }
        match stage {
            Stage::Auth => None,
            Stage::Mail | Stage::Rcpt if self.step.is_empty() => Some(Verdict::Continue),
            Stage::Message if self.step.is_empty() && self.txn.is_empty() => {
                self.headers.clear();
                self.cache.reset_message();
                Some(Verdict::Continue)
            }
            Stage::Mail | Stage::Rcpt | Stage::Message => None,
            _ => Some(Verdict::Continue),
        }
    }

    fn after_upstream<'a>(
        &'a mut self,
        stage: Stage,
        facts: &'a Facts,
        reply: &'a Reply,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            match stage {
                Stage::Auth => self.auth_result(facts).await,
                Stage::Mail | Stage::Rcpt => {
                    if stage == Stage::Rcpt {
                        self.rcpt_answered(facts, reply).await;
                    }
                    let step = std::mem::take(&mut self.step);
                    if reply.is_completion() {
                        self.txn.extend(step);
                    } else {
                        let d = Self::settle(step, None);
                        self.decide(&d).await;
                    }
                    Verdict::Continue
                }
                Stage::Message => {
                    self.message_answered(facts, reply).await;
                    self.message_result(reply).await
                }
                _ => Verdict::Continue,
            }
        })
    }

    fn message_headers(&mut self) -> Vec<String> {
        self.headers.iter().map(|(_, l)| l.clone()).collect()
    }

    fn transaction_abandoned(&mut self) {
        // Exim's smtp_reset (RSET, HELO/EHLO, STARTTLS) forgets the per-message cache.
        self.cache.reset_message();
        let mut pending = std::mem::take(&mut self.txn);
        pending.append(&mut self.step);
        self.headers.clear();
        self.release_detached(pending);
        self.tally_abandoned();
    }
}

impl Drop for RateSession {
    fn drop(&mut self) {
        let mut pending = std::mem::take(&mut self.txn);
        pending.append(&mut self.step);
        self.release_detached(pending);
        self.tally_abandoned();
    }
}
