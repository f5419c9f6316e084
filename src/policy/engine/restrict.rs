//! The restricted set in a check: a restricted key's answer at MAIL (the set read on its
//! own or with the stage's decision), restricting the key of a `restrict` limit over, the
//! evidence kept on keys, and the `notify_user` mail.

use std::sync::atomic::Ordering;

use tracing::{info, warn};

use super::super::action::{self, var_value};
use super::super::evidence::Fact;
use super::super::model::{LimitDef, PolicyModel};
use super::super::{Facts, Stage, TakeOrder, TakenAnswer, Verdict};
use super::plan::Eval;
use super::rate_session::RateSession;
use crate::smtp::reply::Reply;
use crate::store::{now_micros, Decision, Guarded, LimitResult, Restriction, StoreError};

impl RateSession {
    /// The restricted answer when one of `keys` (the session's candidates) is restricted
    /// (while Redis cannot be read, as the node's copy of the set says); the store's failure
    /// mode when the set cannot be read and the copy does not restrict them.
    pub(super) async fn check_restricted(
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
    pub(super) async fn decide_guarded(
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

    /// The answer to a MAIL FROM of a restricted key: the restricted reply, or the message
    /// taken to be held (`while_restricted = "hold"`).
    pub(super) fn restricted_verdict(
        &self,
        model: &PolicyModel,
        facts: &Facts,
        r: Restriction,
        now_us: i64,
    ) -> Verdict {
        self.inner.metrics.restriction("refused");
        let def = model.limits.iter().find(|d| d.name == r.limit);
        let holds = def.is_some_and(|d| d.restrict.as_ref().is_some_and(|x| x.hold));
        let client = facts.client_ip.map(|i| i.to_string()).unwrap_or_default();
        let user = facts.user.as_deref().unwrap_or("");
        if holds {
            // while_restricted = "hold": the message is taken and held, not refused; its
            // later commands are not checked against the limits.
            self.contained.store(true, Ordering::Relaxed);
            info!(key = %r.key, limit = %r.limit, client = %client, user, "held (restricted)");
            self.tell_contained("held", &r.limit, &r.key, now_us);
            return Verdict::Take(TakeOrder {
                limit: r.limit.clone(),
                key: r.key.clone(),
                answer: TakenAnswer::Hold,
            });
        }
        if model.restricts() {
            let fact = Fact::Refused {
                limit: &r.limit,
                action: RESTRICTED,
            };
            self.inner.evidence.note(&evidence_key(facts), fact, now_us);
        }
        info!(key = %r.key, limit = %r.limit, client = %client, user,
            while_restricted = "defer", "restricted key refused");
        Verdict::Reply(action::restricted_reply(def, &r, facts, &model.hostname))
    }

    /// Puts the key of an over `restrict` limit in the restricted set; tells the log, the
    /// metrics and the alerts. `None` when the store could not take it (the event is then
    /// deferred as by `defer`).
    pub(super) async fn restrict_over(
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
        let mut r = r;
        self.inner
            .held
            .now(&key, &model.hostname)
            .await
            .set_in(&mut r.evidence);
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
                    until = %r.until_us.map_or_else(|| "until_released".into(), crate::time::rfc3339),
                    rate = e.outcome.value,
                    by = %by,
                    "key restricted"
                );
                if let Some(o) = self.inner.observer.as_ref() {
                    o.restriction(&super::super::alert::restriction_notice(
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
                super::repeated::NOT_RESTRICTED
                    .warn(&format!("{err} (key {key}, limit {})", e.def.name));
                None
            }
        }
    }

    /// Hands the `notify_user` mail of a new restriction to the notifier (never blocks).
    pub(super) fn notify_user(
        &self,
        def: &LimitDef,
        r: &Restriction,
        facts: &Facts,
        hostname: &str,
    ) {
        let date = now_micros().div_euclid(1_000_000);
        match super::super::notice::user_notice(def, r, facts, hostname, date) {
            Ok(None) => {}
            Ok(Some(n)) => match self.inner.notifier.as_ref() {
                Some(sender) => sender.notify(n),
                None => warn!(key = %r.key, "notify_user: no way to send mail here; not told"),
            },
            Err(err) => {
                self.inner.metrics.restriction("user_notice_failed");
                warn!(key = %r.key, limit = %def.name, error = %err, "notify_user: not sent");
            }
        }
    }

    /// Tells the observer that `key` was contained by `limit` (`what`: `held`, `defer`).
    pub(super) fn tell_contained(&self, what: &str, limit: &str, key: &str, now_us: i64) {
        if let Some(o) = self.inner.observer.as_ref() {
            o.contained(&super::super::alert::Contained {
                what: what.into(),
                limit: limit.into(),
                key: key.into(),
                time_us: now_us,
            });
        }
    }

    /// Notes what this event says about its key (restricting configs only).
    pub(super) fn note_evidence(&self, stage: Stage, facts: &Facts, now_us: i64) {
        let fact = match stage {
            Stage::Mail => Fact::Mail(facts.client_ip),
            Stage::Message => match facts.subject.as_deref() {
                Some(s) => Fact::Subject(s),
                None => return,
            },
            _ => return,
        };
        let key = evidence_key(facts);
        self.inner.evidence.note(&key, fact, now_us);
        if let (Stage::Mail, Some(typed)) = (stage, facts.login.as_deref()) {
            self.inner.evidence.note(&key, Fact::Login(typed), now_us);
        }
    }
}

/// The answer when the restricted set cannot be read and the store's failure mode is
/// closed: 451 4.3.0 (a key the store's copy of the set holds gets its restricted answer
/// instead, see `store::redis::copy`).
pub(super) fn unreadable_verdict(model: &PolicyModel, e: &StoreError) -> Verdict {
    super::repeated::SET_CLOSED.warn(&e.to_string());
    let host = &model.hostname;
    Verdict::Reply(Reply::new(
        451,
        format!("4.3.0 {host} Rate limit service unavailable, try again later"),
    ))
}

/// The action a restricted key's refusals are counted under in its evidence.
pub(super) const RESTRICTED: &str = "restricted";

/// The key evidence is noted under: the authenticated user, else the client address.
pub(super) fn evidence_key(facts: &Facts) -> String {
    crate::policy::alert::incident_key(facts)
}
