//! Campaigns in a check (stage `message`).
//!
//! # One campaign, one count
//!
//! Before the plan, the message is noted in its campaign ([`crate::store::campaign`]): its
//! `${fingerprint}` bands, linked by occurring in one message, resolve to one campaign id
//! (merging campaigns the message links), and every limit keyed on `${fingerprint}`
//! counts the message once, under that id, instead of once per band: a `3 / 1h /
//! per_mail / unique=${authenticated_id}` limit sees the campaign's fourth account even
//! when its copies pairwise share different bands. When a message merges two campaigns,
//! the limit's counter under the absorbed id stays behind; a limit counting distinct
//! accounts (`unique=${authenticated_id}`) therefore also sees the accounts of the
//! campaign's ledger (see [`Joined::settle`]). The id is what the event log, the
//! alerts, `floodgate campaigns` and `floodgate inspect` show; `floodgate fingerprint`
//! still prints the bands. A `restrict_senders` limit on another message key notes each
//! value as its own campaign. A message of a restricted account (held at MAIL) is noted
//! too, so a campaign's totals count every copy.
//!
//! # Restricted on evidence
//!
//! When such a limit is over, the campaign is found: the limit's action takes the message
//! (e.g. `hold`), and every later copy while copies keep coming within the period (a copy
//! of the first accounts too, which their limit alone would let through as accounts
//! already counted); and `restrict_senders` restricts only the accounts whose own part
//! is evidence: within the limit's period, and after the account's last release by an
//! admin, [`OWN_COPIES`] copies or more, or one copy to [`OWN_RECIPIENTS`] recipients or
//! more. Colleagues who each sent one copy of a shared text to a few recipients have
//! their copies held while the limit is over but are not restricted. Each account is
//! restricted by a campaign once (until released); the store records it, so the next
//! copies cost no store call for it.
//!
//! # One alert
//!
//! The campaign's alert (`floodgate.campaign`) goes out when it is found, then at most
//! once per limit period while it stays over (an update: `"update": true`), whichever node
//! sees it (the store answers whether it is due). The limit's own `floodgate.alert` is not
//! sent for a campaign: its alert tells it.

use serde_json::json;
use tracing::info;

use super::super::action::message_key_values;
use super::super::alert::Contained;
use super::super::model::{LimitDef, PolicyModel, RateDef};
use super::super::template::Var;
use super::super::{Facts, Stage};
use super::plan::{applies, key_texts, Eval};
use super::rate_session::RateSession;
use super::restrict::evidence_key;
use crate::lograte::RepeatedWarning;
use crate::store::campaign::{capped, MAX_INFO_DOMAINS, RECENT_COPIES, SUBJECT_CHARS};
use crate::store::{CampaignJoin, CampaignLedger, CampaignSender, MarkAnswer, Restriction};

/// An account's own copies of a campaign, within the period and since its release, that
/// restrict it.
pub const OWN_COPIES: usize = RECENT_COPIES;
/// An account's recipients of one copy of a campaign that restrict it.
pub const OWN_RECIPIENTS: u64 = 10;
/// Most accounts an alert names (the most recent first; the totals count them all).
pub const ALERT_ACCOUNTS: usize = 50;

/// Ledger writes that failed (logged at most every 10 s).
static NOT_NOTED: RepeatedWarning =
    RepeatedWarning::new("campaign ledger: a message was not noted");

/// The period of a rate limit in µs (the time a sender stays in its ledger).
pub(super) fn period_us(def: &LimitDef) -> i64 {
    def.period_us()
}

/// The message key of `def`'s key template, if any.
fn message_key(def: &LimitDef) -> Option<Var> {
    def.key.as_ref().and_then(|t| t.message_keys().next())
}

/// Whether `def` is an Exim limit counting distinct accounts: its `unique=` reads only
/// `${authenticated_id}`.
fn counts_accounts(def: &LimitDef) -> bool {
    match &def.rate {
        RateDef::Exim {
            unique: Some(t), ..
        } => t.vars().eq([Var::User]),
        _ => false,
    }
}

/// Whether `s`'s own part in a campaign restricts it at `now_us` (see the module doc):
/// not restricted by the campaign since its last release, and its copies after that
/// release and within `period_us` number [`OWN_COPIES`], or one had [`OWN_RECIPIENTS`].
pub fn own_part_restricts(s: &CampaignSender, now_us: i64, period_us: i64) -> bool {
    if s.restricted_us > s.released_us {
        return false;
    }
    let after = s.released_us.max(now_us.saturating_sub(period_us));
    let mine: Vec<u64> = s
        .recent
        .iter()
        .filter(|(t, _)| *t > after)
        .map(|(_, r)| *r)
        .collect();
    mine.len() >= OWN_COPIES || mine.iter().any(|&r| r >= OWN_RECIPIENTS)
}

/// What a copy looked like, for its ledger and alert: each free-text field capped.
fn copy_info(facts: &Facts) -> serde_json::Value {
    let keys = facts.message_keys.as_deref();
    let links: Vec<String> = keys
        .map(|k| {
            k.link_domains
                .iter()
                .take(MAX_INFO_DOMAINS)
                .map(|d| capped(d, 100))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "client_ip": facts.client_ip.map(|i| i.to_string()),
        "sender": facts.sender.as_deref().map(|s| capped(s, SUBJECT_CHARS)),
        "subject": facts.subject.as_deref().map(|s| capped(s, SUBJECT_CHARS)),
        "link_domains": links,
    })
}

/// The campaigns a message was noted in, before its check.
#[derive(Default)]
pub(super) struct Joined {
    /// The campaign of its `${fingerprint}` bands.
    pub(super) fingerprint: Option<CampaignLedger>,
    /// The campaigns of the values of other message keys (`restrict_senders` limits), by
    /// key text.
    pub(super) values: Vec<CampaignLedger>,
}

impl Joined {
    /// The campaign evaluation `e` counts.
    pub(super) fn ledger_of(&self, e: &Eval<'_>) -> Option<&CampaignLedger> {
        match message_key(e.def)? {
            Var::Fingerprint => self.fingerprint.as_ref(),
            _ => self.values.iter().find(|l| l.id == e.key_text),
        }
    }

    /// Settles the evaluations of campaigns with what their ledgers know:
    ///
    /// * a limit counting distinct accounts (`unique=${authenticated_id}`) sees the
    ///   campaign's accounts within the period (its ledger's senders that are accounts, not
    ///   client addresses) when they are more than its own count: a merge of two campaigns
    ///   carries their accounts, not their counters;
    /// * a campaign found within its limit's period makes every evaluation over: once
    ///   found, every later copy (the first accounts' too) is taken by the limit's action,
    ///   as long as copies keep coming within the period of each other.
    pub(super) fn settle(&self, evals: &mut [Eval<'_>]) {
        for e in evals.iter_mut() {
            let Some(l) = self.ledger_of(e) else {
                continue;
            };
            if counts_accounts(e.def) {
                let accounts = l
                    .senders
                    .iter()
                    .filter(|s| s.sender.parse::<std::net::IpAddr>().is_err())
                    .count() as f64;
                // More accounts than the limit allows (an EWMA of m events in quick
                // succession stays just under m: the (m+1)th is the one over).
                if accounts > e.outcome.value && accounts > e.outcome.limit {
                    e.outcome.value = accounts;
                    e.outcome.over = true;
                }
            }
            let now = l.senders.first().map_or(0, |s| s.last_us);
            if l.found_us > 0 && now.saturating_sub(l.found_us) <= period_us(e.def) {
                e.outcome.over = true;
            }
        }
    }

    /// `facts` with the campaign id as the message's one `${fingerprint}` value; `None`
    /// when the message has no fingerprint campaign.
    pub(super) fn facts(&self, facts: &Facts) -> Option<Facts> {
        let id = &self.fingerprint.as_ref()?.id;
        let keys = facts.message_keys.as_deref()?;
        let mut f = facts.clone();
        f.message_keys = Some(std::sync::Arc::new(crate::message_keys::MessageKeys {
            fingerprint: vec![id.clone()],
            ..keys.clone()
        }));
        Some(f)
    }
}

impl RateSession {
    /// Notes the message in its campaigns (stage message): one store call for its
    /// fingerprint bands when a limit applying to it is keyed on `${fingerprint}`, one per
    /// value of another message key of a `restrict_senders` limit.
    pub(super) async fn join_campaigns(
        &self,
        stage: Stage,
        facts: &Facts,
        model: &PolicyModel,
    ) -> Joined {
        let mut joined = Joined::default();
        if stage != Stage::Message || facts.message_keys.is_none() {
            return joined;
        }
        let me = evidence_key(facts);
        if me.is_empty() {
            return joined;
        }
        let info = copy_info(facts).to_string();
        let join = |values: Vec<String>, link: bool, period_us: i64| CampaignJoin {
            values,
            link,
            sender: me.clone(),
            recipients: facts.recipients_count as u64,
            info: info.clone(),
            period_us,
        };
        let mut fingerprint_period = None::<i64>;
        let mut joins = Vec::new();
        for def in &model.limits {
            if !applies(def, stage, facts, model) {
                continue;
            }
            match message_key(def) {
                Some(Var::Fingerprint) => {
                    let p = period_us(def);
                    fingerprint_period = Some(fingerprint_period.map_or(p, |q| q.max(p)));
                }
                Some(_) if def.restrict.as_ref().is_some_and(|r| r.senders) => {
                    for v in key_texts(def, facts, model) {
                        joins.push(join(vec![v], false, period_us(def)));
                    }
                }
                _ => {}
            }
        }
        if let Some(p) = fingerprint_period {
            let bands = message_key_values(Var::Fingerprint, facts);
            if !bands.is_empty() {
                joined.fingerprint = self.join_one(&join(bands, true, p)).await;
            }
        }
        for j in &joins {
            if let Some(l) = self.join_one(j).await {
                joined.values.push(l);
            }
        }
        joined
    }

    async fn join_one(&self, j: &CampaignJoin) -> Option<CampaignLedger> {
        match self.inner.store.campaign_join(j).await {
            Ok(l) => Some(l),
            Err(err) => {
                NOT_NOTED.warn(&err.to_string());
                None
            }
        }
    }

    /// For each over evaluation of a campaign: restricts (with `restrict_senders`) the
    /// accounts whose own part is evidence, marks the campaign found and tells of it when
    /// its alert is due. Answers the restriction of this session's sender, with the index
    /// of its evaluation.
    pub(super) async fn campaigns(
        &self,
        evals: &[Eval<'_>],
        joined: &Joined,
        facts: &Facts,
        model: &PolicyModel,
    ) -> Option<(usize, Restriction)> {
        let me = evidence_key(facts);
        let mut mine = None;
        for (i, e) in evals.iter().enumerate() {
            if !e.outcome.over {
                continue;
            }
            let Some(l) = joined.ledger_of(e) else {
                continue;
            };
            let (restricted, names, r) = self.restrict_senders(e, l, &me, facts, model).await;
            if let Some(r) = r {
                mine.get_or_insert((i, r));
            }
            let answer = match self
                .inner
                .store
                .campaign_mark(&l.id, &e.def.name, &names, period_us(e.def))
                .await
            {
                Ok(a) => a,
                Err(err) => {
                    NOT_NOTED.warn(&format!("{err} (limit {}, campaign {})", e.def.name, l.id));
                    MarkAnswer::Quiet
                }
            };
            let Some(o) = self.inner.observer.as_ref() else {
                continue;
            };
            for r in &restricted {
                o.contained(&Contained {
                    what: "restricted".into(),
                    limit: r.limit.clone(),
                    key: r.key.clone(),
                    time_us: r.since_us,
                });
            }
            if answer != MarkAnswer::Quiet {
                let update = answer == MarkAnswer::Update;
                o.restriction(&campaign_notice(e, l, &restricted, update, &model.hostname));
            }
        }
        mine
    }

    /// Restricts the accounts of campaign `l` whose own part is evidence, for the over
    /// evaluation `e` (each once: one store call per account the rule selects). Answers
    /// the restrictions made now, the accounts restricted (now or before), and `me`'s
    /// restriction when it is selected.
    async fn restrict_senders(
        &self,
        e: &Eval<'_>,
        l: &CampaignLedger,
        me: &str,
        facts: &Facts,
        model: &PolicyModel,
    ) -> (Vec<Restriction>, Vec<String>, Option<Restriction>) {
        let Some(rdef) = e.def.restrict.as_ref().filter(|r| r.senders) else {
            return (Vec::new(), Vec::new(), None);
        };
        let now = l.senders.first().map_or(0, |s| s.last_us);
        let period = period_us(e.def);
        let by = format!("limit {} on {}", e.def.name, model.hostname);
        let (mut made, mut names, mut mine) = (Vec::new(), Vec::new(), None);
        for s in l
            .senders
            .iter()
            .filter(|s| own_part_restricts(s, now, period))
        {
            let r = Restriction {
                key: s.sender.clone(),
                limit: e.def.name.clone(),
                since_us: 0,
                until_us: None,
                rate: Some(e.outcome.value),
                limit_text: format!("{} / {}", e.outcome.limit_text, e.outcome.period_text),
                by: by.clone(),
                reason: format!(
                    "sent {} copies to {} recipients of campaign {} ({} copies from {} \
                     accounts within {}, over the limit {})",
                    s.copies,
                    s.recipients,
                    l.id,
                    l.copies,
                    l.senders.len(),
                    e.outcome.period_text,
                    e.outcome.limit_text
                ),
                evidence: self.inner.evidence.of(&[s.sender.as_str()]),
            };
            match self
                .inner
                .store
                .restrict_once(r, rdef.duration.micros())
                .await
            {
                Ok((r, new)) => {
                    if new {
                        self.inner.metrics.restriction("restricted");
                        info!(key = %r.key, limit = %r.limit, campaign = %l.id, by = %by,
                            "key restricted (campaign)");
                        if s.sender == me {
                            self.notify_user(e.def, &r, facts, &model.hostname);
                        }
                    }
                    if s.sender == me {
                        mine = Some(r.clone());
                    }
                    names.push(r.key.clone());
                    if new {
                        made.push(r);
                    }
                }
                Err(err) => {
                    super::repeated::NOT_RESTRICTED.warn(&format!(
                        "{err} (key {}, limit {}, campaign {})",
                        s.sender, e.def.name, l.id
                    ));
                }
            }
        }
        (made, names, mine)
    }
}

/// The alert of a campaign: `{"event": "floodgate.campaign", "update", "limit", "key",
/// "message_key" (the campaign id), "rate", "limit_value", "subject", "link_domains",
/// "copies", "recipients" (every copy so far), "account_count", "accounts": [{"key",
/// "copies", "recipients", "client_ip", "restricted" (by this alert), "evidence"}] (at most
/// [`ALERT_ACCOUNTS`], most recent first), "by", "host"}`.
fn campaign_notice(
    e: &Eval<'_>,
    l: &CampaignLedger,
    made: &[Restriction],
    update: bool,
    host: &str,
) -> serde_json::Value {
    let info = |s: &CampaignSender| -> serde_json::Value {
        serde_json::from_str(&s.info).unwrap_or_default()
    };
    let accounts: Vec<serde_json::Value> = l
        .senders
        .iter()
        .take(ALERT_ACCOUNTS)
        .map(|s| {
            let r = made.iter().find(|r| r.key == s.sender);
            json!({
                "key": s.sender,
                "copies": s.copies,
                "recipients": s.recipients,
                "client_ip": info(s)["client_ip"],
                "restricted": r.is_some(),
                "evidence": r.map(|r| r.evidence.clone()),
            })
        })
        .collect();
    let last = l.senders.first().map(info).unwrap_or_default();
    json!({
        "event": "floodgate.campaign",
        "update": update,
        "limit": e.def.name,
        "key": e.key,
        "message_key": l.id,
        "rate": e.outcome.value,
        "limit_value": format!("{} / {}", e.outcome.limit_text, e.outcome.period_text),
        "subject": last["subject"],
        "link_domains": last["link_domains"],
        "copies": l.copies,
        "recipients": l.recipients,
        "account_count": l.senders.len(),
        "accounts": accounts,
        "by": format!("limit {} on {host}", e.def.name),
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
        assert_eq!(message_key(&m.limits[0]), Some(Var::Fingerprint));
        assert_eq!(message_key(&m.limits[1]), Some(Var::SubjectShape));
        assert!(counts_accounts(&m.limits[0]));
        assert!(!counts_accounts(&m.limits[1]));
    }

    fn sender(recent: &[(i64, u64)], restricted_us: i64, released_us: i64) -> CampaignSender {
        CampaignSender {
            sender: "a".into(),
            copies: recent.len() as u64,
            recipients: recent.iter().map(|r| r.1).sum(),
            last_us: recent.last().map_or(0, |r| r.0),
            recent: recent.to_vec(),
            restricted_us,
            released_us,
            ..CampaignSender::default()
        }
    }

    #[test]
    fn own_part_is_copies_or_recipients_after_the_release_and_within_the_period() {
        const P: i64 = 3_600_000_000;
        let now = 10 * P;
        // One copy to a colleague: not evidence.
        assert!(!own_part_restricts(&sender(&[(now, 1)], 0, 0), now, P));
        assert!(!own_part_restricts(&sender(&[(now, 9)], 0, 0), now, P));
        // Two copies, or one to ten recipients: evidence.
        assert!(own_part_restricts(
            &sender(&[(now - 5, 1), (now, 1)], 0, 0),
            now,
            P
        ));
        assert!(own_part_restricts(&sender(&[(now, 10)], 0, 0), now, P));
        // Copies older than the period do not count.
        assert!(!own_part_restricts(
            &sender(&[(now - P - 1, 1), (now, 1)], 0, 0),
            now,
            P
        ));
        // Restricted by the campaign already: not again.
        assert!(!own_part_restricts(
            &sender(&[(now - 5, 1), (now, 1)], now - 1, 0),
            now,
            P
        ));
        // Released after it: copies before the release do not count, later ones do.
        let s = sender(&[(now - 9, 50), (now - 5, 1)], now - 8, now - 4);
        assert!(!own_part_restricts(&s, now, P));
        let s = sender(&[(now - 5, 1), (now - 1, 30)], now - 8, now - 4);
        assert!(own_part_restricts(&s, now, P));
    }
}
