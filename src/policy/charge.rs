//! Charging what upstream answered: refused recipients and messages as they happen, the
//! counts of ratio limits at the end of each transaction, and the keys that bounces and
//! deferrals reported later are charged to.

use super::action::var_value;
use super::model::{Counted, LimitDef, PolicyModel, RateDef};
use super::request::request;
use super::{Facts, Stage};
use crate::limit::bucket::{BucketOp, MessageClass};
use crate::limit::spec::UpdateMode;
use crate::store::{Algorithm, LimitRequest, RatioCounts, RatioWindow};

/// What upstream answered in one transaction so far (only followed while a limit needs it).
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Recipients upstream accepted, as given.
    pub accepted: Vec<String>,
    /// Recipients upstream refused with a 5xx.
    pub refused: u64,
    /// What ratio windows get if the transaction ends without a message.
    pub if_abandoned: Vec<RatioCharge>,
}

impl Tally {
    /// Whether nothing was answered.
    pub fn is_empty(&self) -> bool {
        self.accepted.is_empty() && self.refused == 0 && self.if_abandoned.is_empty()
    }

    /// Recipients upstream answered.
    pub fn answered(&self) -> u64 {
        self.accepted.len() as u64 + self.refused
    }
}

/// How the transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Upstream answered the end of data with this class (2 or 5).
    Answered {
        /// Whether it refused (5xx).
        refused: bool,
        /// The message size.
        bytes: u64,
    },
    /// Abandoned (RSET, session ended, 4xx) before upstream answered a message.
    Abandoned,
}

/// A limit's key text for `facts`: its key template, else the client address.
pub fn key_text(def: &LimitDef, facts: &Facts, model: &PolicyModel) -> String {
    match &def.key {
        Some(t) => t.expand(|v, out| var_value(v, facts, Some(def), None, &model.hostname, out)),
        None => facts.client_ip.map(|i| i.to_string()).unwrap_or_default(),
    }
}

fn applies(def: &LimitDef, facts: &Facts, model: &PolicyModel) -> bool {
    def.when
        .as_ref()
        .is_none_or(|c| c.eval(facts, &model.lists))
}

/// Whether the transaction is left out of ratios that do not include automatic mail: a
/// null sender, or an `Auto-Submitted:` header other than `no`.
pub fn automatic(facts: &Facts) -> bool {
    facts.sender.as_deref() == Some("") || facts.auto_submitted
}

/// The store request that charges `n` events to `def` (a rate limit) under `key_text`:
/// stored whatever the limit's mode, never refusing anything.
pub fn charge_request(
    def: &LimitDef,
    model: &PolicyModel,
    facts: &Facts,
    key_text: &str,
    n: u64,
) -> LimitRequest {
    let (mut req, _) = request(def, model, def.stage, facts, key_text);
    req.count = n as f64;
    req.blocking = false;
    match &mut req.algorithm {
        Algorithm::Ewma { mode, .. } => *mode = UpdateMode::Strict,
        Algorithm::Bucket { op, .. } => *op = BucketOp::Commit(MessageClass::Other),
        _ => {}
    }
    req
}

/// The rate limits (not ratios) counting `counted` that apply to `facts`, with their keys.
pub fn rate_limits<'m>(
    model: &'m PolicyModel,
    facts: &Facts,
    counted: Counted,
) -> Vec<(&'m LimitDef, String)> {
    model
        .limits
        .iter()
        .filter(|d| {
            d.counted == counted
                && !matches!(d.rate, RateDef::Ratio(_) | RateDef::Concurrency(_))
                && applies(d, facts, model)
        })
        .map(|d| (d, key_text(d, facts, model)))
        .collect()
}

/// One addition to a ratio window.
#[derive(Clone, Debug, PartialEq)]
pub struct RatioCharge {
    /// The limit's name.
    pub limit: String,
    /// The window's key (`ratio/LIMIT/KEY`).
    pub key: String,
    /// The window.
    pub window: RatioWindow,
    /// What is added.
    pub add: RatioCounts,
}

/// The additions to ratio windows at the end of a transaction.
pub fn ratio_charges(
    model: &PolicyModel,
    facts: &Facts,
    tally: &Tally,
    end: End,
) -> Vec<RatioCharge> {
    let auto = automatic(facts);
    let mut out = Vec::new();
    for def in &model.limits {
        let RateDef::Ratio(r) = &def.rate else {
            continue;
        };
        if (auto && !r.include_automatic) || !applies(def, facts, model) {
            continue;
        }
        let add = r.amounts(|c| match (c, end) {
            (Counted::Recipients, _) => tally.answered(),
            (Counted::RefusedRecipients, _) => tally.refused,
            (Counted::Messages, End::Answered { .. }) => 1,
            (Counted::RefusedMessages, End::Answered { refused: true, .. }) => 1,
            (Counted::Bytes, End::Answered { bytes, .. }) => bytes,
            _ => 0,
        });
        if add.is_zero() {
            continue;
        }
        out.push(RatioCharge {
            limit: def.name.clone(),
            key: format!("ratio/{}/{}", def.name, key_text(def, facts, model)),
            window: r.window(),
            add,
        });
    }
    out
}

/// The limits a queued message's later bounces and deferrals are charged to, with their
/// key texts: rate limits counting them, and ratios using them that count this message.
pub fn queued_keys(model: &PolicyModel, facts: &Facts) -> Vec<(String, String)> {
    let auto = automatic(facts);
    model
        .limits
        .iter()
        .filter(|d| match &d.rate {
            RateDef::Ratio(r) => {
                (r.uses(Counted::BouncedRecipients) || r.uses(Counted::DeferredRecipients))
                    && (r.include_automatic || !auto)
            }
            RateDef::Concurrency(_) => false,
            _ => d.counted.after_queueing(),
        })
        .filter(|d| applies(d, facts, model))
        .map(|d| (d.name.clone(), key_text(d, facts, model)))
        .collect()
}

/// What one reported outcome charges for the limit called `limit` under `key_text`: a
/// rate-limit request, a ratio window addition, or nothing (the limit is gone or does not
/// count it).
pub enum OutcomeCharge {
    /// A rate limit's charge.
    Rate(LimitRequest),
    /// A ratio's numerator or denominator.
    Ratio(RatioCharge),
}

/// The charge of one `counted` event reported for a queued message.
pub fn outcome_charge(
    model: &PolicyModel,
    limit: &str,
    key_text: &str,
    counted: Counted,
) -> Option<OutcomeCharge> {
    let def = model.limits.iter().find(|d| d.name == limit)?;
    match &def.rate {
        RateDef::Ratio(r) => {
            let add = r.amounts(|c| u64::from(c == counted));
            (!add.is_zero()).then(|| {
                OutcomeCharge::Ratio(RatioCharge {
                    limit: def.name.clone(),
                    key: format!("ratio/{}/{}", def.name, key_text),
                    window: r.window(),
                    add,
                })
            })
        }
        RateDef::Concurrency(_) => None,
        _ if def.counted == counted => Some(OutcomeCharge::Rate(charge_request(
            def,
            model,
            &Facts::default(),
            key_text,
            1,
        ))),
        _ => None,
    }
}

/// Whether upstream's RCPT answer matters to `model` at all.
pub fn stage_followed(model: &PolicyModel, stage: Stage) -> bool {
    matches!(stage, Stage::Rcpt | Stage::Message) && model.follows_outcomes()
}
