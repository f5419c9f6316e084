//! What follows upstream's answers: auth failures counted (and the delay they earn),
//! charges settled at the end of a message, outcome counts and ratio windows.

use tracing::{info, warn};

use super::super::alert::Evaluated;
use super::super::authdelay;
use super::super::charge;
use super::super::evidence::Fact;
use super::super::model::{Counted, PolicyModel};
use super::super::request::request;
use super::super::{Facts, Stage, Verdict};
use super::pending::message_settlement;
use super::plan::{applies, key_text};
use super::rate_session::RateSession;
use super::restrict::evidence_key;
use crate::limit::bucket::{BucketOp, MessageClass};
use crate::smtp::reply::Reply;
use crate::store::{Algorithm, Decision};

impl RateSession {
    /// Upstream answered an AUTH: a failure is charged to the `auth_failures` limits now, and
    /// earns the delay of the auth failure settings.
    pub(super) async fn auth_result(&mut self, facts: &Facts) -> Verdict {
        if facts.auth_succeeded {
            return Verdict::Continue;
        }
        let model = self.model();
        // auth_failures limits count the failure now.
        let mut d = Decision::default();
        for def in &model.limits {
            if def.counted != Counted::AuthFailures || !applies(def, Stage::Auth, facts, &model) {
                continue;
            }
            let key_text = key_text(def, facts, &model);
            let (mut req, outcome) = request(def, &model, Stage::Auth, facts, &key_text);
            if let Some(o) = self.inner.observer.as_ref() {
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
                *op = BucketOp::Commit(MessageClass::Other);
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

    /// Upstream answered the end of data: the transaction's charges are settled.
    pub(super) async fn message_result(&mut self, reply: &Reply) -> Verdict {
        let mut pending = std::mem::take(&mut self.txn);
        pending.append(&mut self.step);
        let d = message_settlement(pending, reply.code / 100);
        self.decide(&d).await;
        self.headers.clear();
        self.cache.reset_message();
        Verdict::Continue
    }

    /// Charges one `counted` event (an outcome count) to the rate limits counting it.
    pub(super) async fn charge_now(&self, model: &PolicyModel, facts: &Facts, counted: Counted) {
        let limits = charge::rate_limits(model, facts, counted);
        if limits.is_empty() {
            return;
        }
        let now_us = (self.inner.clock)();
        let mut d = Decision::default();
        for (def, key_text) in &limits {
            if let Some(o) = self.inner.observer.as_ref() {
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
    pub(super) async fn add_ratios(&self, charges: &[charge::RatioCharge]) {
        for c in charges {
            if let Err(e) = self.inner.store.ratio(&c.key, c.window, c.add).await {
                super::repeated::RATIO_NOT_UPDATED
                    .warn(&format!("{e} (limit {}, key {})", c.limit, c.key));
            }
        }
    }

    /// Upstream answered a recipient: a refusal is evidence about the key; tallied for
    /// ratios; a refusal is charged now.
    pub(super) async fn rcpt_answered(&mut self, facts: &Facts, reply: &Reply) {
        let model = self.model();
        if model.restricts() && matches!(reply.code / 100, 4 | 5) {
            let now_us = (self.inner.clock)();
            self.inner
                .evidence
                .note(&evidence_key(facts), Fact::UpstreamRefusedRecipient, now_us);
        }
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

    /// Upstream answered the end of data: a refusal is evidence about the key; refused
    /// messages charged, ratio windows updated, and a queued message remembered for its
    /// later outcomes.
    pub(super) async fn message_answered(&mut self, facts: &Facts, reply: &Reply) {
        let model = self.model();
        if model.restricts() && matches!(reply.code / 100, 4 | 5) {
            let now_us = (self.inner.clock)();
            self.inner
                .evidence
                .note(&evidence_key(facts), Fact::UpstreamRefusedMessage, now_us);
        }
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
        if let Some(o) = self.inner.observer.as_ref() {
            o.queued(id, &queued, (self.inner.clock)());
        }
        self.inner.queued.insert(id, queued);
    }

    /// A transaction ended without a message upstream answered: its recipients still
    /// count in ratio windows (from a synchronous context).
    pub(super) fn tally_abandoned(&mut self) {
        let tally = std::mem::take(&mut self.tally);
        if tally.if_abandoned.is_empty() {
            return;
        }
        let store = self.inner.store.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                for c in tally.if_abandoned {
                    if let Err(e) = store.ratio(&c.key, c.window, c.add).await {
                        super::repeated::RATIO_NOT_UPDATED
                            .warn(&format!("{e} (limit {})", c.limit));
                    }
                }
            });
        }
    }
}
