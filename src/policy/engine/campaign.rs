//! Campaigns in a check: a limit keyed on a message key with `restrict_senders = true`
//! notes each message's sender in the key's ledger (the store's, shared by a fleet), and
//! when the limit is over restricts every sender in the ledger — not only the one whose
//! message tripped it — each with its own evidence, and tells of the campaign once.

use serde_json::json;
use tracing::info;

use super::super::model::{LimitDef, PolicyModel, RateDef};
use super::super::{Facts, Stage};
use super::plan::Eval;
use super::rate_session::RateSession;
use super::restrict::evidence_key;
use crate::lograte::RepeatedWarning;
use crate::store::{CampaignNote, CampaignSender, Restriction};

/// Ledger writes that failed (logged at most every 10 s).
static NOT_NOTED: RepeatedWarning =
    RepeatedWarning::new("campaign ledger: a message was not noted");

/// The period of a rate limit in µs (the time a sender stays in its ledger).
pub(super) fn period_us(def: &LimitDef) -> i64 {
    let secs = match &def.rate {
        RateDef::Exim { spec, .. } => f64::from(spec.period_secs()),
        RateDef::Gcra(g) => g.rate.period_secs(),
        RateDef::Bucket(b) => b.burst / b.rate.per_second().max(f64::MIN_POSITIVE),
        RateDef::Concurrency(_) | RateDef::Ratio(_) => 3600.0,
    };
    (secs * 1e6).clamp(1e6, 366.0 * 86_400e6) as i64
}

/// What a copy of a campaign looked like, for its ledger and alert.
fn copy_info(facts: &Facts, key_text: &str) -> serde_json::Value {
    let keys = facts.message_keys.as_deref();
    json!({
        "client_ip": facts.client_ip.map(|i| i.to_string()),
        "sender": facts.sender,
        "subject": facts.subject,
        "link_domains": keys.map(|k| k.link_domains.clone()).unwrap_or_default(),
        "message_key": key_text,
    })
}

impl RateSession {
    /// Notes this message in the ledger of every `restrict_senders` evaluation (stage
    /// message), and for each that is over restricts the ledger's senders. Answers the
    /// restriction of this session's sender, with the index of its evaluation.
    pub(super) async fn campaigns(
        &self,
        evals: &[Eval<'_>],
        stage: Stage,
        facts: &Facts,
        model: &PolicyModel,
    ) -> Option<(usize, Restriction)> {
        if stage != Stage::Message {
            return None;
        }
        let me = evidence_key(facts);
        if me.is_empty() {
            return None;
        }
        let mut mine = None;
        for (i, e) in evals.iter().enumerate() {
            if !e.def.restrict.as_ref().is_some_and(|r| r.senders) {
                continue;
            }
            let note = CampaignNote {
                key: e.key.clone(),
                sender: me.clone(),
                recipients: facts.recipients_count as u64,
                info: copy_info(facts, &e.key_text).to_string(),
                period_us: period_us(e.def),
            };
            let senders = match self.inner.store.campaign_note(&note).await {
                Ok(s) => s,
                Err(err) => {
                    NOT_NOTED.warn(&format!("{err} (limit {}, key {})", e.def.name, e.key_text));
                    continue;
                }
            };
            if !e.outcome.over {
                continue;
            }
            if let Err(err) = self.inner.store.campaign_mark(&e.key, &e.def.name).await {
                NOT_NOTED.warn(&format!("{err} (limit {}, key {})", e.def.name, e.key_text));
            }
            if let Some(r) = self.restrict_senders(e, &senders, &me, facts, model).await {
                mine.get_or_insert((i, r));
            }
        }
        mine
    }

    /// Restricts every sender of `senders` for the over evaluation `e`; answers `me`'s
    /// restriction. One campaign alert tells of the senders this call restricted.
    async fn restrict_senders(
        &self,
        e: &Eval<'_>,
        senders: &[CampaignSender],
        me: &str,
        facts: &Facts,
        model: &PolicyModel,
    ) -> Option<Restriction> {
        let rdef = e.def.restrict.as_ref()?;
        let by = format!("limit {} on {}", e.def.name, model.hostname);
        let reason = format!(
            "sent the message {} of a campaign: {} senders within {}, over the limit {}",
            e.key_text,
            senders.len(),
            e.outcome.period_text,
            e.outcome.limit_text
        );
        let mut mine = None;
        let mut newly = Vec::new();
        for s in senders {
            let r = Restriction {
                key: s.sender.clone(),
                limit: e.def.name.clone(),
                since_us: 0,
                until_us: None,
                rate: Some(e.outcome.value),
                limit_text: format!("{} / {}", e.outcome.limit_text, e.outcome.period_text),
                by: by.clone(),
                reason: reason.clone(),
                evidence: self.inner.evidence.of(&[s.sender.as_str()]),
            };
            match self
                .inner
                .store
                .restrict_once(r, rdef.duration.micros())
                .await
            {
                Ok((r, made)) => {
                    if made {
                        self.inner.metrics.restriction("restricted");
                        info!(
                            key = %r.key,
                            limit = %r.limit,
                            campaign = %e.key_text,
                            by = %by,
                            "key restricted (campaign)"
                        );
                        if s.sender == me {
                            self.notify_user(e.def, &r, facts, &model.hostname);
                        }
                        newly.push((s, r.clone()));
                    }
                    if s.sender == me {
                        mine = Some(r);
                    }
                }
                Err(err) => {
                    super::repeated::NOT_RESTRICTED.warn(&format!(
                        "{err} (key {}, limit {}, campaign {})",
                        s.sender, e.def.name, e.key_text
                    ));
                }
            }
        }
        if !newly.is_empty() {
            if let Some(o) = self.inner.observer.as_ref() {
                o.restriction(&campaign_notice(
                    e,
                    senders,
                    &newly,
                    facts,
                    &by,
                    &model.hostname,
                ));
            }
        }
        mine
    }
}

/// The alert of a campaign: `{"event": "floodgate.campaign", "limit", "key", "message_key",
/// "rate", "limit_value", "subject", "link_domains", "copies", "recipients", "accounts":
/// [{"key", "copies", "recipients", "client_ip", "restricted" (by this alert), "evidence"}],
/// "by", "host"}`.
fn campaign_notice(
    e: &Eval<'_>,
    senders: &[CampaignSender],
    newly: &[(&CampaignSender, Restriction)],
    facts: &Facts,
    by: &str,
    host: &str,
) -> serde_json::Value {
    let accounts: Vec<serde_json::Value> = senders
        .iter()
        .map(|s| {
            let info: serde_json::Value = serde_json::from_str(&s.info).unwrap_or_default();
            let made = newly.iter().find(|(n, _)| n.sender == s.sender);
            json!({
                "key": s.sender,
                "copies": s.copies,
                "recipients": s.recipients,
                "client_ip": info["client_ip"],
                "restricted": made.is_some(),
                "evidence": made.map(|(_, r)| r.evidence.clone()),
            })
        })
        .collect();
    let keys = facts.message_keys.as_deref();
    json!({
        "event": "floodgate.campaign",
        "limit": e.def.name,
        "key": e.key,
        "message_key": e.key_text,
        "rate": e.outcome.value,
        "limit_value": format!("{} / {}", e.outcome.limit_text, e.outcome.period_text),
        "subject": facts.subject,
        "link_domains": keys.map(|k| k.link_domains.clone()).unwrap_or_default(),
        "copies": senders.iter().map(|s| s.copies).sum::<u64>(),
        "recipients": senders.iter().map(|s| s.recipients).sum::<u64>(),
        "accounts": accounts,
        "by": by,
        "host": host,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::model;
    use super::*;

    #[test]
    fn periods_come_from_the_limit() {
        let m = model(
            r#"
[[limit]]
name = "campaign"
key = "${fingerprint}"
ratelimit = "3 / 1h / per_mail / unique=${authenticated_id}"
action = "hold"
restrict_senders = true
[[limit]]
name = "shape"
key = "${subject_shape}"
count = "messages"
rate = "10 / 1d"
burst = "10"
"#,
        );
        assert_eq!(period_us(&m.limits[0]), 3_600_000_000);
        assert_eq!(period_us(&m.limits[1]), 86_400_000_000);
        assert!(m.limits[0].restrict.as_ref().unwrap().senders);
    }
}
