//! The policy of one session: its state (the generation it reads, Exim's cache, charges
//! waiting for upstream, headers, concurrency slots, the tally of upstream's answers) and the
//! [`SessionPolicy`] it answers to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::charge;
use super::super::concurrency::SlotGuard;
use super::super::{BoxFuture, Facts, SessionPolicy, Stage, Verdict};
use super::pending::{settlement, Pending};
use super::Inner;
use crate::limit::SessionCache;
use crate::smtp::reply::Reply;

pub(super) struct RateSession {
    pub(super) inner: Arc<Inner>,
    /// The generation of limits this session last read, and its number
    /// ([`Inner::generation`]).
    pub(super) model: Arc<super::PolicyModel>,
    pub(super) generation: u64,
    pub(super) cache: SessionCache,
    /// Charges of the MAIL or RCPT being judged (kept if upstream accepts it).
    pub(super) step: Vec<Pending>,
    /// Charges of the transaction (settled at end of data).
    pub(super) txn: Vec<Pending>,
    /// Headers for the message: limit name → line.
    pub(super) headers: Vec<(String, String)>,
    /// Concurrency slots held: limit name → guard.
    pub(super) slots: HashMap<String, SlotGuard>,
    /// Set when the store answered "unavailable" (Redis down, a limit failing closed)
    /// during the current check.
    pub(super) unavailable: AtomicBool,
    /// Upstream's answers to this transaction's recipients (ratio limits and outcome
    /// counts only).
    pub(super) tally: charge::Tally,
    /// The transaction's message is held because its key is restricted: its later
    /// commands are not checked against the limits (the restriction already told).
    pub(super) contained: AtomicBool,
}

impl RateSession {
    /// A new session on `model` (generation number `generation`).
    pub(super) fn new(
        inner: Arc<Inner>,
        model: Arc<super::PolicyModel>,
        generation: u64,
    ) -> RateSession {
        let mut cache = SessionCache::new();
        cache.start_connection();
        RateSession {
            model,
            generation,
            inner,
            cache,
            step: Vec::new(),
            txn: Vec::new(),
            headers: Vec::new(),
            slots: HashMap::new(),
            unavailable: AtomicBool::new(false),
            tally: charge::Tally::default(),
            contained: AtomicBool::new(false),
        }
    }

    /// The generation in force, for a whole check.
    pub(super) fn model(&mut self) -> Arc<super::PolicyModel> {
        self.refresh();
        self.model.clone()
    }

    /// Reads the generation in force again if a reload installed one since the last read.
    pub(super) fn refresh(&mut self) {
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

    /// Where the charges of a check at `stage` wait.
    pub(super) fn pending_for(&mut self, stage: Stage) -> &mut Vec<Pending> {
        match stage {
            Stage::Mail | Stage::Rcpt => &mut self.step,
            _ => &mut self.txn,
        }
    }

    /// Moves the session on to a check at `stage`: a new command for Exim's cache and, at
    /// MAIL, a new message (no headers yet, nothing contained, the tally of a transaction
    /// that ended without upstream's answer to a message let go).
    pub(super) fn start_stage(&mut self, stage: Stage) {
        self.cache.start_command();
        if stage == Stage::Mail {
            self.cache.reset_message();
            self.headers.clear();
            self.tally_abandoned();
            self.contained.store(false, Ordering::Relaxed);
        }
    }

    /// Whether a check at `stage` on the generation last read has nothing to ask: no limit
    /// at the stage, and no restricted set to check or evidence to note there (the set is
    /// checked at MAIL, evidence noted at MAIL, RCPT and the end of the message). Such a
    /// check answers [`Verdict::Continue`] once the session is moved on to the stage.
    pub(super) fn asks_nothing(&self, stage: Stage) -> bool {
        let model = &self.model;
        !model.limits.iter().any(|d| d.stage == stage)
            && !(matches!(stage, Stage::Mail | Stage::Rcpt | Stage::Message)
                && (model.restricts() || (stage == Stage::Mail && self.inner.store.may_restrict())))
    }

    /// Releases pending charges from a synchronous context (abandon, drop).
    pub(super) fn release_detached(&self, pending: Vec<Pending>) {
        let d = settlement(pending, None);
        if d.limits.is_empty() {
            return;
        }
        let store = self.inner.store.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                if let Err(e) = store.decide(&d).await {
                    super::repeated::RESERVATIONS_KEPT.warn(&e.to_string());
                }
            });
        }
    }
}

impl SessionPolicy for RateSession {
    fn check<'a>(&'a mut self, stage: Stage, facts: &'a Facts) -> BoxFuture<'a, Verdict> {
        Box::pin(self.run_check(stage, facts))
    }

    fn check_now(&mut self, stage: Stage, _facts: &Facts) -> Option<Verdict> {
        self.refresh();
        if !self.asks_nothing(stage) {
            return None;
        }
        self.start_stage(stage);
        Some(Verdict::Continue)
    }

    fn after_upstream_now(
        &mut self,
        stage: Stage,
        _facts: &Facts,
        reply: &Reply,
    ) -> Option<Verdict> {
        // What after_upstream does when nothing is pending: there is nothing to settle.
        if charge::stage_followed(&self.model, stage) {
            return None;
        }
        // A refusal by upstream is evidence about the key.
        if matches!(stage, Stage::Rcpt | Stage::Message)
            && matches!(reply.code / 100, 4 | 5)
            && self.model.restricts()
        {
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
                        let d = settlement(step, None);
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
        self.contained.store(false, Ordering::Relaxed);
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
