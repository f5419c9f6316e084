//! Turning one limit and one event into a store request: the key, the count, the limit in
//! force (a per-key value from a list or from the key's baseline), and the outcome skeleton
//! for templates.

use super::action::{var_value, Reading};
use super::model::{Counted, LimitDef, PolicyModel, RateDef};
use super::template::Template;
use super::{Facts, Stage};
use crate::figures;
use crate::limit::bucket::{BucketOp, BucketSpec};
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::Rate;
use crate::limit::spec::{CountSource, Resolved, UpdateMode};
use crate::limit::unique::UniqueKind;
use crate::limit::LimitSpec;
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

/// One limit asked about one event: what its store request and outcome are built from.
struct Asked<'a> {
    def: &'a LimitDef,
    model: &'a PolicyModel,
    facts: &'a Facts,
    key_text: &'a str,
    /// What the event counts.
    count: f64,
    /// The key's own limit (from a list or the baseline) and its text, if it has one.
    own: Option<(f64, String)>,
}

/// Builds the store request and the outcome skeleton of one limit.
pub(super) fn request(
    def: &LimitDef,
    model: &PolicyModel,
    stage: Stage,
    facts: &Facts,
    key_text: &str,
) -> (LimitRequest, Reading) {
    let a = Asked {
        def,
        model,
        facts,
        key_text,
        count: count_of(def, stage, facts),
        own: limit_value(def, model, facts).or_else(|| baseline_value(def, model, key_text)),
    };
    match &def.rate {
        RateDef::Exim {
            spec,
            resolved,
            unique,
        } => exim_request(a, spec, resolved, unique.as_ref()),
        RateDef::Gcra(g) => gcra_request(a, *g),
        RateDef::Bucket(b) => bucket_request(a, *b),
        RateDef::Ratio(r) => (
            // Ratios are read from their window, not decided: the request only names it.
            store_request(
                &a,
                format!("ratio/{}/{}", def.name, key_text),
                Algorithm::Ewma {
                    limit: r.above,
                    period_secs: u32::try_from(r.period_secs).unwrap_or(u32::MAX),
                    mode: UpdateMode::Readonly,
                    unique_kind: UniqueKind::Bloom,
                },
                0.0,
                None,
            ),
            outcome(
                r.above,
                false,
                format!("{} {} / {}", r.above, r.num.as_str(), r.den.as_str()),
                figures::period_whole(r.period_secs as f64),
            ),
        ),
        RateDef::Concurrency(n) => (
            store_request(
                &a,
                format!("sessions/{}/{}", def.name, key_text),
                Algorithm::Ewma {
                    limit: *n as f64,
                    period_secs: 1,
                    mode: UpdateMode::Readonly,
                    unique_kind: UniqueKind::Bloom,
                },
                1.0,
                None,
            ),
            outcome(*n as f64, false, n.to_string(), "session".into()),
        ),
    }
}

/// The request of an Exim limit: Exim's database key and `unique=` value, the key's own
/// limit in place of `m` when it has one.
fn exim_request(
    mut a: Asked<'_>,
    spec: &LimitSpec,
    resolved: &Resolved,
    unique: Option<&Template>,
) -> (LimitRequest, Reading) {
    let own = a.own.take();
    let from_list = own.is_some();
    let (limit, limit_text) = own.unwrap_or((spec.limit(), spec.limit_text().to_string()));
    // The client address is formatted only for a database key that holds it.
    let ip = || a.facts.client_ip.map(|i| i.to_string()).unwrap_or_default();
    let key = if spec.key_text().is_some() {
        spec.database_key(a.key_text, &ip())
    } else if a.def.key.is_some() {
        spec.database_key(a.key_text, a.key_text)
    } else {
        spec.database_key("", &ip())
    };
    let unique = spec.unique().is_some().then(|| match unique {
        Some(t) => {
            t.expand(|v, out| var_value(v, a.facts, Some(a.def), None, &a.model.hostname, out))
        }
        // per_addr; outside RCPT Exim reads the same record with a dummy value.
        None if resolved.forced_readonly => String::new(),
        None => a.facts.recipient_normalized.clone().unwrap_or_default(),
    });
    let algorithm = Algorithm::Ewma {
        limit,
        period_secs: spec.period_secs(),
        mode: resolved.update,
        unique_kind: UniqueKind::Bloom,
    };
    (
        store_request(&a, key, algorithm, a.count, unique),
        outcome(limit, from_list, limit_text, spec.period_text().to_string()),
    )
}

/// The request of a GCRA limit; the key's own limit, when it has one, is its burst and its
/// amount per period.
fn gcra_request(mut a: Asked<'_>, mut g: GcraSpec) -> (LimitRequest, Reading) {
    let mut limit_text = figures::exact(g.burst);
    let mut from_list = false;
    if let Some((m, t)) = a.own.take() {
        if let Some(ng) = Rate::new(m, g.rate.period_secs()).and_then(|r| GcraSpec::new(m, r)) {
            g = ng;
            limit_text = t;
            from_list = true;
        }
    }
    let key = format!("gcra/{}/{}", a.def.name, a.key_text);
    (
        store_request(&a, key, Algorithm::Gcra(g), a.count, None),
        outcome(
            g.burst,
            from_list,
            limit_text,
            figures::period_whole(g.rate.period_secs()),
        ),
    )
}

/// The request of a bucket limit; the key's own limit, when it has one, is its burst and
/// its leak per period.
fn bucket_request(mut a: Asked<'_>, mut b: BucketSpec) -> (LimitRequest, Reading) {
    let mut limit_text = figures::exact(b.burst);
    let mut from_list = false;
    if let Some((m, t)) = a.own.take() {
        if let Some(r) = Rate::new(m, b.rate.period_secs()) {
            b.burst = m;
            b.rate = r;
            limit_text = t;
            from_list = true;
        }
    }
    let key = format!("bucket/{}/{}", a.def.name, a.key_text);
    let algorithm = Algorithm::Bucket {
        spec: b,
        op: BucketOp::Check,
    };
    (
        store_request(&a, key, algorithm, a.count, None),
        outcome(
            b.burst,
            from_list,
            limit_text,
            figures::period_whole(b.rate.period_secs()),
        ),
    )
}

/// The store request for `key`, blocking when the limit's action refuses.
fn store_request(
    a: &Asked<'_>,
    key: String,
    algorithm: Algorithm,
    count: f64,
    unique: Option<String>,
) -> LimitRequest {
    LimitRequest {
        key,
        algorithm,
        count,
        unique,
        blocking: a.def.action.blocks(),
    }
}

/// The outcome skeleton of a limit not yet answered: `limit` in force (`from_list`: the
/// key's own), its text and the period's.
fn outcome(limit: f64, from_list: bool, limit_text: String, period_text: String) -> Reading {
    Reading {
        value: 0.0,
        limit,
        from_list,
        limit_text,
        period_text,
        over: false,
        retry_after: None,
    }
}

pub(super) fn apply_result(o: &mut Reading, r: &LimitResult) {
    o.value = r.value;
    o.over = r.over;
    o.retry_after = r.retry_after;
}
