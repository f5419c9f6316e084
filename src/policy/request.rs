//! Turning one limit and one event into a store request: the key, the count, the limit in
//! force (a per-key value from a list or from the key's baseline), and the outcome skeleton
//! for templates.

use super::action::{var_value, Outcome};
use super::model::{Counted, LimitDef, PolicyModel, RateDef};
use super::{Facts, Stage};
use crate::figures;
use crate::limit::bucket::BucketOp;
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::Rate;
use crate::limit::spec::{CountSource, UpdateMode};
use crate::limit::unique::UniqueKind;
use crate::store::{Algorithm, LimitRequest, LimitResult};

pub(super) fn count_of(def: &LimitDef, stage: Stage, facts: &Facts) -> f64 {
    match &def.rate {
        RateDef::Exim { resolved, .. } => match resolved.count {
            CountSource::Fixed(v) => v,
            CountSource::MessageSize => facts.message_size as f64,
            CountSource::RecipientsCount => facts.recipients_count as f64,
        },
        _ => match def.counted {
            Counted::Recipients if stage != Stage::Rcpt => facts.recipients_count as f64,
            Counted::Bytes => facts.message_size as f64,
            _ => 1.0,
        },
    }
}

fn limit_value(def: &LimitDef, model: &PolicyModel, facts: &Facts) -> Option<(f64, String)> {
    let (list, by) = def.limit_list.as_ref()?;
    let list = model.lists.get(list)?;
    let found = match by {
        super::condition::Subject::ClientIp => list.lookup_ip(facts.client_ip?),
        s => {
            let v = s.value(facts)?;
            if v.contains('@') {
                list.lookup_address(&v)
            } else {
                list.lookup_text(&v)
            }
        }
    }??;
    let m: f64 = found.parse().ok()?;
    Some((m, found.to_string()))
}

/// The key's own limit from the limit's baseline (the floor without history).
fn baseline_value(def: &LimitDef, model: &PolicyModel, key_text: &str) -> Option<(f64, String)> {
    let b = def.baseline.as_ref()?;
    let m = model.baselines.limit(&def.name, b, key_text);
    Some((m, figures::exact(m)))
}

/// Builds the store request and the outcome skeleton of one limit.
pub(super) fn request(
    def: &LimitDef,
    model: &PolicyModel,
    stage: Stage,
    facts: &Facts,
    key_text: &str,
) -> (LimitRequest, Outcome) {
    let count = count_of(def, stage, facts);
    let over_value =
        limit_value(def, model, facts).or_else(|| baseline_value(def, model, key_text));
    let blocking = def.action.blocks();
    match &def.rate {
        RateDef::Exim {
            spec,
            resolved,
            unique,
        } => {
            let from_list = over_value.is_some();
            let (limit, limit_text) =
                over_value.unwrap_or((spec.limit(), spec.limit_text().to_string()));
            let ip = facts.client_ip.map(|i| i.to_string()).unwrap_or_default();
            let key = if spec.key_text().is_some() {
                spec.database_key(key_text, &ip)
            } else if def.key.is_some() {
                spec.database_key(key_text, key_text)
            } else {
                spec.database_key("", &ip)
            };
            let unique = if spec.unique().is_some() {
                Some(match unique {
                    Some(t) => t.expand(|v, out| {
                        var_value(v, facts, Some(def), None, &model.hostname, out)
                    }),
                    // per_addr; outside RCPT Exim reads the same record with a dummy value.
                    None if resolved.forced_readonly => String::new(),
                    None => facts.recipient_normalized.clone().unwrap_or_default(),
                })
            } else {
                None
            };
            (
                LimitRequest {
                    key,
                    algorithm: Algorithm::Ewma {
                        limit,
                        period_secs: spec.period_secs(),
                        mode: resolved.update,
                        unique_kind: UniqueKind::Bloom,
                    },
                    count,
                    unique,
                    blocking,
                },
                Outcome {
                    value: 0.0,
                    limit,
                    from_list,
                    limit_text,
                    period_text: spec.period_text().to_string(),
                    over: false,
                    retry_after: None,
                },
            )
        }
        RateDef::Gcra(g) => {
            let mut g = *g;
            let mut limit_text = figures::exact(g.burst);
            let mut from_list = false;
            if let Some((m, t)) = over_value {
                if let Some(ng) =
                    Rate::new(m, g.rate.period_secs()).and_then(|r| GcraSpec::new(m, r))
                {
                    g = ng;
                    limit_text = t;
                    from_list = true;
                }
            }
            (
                LimitRequest {
                    key: format!("gcra/{}/{}", def.name, key_text),
                    algorithm: Algorithm::Gcra(g),
                    count,
                    unique: None,
                    blocking,
                },
                Outcome {
                    value: 0.0,
                    limit: g.burst,
                    from_list,
                    limit_text,
                    period_text: figures::period_whole(g.rate.period_secs()),
                    over: false,
                    retry_after: None,
                },
            )
        }
        RateDef::Bucket(b) => {
            let mut b = *b;
            let mut limit_text = figures::exact(b.burst);
            let mut from_list = false;
            if let Some((m, t)) = over_value {
                if let Some(r) = Rate::new(m, b.rate.period_secs()) {
                    b.burst = m;
                    b.rate = r;
                    limit_text = t;
                    from_list = true;
                }
            }
            (
                LimitRequest {
                    key: format!("bucket/{}/{}", def.name, key_text),
                    algorithm: Algorithm::Bucket {
                        spec: b,
                        op: BucketOp::Check,
                    },
                    count,
                    unique: None,
                    blocking,
                },
                Outcome {
                    value: 0.0,
                    limit: b.burst,
                    from_list,
                    limit_text,
                    period_text: figures::period_whole(b.rate.period_secs()),
                    over: false,
                    retry_after: None,
                },
            )
        }
        RateDef::Ratio(r) => (
            // Ratios are read from their window, not decided: the request only names it.
            LimitRequest {
                key: format!("ratio/{}/{}", def.name, key_text),
                algorithm: Algorithm::Ewma {
                    limit: r.above,
                    period_secs: u32::try_from(r.period_secs).unwrap_or(u32::MAX),
                    mode: UpdateMode::Readonly,
                    unique_kind: UniqueKind::Bloom,
                },
                count: 0.0,
                unique: None,
                blocking,
            },
            Outcome {
                value: 0.0,
                limit: r.above,
                from_list: false,
                limit_text: format!("{} {} / {}", r.above, r.num.as_str(), r.den.as_str()),
                period_text: figures::period_whole(r.period_secs as f64),
                over: false,
                retry_after: None,
            },
        ),
        RateDef::Concurrency(n) => (
            LimitRequest {
                key: format!("sessions/{}/{}", def.name, key_text),
                algorithm: Algorithm::Ewma {
                    limit: *n as f64,
                    period_secs: 1,
                    mode: UpdateMode::Readonly,
                    unique_kind: UniqueKind::Bloom,
                },
                count: 1.0,
                unique: None,
                blocking,
            },
            Outcome {
                value: 0.0,
                limit: *n as f64,
                from_list: false,
                limit_text: n.to_string(),
                period_text: "session".into(),
                over: false,
                retry_after: None,
            },
        ),
    }
}

pub(super) fn apply_result(o: &mut Outcome, r: &LimitResult) {
    o.value = r.value;
    o.over = r.over;
    o.retry_after = r.retry_after;
}
