//! The driver of a check: plans it, asks the store (the only awaits), settles the answers,
//! and tells the observer, the metrics and the log from what `settle` returns.

use std::sync::atomic::Ordering;

use tracing::{info, warn};

use super::super::alert::{Crossed, Evaluated};
use super::super::evidence::Fact;
use super::super::model::{Action, PolicyModel, RateDef};
use super::super::replay::{self, replay};
use super::super::{Facts, Stage, TakenAnswer, Verdict};
use super::campaign::Joined;
use super::plan::{self, Class, Eval};
use super::rate_session::RateSession;
use super::restrict::evidence_key;
use super::settle::{self, Charge};
use crate::store::{Algorithm, Decision, LimitRequest, LimitResult, Restriction, StoreError};

impl RateSession {
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

    /// Asks the store `d`; `None` when it failed (failing closed sets
    /// [`RateSession::unavailable`], any other failure lets the event through).
    pub(super) async fn decide(&self, d: &Decision) -> Option<Vec<LimitResult>> {
        if d.limits.is_empty() {
            return Some(Vec::new());
        }
        match self.inner.store.decide(d).await {
            Ok(r) => Some(r.limits),
            Err(StoreError::Unavailable(why)) => {
                // The store's failure mode says "closed": the check answers 451 4.3.0.
                super::repeated::STORE_CLOSED.warn(&why);
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

    /// Tells the observer of the evaluations `told` selects.
    fn tell(&self, evals: &[Eval<'_>], told: fn(&Eval<'_>) -> bool, now_us: i64) {
        let Some(o) = self.inner.observer.as_ref() else {
            return;
        };
        for e in evals.iter().filter(|e| told(e)) {
            o.evaluated(&Evaluated {
                def: e.def,
                key: &e.key_text,
                count: e.req.count,
                unique: e.req.unique.as_deref(),
                own_limit: e.outcome.from_list.then_some(e.outcome.limit),
                time_us: now_us,
            });
        }
    }

    /// Judges one event at `stage`.
    pub(super) async fn run_check(&mut self, stage: Stage, facts: &Facts) -> Verdict {
        let model = self.model();
        self.start_stage(stage);
        if self.asks_nothing(stage) {
            return Verdict::Continue;
        }
        let now_us = (self.inner.clock)();
        let restricts = model.restricts();
        if restricts {
            self.note_evidence(stage, facts, now_us);
        }
        // The message's campaigns note it first, held or not (their totals count every
        // copy); a limit on `${fingerprint}` then counts it under its campaign's id.
        let joined = self.join_campaigns(stage, facts, &model).await;
        // A message held for a restricted key is not checked further: its limits would
        // only tell again, per recipient, what the restriction told.
        if matches!(stage, Stage::Rcpt | Stage::Data | Stage::Message)
            && self.contained.load(Ordering::Relaxed)
        {
            return Verdict::Continue;
        }
        let grouped = joined.facts(facts);
        let facts = grouped.as_ref().unwrap_or(facts);
        // The restricted set is checked at MAIL FROM: within the stage's decision when there
        // is one (one round trip with Redis), else on its own before anything is counted.
        // Until it passed, evaluations are not told (a restricted key's are not).
        let mut guard: Option<Vec<String>> = None;
        if stage == Stage::Mail && (restricts || self.inner.store.may_restrict()) {
            guard = Some(plan::restrict_candidates(&model, facts)).filter(|k| !k.is_empty());
        }
        let mut evals = plan::plan(&model, stage, facts, &self.cache, |name| {
            self.slots.contains_key(name)
        });
        if guard.is_none() {
            self.tell(&evals, plan::told_as_planned, now_us);
        }
        if let Some(keys) = guard.take() {
            if plan::folds_restricted(&evals) {
                guard = Some(keys);
            } else {
                if let Some(v) = self.check_restricted(&model, facts, &keys, now_us).await {
                    return v;
                }
                self.tell(&evals, plan::told_after_guard, now_us);
            }
        }
        if evals.is_empty() {
            return Verdict::Continue;
        }
        let mut refused = self.ask(&mut evals, now_us).await;
        // The decision that stores.
        if let Some((now, d)) = plan::storing(&evals, refused) {
            let results = match guard.take() {
                Some(keys) => match self.decide_guarded(&keys, &d, &model, facts, now_us).await {
                    Ok(r) => {
                        self.tell(&evals, plan::told_after_guard, now_us);
                        r
                    }
                    Err(v) => return v,
                },
                None => self.decide(&d).await,
            };
            if let Some(results) = results {
                refused |= settle::answered(&mut evals, &now, &results);
            }
        }
        self.keep(&mut evals, stage, refused, now_us).await;
        joined.settle(&mut evals);
        if self.unavailable.swap(false, Ordering::Relaxed) {
            if let Some(v) = settle::unavailable(&evals, stage, &model.hostname) {
                return v;
            }
        }
        self.countermeasure(&evals, &joined, stage, facts, &model, now_us)
            .await
    }

    /// Asks what comes before the storing decision: concurrency slots (local, exact),
    /// ratio windows, the replay of leaky Exim limits and the dry run. Returns whether the
    /// event is refused so far.
    async fn ask(&mut self, evals: &mut [Eval<'_>], now_us: i64) -> bool {
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
                    super::repeated::RATIO_CLOSED.warn(&format!("{why} (limit {})", e.def.name));
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
            let Some(r) = self.replayed(&evals[j].req, now_us).await else {
                continue;
            };
            refused = settle::replayed(evals, j, &r, refused);
        }
        if let Some((dry, d)) = plan::dry_run(evals, |key| self.local_pending(key)) {
            if let Some(results) = self.decide(&d).await {
                refused |= settle::answered(evals, &dry, &results);
            }
        }
        refused | settle::cached_refuses(evals)
    }

    /// Keeps the charges of a check: Exim's cache, charges waiting for upstream, bucket
    /// commits (at once), concurrency slots.
    async fn keep(&mut self, evals: &mut [Eval<'_>], stage: Stage, refused: bool, now_us: i64) {
        let mut commit_now = Decision::default();
        for c in settle::charges(evals, refused, now_us) {
            match c {
                Charge::Remember { scope, key, rate } => self.cache.remember(scope, &key, rate),
                Charge::Pending(p) => self.pending_for(stage).push(p),
                Charge::CommitNow(r) => commit_now.limits.push(r),
                Charge::KeepSlot(i) => {
                    if let Some(g) = evals[i].slot.take() {
                        self.slots.insert(evals[i].def.name.clone(), g);
                    }
                }
            }
        }
        if !commit_now.limits.is_empty() {
            self.decide(&commit_now).await;
        }
    }

    /// The countermeasure of a check whose answers are in: headers kept, each limit over
    /// counted, logged and told, then the strongest one's verdict (restricting keys first).
    async fn countermeasure(
        &mut self,
        evals: &[Eval<'_>],
        joined: &Joined,
        stage: Stage,
        facts: &Facts,
        model: &PolicyModel,
        now_us: i64,
    ) -> Verdict {
        let judged = settle::judge(evals, stage);
        if model.restricts() && !judged.over.is_empty() {
            self.inner
                .evidence
                .note(&evidence_key(facts), Fact::Over, now_us);
        }
        for (name, line) in judged.headers {
            self.headers.retain(|(n, _)| n != &name);
            self.headers.push((name, line));
        }
        for &i in &judged.over {
            let e = &evals[i];
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
            // A campaign's own alert tells of it (see `campaign`).
            if let Some(o) = self
                .inner
                .observer
                .as_ref()
                .filter(|_| joined.ledger_of(e).is_none())
            {
                o.crossed(&Crossed {
                    def: e.def,
                    key: &e.key_text,
                    outcome: &e.outcome,
                    stage,
                    facts,
                    time_us: now_us,
                });
            }
        }
        if let Some(book) = self.inner.paced.as_ref() {
            let waiting = |limit: &str, key: &str| book.pending(limit, key);
            if let Some((i, v)) = settle::paced_behind(evals, judged.strongest, waiting) {
                let e = &evals[i];
                info!(limit = %e.def.name, key = %e.key_text, "message paced behind earlier paced messages");
                return v;
            }
        }
        // A campaign's ledger takes every message with its key, over or not.
        let campaign = self.campaigns(evals, joined, facts, model).await;
        let Some(s) = judged.strongest else {
            return Verdict::Continue;
        };
        // The sender restricted with its campaign answers as restricted when its limit
        // restricts; under any other action (hold, defer) that action answers.
        let mut restricted: Option<(usize, Restriction)> =
            campaign.filter(|(i, _)| evals[*i].def.action == Action::Restrict);
        for (i, e) in evals.iter().enumerate() {
            if !e.outcome.over
                || e.def.action != Action::Restrict
                || e.def.restrict.as_ref().is_some_and(|r| r.senders)
            {
                continue;
            }
            if let Some(r) = self.restrict_over(e, facts, model).await {
                restricted.get_or_insert((i, r));
            }
        }
        let restricted = restricted.as_ref().map(|(i, r)| (*i, r));
        let a = settle::answer(evals, s, restricted, stage, facts, model);
        if model.restricts() {
            if let Some((limit, action)) = settle::refused_by(evals, s, restricted, &a.verdict) {
                let fact = Fact::Refused { limit, action };
                self.inner.evidence.note(&evidence_key(facts), fact, now_us);
            }
        }
        if a.held {
            // The message that restricted its key is held as its later ones will be.
            self.contained.store(true, Ordering::Relaxed);
            if let Verdict::Take(o) = &a.verdict {
                info!(key = %o.key, limit = %o.limit,
                    client = %facts.client_ip.map(|i| i.to_string()).unwrap_or_default(),
                    user = facts.user.as_deref().unwrap_or(""), "held (restricted)");
            }
        }
        match &a.verdict {
            Verdict::Take(o) if o.answer == TakenAnswer::Hold => {
                self.tell_contained("held", &o.limit, &o.key, now_us);
            }
            Verdict::Reply(_) if evals[s].def.action == Action::Defer => {
                let e = &evals[s];
                self.tell_contained("defer", &e.def.name, &e.key_text, now_us);
            }
            _ => {}
        }
        if let Verdict::Delay(d) = &a.verdict {
            info!(limit = %evals[s].def.name, delay_ms = d.as_millis() as u64, "rate limit delay");
        }
        a.verdict
    }
}
