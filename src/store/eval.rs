//! Evaluating one limit request against the current record, without
//! touching the store: the result plus the write to perform.

use super::{Algorithm, LimitRequest, LimitResult, UniqueRecord};
use crate::limit::bucket::{BucketOp, BucketSpec, BucketState};
use crate::limit::ewma::{self, EwmaParams, EwmaState};
use crate::limit::gcra::GcraSpec;
use crate::limit::spec::UpdateMode;
use crate::limit::unique::{set_expired, UniqueKind, UniqueSet};
use std::time::Duration;

/// What to write back for one request.
#[derive(Debug)]
pub(crate) enum Write<'a> {
    /// Nothing.
    Nothing,
    /// Store EWMA state.
    Ewma(EwmaState),
    /// Store EWMA state with a unique set: optionally replace the set first,
    /// then optionally insert a value.
    Unique {
        state: EwmaState,
        new_set: Option<(i64, UniqueSet)>,
        insert: Option<&'a str>,
    },
    /// Store a GCRA TAT.
    Gcra(i64),
    /// Store bucket state.
    Bucket(BucketState),
}

fn secs(d: f64) -> Option<Duration> {
    (d.is_finite() && d >= 0.0).then(|| Duration::from_secs_f64(d.min(1e12)))
}

/// Whether a leaky-type write goes ahead: not over and not suppressed by a refusal.
fn leaky_stores(over: bool, suppress: bool) -> bool {
    !over && !suppress
}

/// EWMA without a unique set.
pub(crate) fn ewma<'a>(
    prev: Option<&EwmaState>,
    req: &'a LimitRequest,
    params: &EwmaParams,
    now_us: i64,
    suppress: bool,
) -> (LimitResult, Write<'a>) {
    let out = ewma::evaluate(prev, now_us, req.count, params);
    let store = match params.mode {
        UpdateMode::Leaky => leaky_stores(out.over, suppress),
        _ => out.store,
    };
    let retry = retry(prev, &out.next, store, now_us, req.count, params, out.over);
    let result = LimitResult {
        value: out.rate,
        over: out.over,
        stored: store,
        seen: None,
        retry_after: retry,
    };
    (
        result,
        if store {
            Write::Ewma(out.next)
        } else {
            Write::Nothing
        },
    )
}

/// Retry-after for an EWMA limit from the rate that remains stored at `now`.
fn retry(
    prev: Option<&EwmaState>,
    next: &EwmaState,
    stored: bool,
    now_us: i64,
    count: f64,
    params: &EwmaParams,
    over: bool,
) -> Option<Duration> {
    if !over {
        return Some(Duration::ZERO);
    }
    let base = if stored {
        next.rate
    } else {
        prev.map_or(0.0, |p| ewma::decayed_rate(p, now_us, params.period_secs))
    };
    let count = if params.mode == UpdateMode::Readonly {
        0.0
    } else {
        count
    };
    ewma::retry_after_secs(base, count, params.limit, params.period_secs).and_then(secs)
}

/// The count the next attempt of an EWMA request adds: 0 for readonly or for a unique
/// value already in the set, else the request's count.
pub(crate) fn next_count(req: &LimitRequest, seen: Option<bool>) -> f64 {
    match req.algorithm {
        Algorithm::Ewma {
            mode: UpdateMode::Readonly,
            ..
        } => 0.0,
        _ if seen == Some(true) => 0.0,
        _ => req.count,
    }
}

/// The answer to an invalid [`Algorithm::Same`] (its `of` is not an earlier EWMA request):
/// not over, nothing stored.
pub(crate) fn invalid_same() -> LimitResult {
    LimitResult {
        value: 0.0,
        over: false,
        stored: false,
        seen: None,
        retry_after: Some(Duration::ZERO),
    }
}

/// Retry-after of an over [`Algorithm::Same`] of limit `limit` answered from the EWMA
/// request `of` (whose result said `of_seen`): `base` is the rate that stays stored on
/// `of`'s key. The same arithmetic as an over EWMA limit of `of` with m = `limit`.
pub(crate) fn same_retry(
    base: f64,
    of: &LimitRequest,
    of_seen: Option<bool>,
    limit: f64,
) -> Option<Duration> {
    let Algorithm::Ewma { period_secs, .. } = of.algorithm else {
        return None;
    };
    ewma::retry_after_secs(base, next_count(of, of_seen), limit, period_secs).and_then(secs)
}

/// [`Algorithm::Same`]: Exim's cached answer (§4 step 1) from the result `of_res` of the
/// EWMA request `of`, with this request's own `limit`. `kept` is the state stored on `of`'s
/// key now (after `of` was applied): when `of` did not store, the retry time counts from
/// its decayed rate.
pub(crate) fn same(
    of: &LimitRequest,
    of_res: &LimitResult,
    kept: Option<&EwmaState>,
    limit: f64,
    now_us: i64,
) -> LimitResult {
    let Algorithm::Ewma { period_secs, .. } = of.algorithm else {
        return invalid_same();
    };
    let value = of_res.value;
    let over = ewma::is_over(value, limit);
    let retry_after = if over {
        let base = if of_res.stored {
            value
        } else {
            kept.map_or(0.0, |p| ewma::decayed_rate(p, now_us, period_secs))
        };
        same_retry(base, of, of_res.seen, limit)
    } else {
        Some(Duration::ZERO)
    };
    LimitResult {
        value,
        over,
        stored: false,
        seen: None,
        retry_after,
    }
}

/// EWMA with a unique set (Exim §4 step 3 and §6).
pub(crate) fn unique<'a>(
    prev: Option<&UniqueRecord>,
    req: &'a LimitRequest,
    value: &'a str,
    params: &EwmaParams,
    kind: UniqueKind,
    now_us: i64,
    suppress: bool,
) -> (LimitResult, Write<'a>) {
    let now_s = now_us.div_euclid(1_000_000);
    let keep_set = prev.filter(|r| !set_expired(r.created_s, now_s, params.period_secs));
    let readonly = params.mode == UpdateMode::Readonly;
    // A missing or expired set is replaced by an empty one sized from the current m.
    let new_set = match keep_set {
        Some(_) => None,
        None => Some((now_s, UniqueSet::new(kind, params.limit))),
    };
    let seen = if readonly {
        None
    } else {
        Some(match (&keep_set, &new_set) {
            (Some(r), _) => r.set.contains(value),
            (None, Some((_, s))) => s.contains(value),
            (None, None) => false,
        })
    };
    let count = if seen == Some(true) { 0.0 } else { req.count };
    let state = prev.map(|r| &r.state);
    let out = ewma::evaluate(state, now_us, count, params);
    let store = match params.mode {
        UpdateMode::Leaky => leaky_stores(out.over, suppress),
        _ => out.store,
    };
    let result = LimitResult {
        value: out.rate,
        over: out.over,
        stored: store,
        seen,
        retry_after: retry(state, &out.next, store, now_us, count, params, out.over),
    };
    let write = if store {
        Write::Unique {
            state: out.next,
            new_set,
            insert: (!readonly).then_some(value),
        }
    } else {
        Write::Nothing
    };
    (result, write)
}

/// GCRA token bucket.
pub(crate) fn gcra<'a>(
    prev: Option<i64>,
    req: &LimitRequest,
    spec: &GcraSpec,
    now_us: i64,
    suppress: bool,
) -> (LimitResult, Write<'a>) {
    let now_ns = now_us.saturating_mul(1000);
    let out = spec.evaluate(prev, now_ns, req.count);
    let store = leaky_stores(out.over, suppress);
    let result = LimitResult {
        value: out.level,
        over: out.over,
        stored: store,
        seen: None,
        retry_after: out
            .retry_after_ns
            .map(|ns| Duration::from_nanos(u64::try_from(ns).unwrap_or(0))),
    };
    (
        result,
        if store {
            Write::Gcra(out.next_tat_ns)
        } else {
            Write::Nothing
        },
    )
}

/// Rspamd-style bucket.
pub(crate) fn bucket<'a>(
    prev: Option<&BucketState>,
    req: &LimitRequest,
    spec: &BucketSpec,
    op: BucketOp,
    now_us: i64,
    suppress: bool,
) -> (LimitResult, Write<'a>) {
    let now_ms = now_us as f64 / 1000.0;
    let out = spec.apply(prev, now_ms, req.count, op);
    // A check always keeps the leak (Rspamd writes it before comparing, and
    // the later commit/cancel does not leak again); it keeps the reservation
    // only when it admits the event and the decision is not refused. Commit
    // and cancel always apply.
    let write = match op {
        BucketOp::Check if suppress && !out.over => prev.map(|_| {
            let mut st = out.next;
            st.pending = (st.pending - req.count.max(1.0)).max(0.0);
            st
        }),
        _ => Some(out.next),
    };
    let store = write.is_some();
    let result = LimitResult {
        value: out.level,
        over: out.over,
        stored: store,
        seen: None,
        retry_after: out.retry_after_ms.and_then(|ms| secs(ms / 1000.0)),
    };
    (result, write.map_or(Write::Nothing, Write::Bucket))
}
