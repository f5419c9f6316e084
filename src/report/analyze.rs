//! `floodgate report`: replays the event log per limit and key through the algorithms of
//! `floodgate simulate` and summarises each limit's per-key peaks.
//!
//! # What is measured
//!
//! Demand: every logged event is charged, whatever the limit's mode or action (the log
//! holds what was offered, see [`super::events`]).
//!
//! * Exim limits: the EWMA rate after each event, replayed exactly as `floodgate simulate`
//!   does with the limit's string made strict (unique sets included); a key's peak is the
//!   highest rate it reached, in events per the limit's period.
//! * GCRA and bucket limits: the level a bucket with the limit's drain rate and no
//!   capacity would reach (GCRA: the theoretical arrival time with an unlimited burst;
//!   bucket: check then commit, without dynamic multipliers); a key's peak is its highest
//!   level, in events, to compare with `burst`.
//!
//! # The suggested limit
//!
//! Per limit, over the keys' peaks:
//!
//! 1. *outliers* are the keys whose peak exceeds 10 × the median peak (none when the median
//!    is 0);
//! 2. the *ordinary maximum* is the highest peak among the other keys;
//! 3. the suggestion is 2 × the ordinary maximum (headroom), rounded up to the next 1-2-5
//!    step (…, 10, 20, 50, 100, …); it is never below 1.
//!
//! Every ordinary key is thus under the suggestion (strictly, so even Exim's `rate ≥ m`
//! leaves it alone); the report lists the keys it would have limited (all outliers).
//!
//! # Contained keys
//!
//! The event log also records each restriction and each message taken to hold
//! (`{"event":"contained","what":"restricted"|"held",…}`, see [`super::events`]). A key
//! restricted or held in the period is *contained*: it is flagged wherever it is listed,
//! and is never an ordinary key. The suggestion never lets one through that this limit
//! contained, or that went over its configured value: when 2 × the ordinary maximum would
//! be at or above the lowest such key's peak, the suggestion is the highest 1-2-5 step that
//! key's peak is over (at least 1), and the report says which key set it.
//!
//! # Keys with their own limit
//!
//! A limit with a `limit_list` gives some keys a limit of their own; the event log says so on
//! each of their events (`own_limit`). Such a key (as of its last event) is left out of the
//! percentiles, the outliers and the suggestion, which are about the limit everyone else
//! gets: a bulk sender allowed 5000 an hour would otherwise pass for an outlier, or lift the
//! suggestion for all. It is reported beside them, its peak against its own limit. A GCRA or
//! bucket key with its own limit is replayed with the drain rate that limit gives it (its
//! value per the limit's period, as floodgate applies it).
//!
//! Memory: one record and one peak per (limit, key); the log is read line by line.

pub use crate::figures::percentile;
use std::collections::HashMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::eventlog::{is_other_event, Containment, Evaluation};
use crate::limit::bucket::{BucketOp, BucketSpec, MessageClass};
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::Rate;
use crate::limit::spec::UpdateMode;
use crate::limit::unique::UniqueKind;
use crate::policy::model::{LimitDef, PolicyModel, RateDef};
use crate::store::{Algorithm, Decision, LimitRequest, MemoryConfig, MemoryStore};

/// Outliers: peaks above this many times the median.
pub const OUTLIER_FACTOR: f64 = 10.0;
/// Headroom over the highest ordinary peak.
pub const HEADROOM: f64 = 2.0;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An event line is not valid.
    #[error("{path}:{line}: {detail}")]
    Input {
        /// The event log.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
    /// `--limit` names no limit of the config.
    #[error("no limit called {0:?} in the config (limits: {1})")]
    NoSuchLimit(String, String),
    /// `--since` is not before `--until`.
    #[error("--since must be before --until")]
    EmptyRange,
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The event log.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// What to report on.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Only events at or after this time (µs).
    pub since_us: Option<i64>,
    /// Only events before this time (µs).
    pub until_us: Option<i64>,
    /// Only this limit.
    pub limit: Option<String>,
    /// Keys listed per limit.
    pub top: usize,
}

/// One key and its peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyPeak {
    /// The key text.
    pub key: String,
    /// Its peak rate or level.
    pub peak: f64,
    /// Its events.
    pub events: u64,
    /// `restricted` or `held` when the key was contained in the period (see the module
    /// documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contained: Option<String>,
}

/// A key with a limit of its own (from the limit's `limit_list`) and its peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OwnLimitPeak {
    /// The key text.
    pub key: String,
    /// Its peak rate or level.
    pub peak: f64,
    /// Its events.
    pub events: u64,
    /// Its own limit (at its last event).
    pub own_limit: f64,
    /// The peak was over its own limit.
    pub over: bool,
}

/// The report of one limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitReport {
    /// The limit's name.
    pub name: String,
    /// `exim`, `gcra` or `bucket`.
    pub algorithm: String,
    /// What a peak is measured in (`messages per 1h`, `recipients in the bucket`).
    pub unit: String,
    /// The limit as configured (m, or burst).
    pub configured: f64,
    /// The period as text (Exim's p; a bucket's rate period).
    pub period: String,
    /// The countermeasure configured.
    pub action: String,
    /// Events replayed.
    pub events: u64,
    /// Distinct keys, those with their own limit included.
    pub keys: usize,
    /// Median of the peaks of the keys without their own limit (nearest rank); so are
    /// the other percentiles, the maximum, the top, the outliers and the suggestion.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Highest peak.
    pub max: f64,
    /// The keys with the highest peaks, highest first.
    pub top: Vec<KeyPeak>,
    /// Peaks above this are outliers (`OUTLIER_FACTOR` × p50); absent when p50 is 0.
    pub outlier_threshold: Option<f64>,
    /// Highest peak among ordinary keys.
    pub ordinary_max: f64,
    /// The suggested limit (see the module documentation).
    pub suggested: f64,
    /// Keys the suggestion would have limited, highest first.
    pub would_limit: Vec<KeyPeak>,
    /// Keys without their own limit whose peak was over the limit as configured.
    pub over_configured: usize,
    /// Keys with a limit of their own from `limit_list`.
    pub own_limit_keys: usize,
    /// Of those, the ones whose peak was over their own limit.
    pub over_own_limit: usize,
    /// Keys with their own limit, the nearest to it (peak / own limit) first.
    pub own_limit_top: Vec<OwnLimitPeak>,
    /// The keys of this limit restricted or held in the period, highest peak first.
    #[serde(default)]
    pub contained: Vec<KeyPeak>,
    /// The contained key whose peak held the suggestion down, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped_by: Option<String>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The event log read.
    pub source: String,
    /// `--since` (µs), if given.
    pub since_us: Option<i64>,
    /// `--until` (µs), if given.
    pub until_us: Option<i64>,
    /// First event replayed (µs).
    pub first_us: Option<i64>,
    /// Last event replayed (µs).
    pub last_us: Option<i64>,
    /// Event lines read.
    pub lines: u64,
    /// Events replayed.
    pub events: u64,
    /// Events outside `--since`/`--until`.
    pub outside: u64,
    /// Events of limits that are not in the config (or not reported on).
    pub unknown_limit: u64,
    /// Per limit, in config order (limits without events included).
    pub limits: Vec<LimitReport>,
    /// The per-key limits of the limits with a `baseline`, as of the end of the period
    /// (filled by [`super::baseline::summarise`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baselines: Vec<super::baseline::BaselineReport>,
}

/// The keys contained in the period: key → how (`restricted` over `held`) and the limits
/// that contained it.
#[derive(Default)]
struct Contained {
    keys: HashMap<String, (&'static str, Vec<String>)>,
}

impl Contained {
    /// Notes one `contained` line; other kinds (`defer`) are not containment.
    fn note(&mut self, line: Containment) {
        let how = match line.what.as_str() {
            "restricted" => "restricted",
            "held" => "held",
            _ => return,
        };
        let e = self
            .keys
            .entry(line.key)
            .or_insert_with(|| (how, Vec::new()));
        if how == "restricted" {
            e.0 = how;
        }
        if !e.1.contains(&line.limit) && e.1.len() < 16 {
            e.1.push(line.limit);
        }
    }

    fn how(&self, key: &str) -> Option<&'static str> {
        self.keys.get(key).map(|(h, _)| *h)
    }

    fn by(&self, key: &str, limit: &str) -> bool {
        self.keys
            .get(key)
            .is_some_and(|(_, l)| l.iter().any(|x| x == limit))
    }
}

/// The highest 1-2-5 step that `peak` is over (at least 1).
fn step_under(algorithm: &str, peak: f64) -> f64 {
    let mut best = 1.0;
    let mut v: f64 = 1.0;
    while v.is_finite() && v < peak * 10.0 {
        for m in [1.0, 2.0, 5.0] {
            let step = v * m;
            if is_over(algorithm, peak, step) {
                best = step;
            }
        }
        v *= 10.0;
    }
    best
}

/// One key's peak, events and own limit (as of its last event).
struct KeyTally {
    peak: f64,
    events: u64,
    own_limit: Option<f64>,
}

/// Per-key accounting of one limit.
#[derive(Default)]
struct Tally {
    keys: HashMap<String, KeyTally>,
    events: u64,
}

/// How one limit is replayed.
enum Replay {
    Ewma {
        limit: f64,
        period_secs: u32,
        default_count: f64,
        unique: Option<String>,
        spec: Box<crate::limit::LimitSpec>,
    },
    Gcra(GcraSpec),
    Bucket(BucketSpec),
}

fn replay_of(def: &LimitDef) -> Option<Replay> {
    match &def.rate {
        RateDef::Exim { spec, resolved, .. } => {
            if resolved.update == UpdateMode::Readonly {
                return None;
            }
            Some(Replay::Ewma {
                limit: spec.limit(),
                period_secs: spec.period_secs(),
                default_count: spec.count().unwrap_or(1.0),
                unique: spec.unique().map(str::to_string),
                spec: Box::new(spec.clone()),
            })
        }
        RateDef::Gcra(g) => GcraSpec::new(f64::MAX, g.rate).map(Replay::Gcra),
        RateDef::Bucket(b) => Some(Replay::Bucket(BucketSpec {
            burst: f64::MAX,
            rate: b.rate,
            dynamic: None,
        })),
        // Ratios and concurrency are not rates to replay.
        RateDef::Concurrency(_) | RateDef::Ratio(_) => None,
    }
}

/// The smallest 1-2-5 step (1, 2, 5, 10, 20, …) at or above `x`; 1 for `x <= 1` (and NaN).
pub fn step_125(x: f64) -> f64 {
    if x.is_nan() || x <= 1.0 {
        return 1.0;
    }
    if x.is_infinite() {
        return x;
    }
    let mut decade = 10f64.powi(x.log10().floor() as i32);
    // Guard the float log: start a decade below and walk up.
    decade /= 10.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let v = m * decade;
            if v >= x {
                return v;
            }
        }
        decade *= 10.0;
    }
}

/// Whether a peak is over a limit value: Exim's `rate >= m`, a bucket's `level > burst`.
fn is_over(algorithm: &str, peak: f64, limit: f64) -> bool {
    if algorithm == "exim" {
        crate::limit::ewma::is_over(peak, limit)
    } else {
        peak > limit
    }
}

fn summarise(def: &LimitDef, tally: Tally, top: usize, contained: &Contained) -> LimitReport {
    let (algorithm, configured, period_secs) = match &def.rate {
        RateDef::Exim { spec, .. } => ("exim", spec.limit(), f64::from(spec.period_secs())),
        RateDef::Gcra(g) => ("gcra", g.burst, g.rate.period_secs()),
        RateDef::Bucket(b) => ("bucket", b.burst, b.rate.period_secs()),
        RateDef::Concurrency(n) => ("concurrency", *n as f64, 0.0),
        RateDef::Ratio(r) => ("ratio", r.above, r.period_secs as f64),
    };
    let period = crate::figures::period_text(period_secs);
    let what = def.counted.as_str().replace('_', " ");
    let unit = if algorithm == "exim" {
        format!("{what} per {period}")
    } else {
        format!("{what} in the bucket")
    };
    let all_keys = tally.keys.len();
    let mut own: Vec<OwnLimitPeak> = Vec::new();
    let mut keys: Vec<KeyPeak> = Vec::new();
    for (key, k) in tally.keys {
        match k.own_limit {
            Some(own_limit) => own.push(OwnLimitPeak {
                over: is_over(algorithm, k.peak, own_limit),
                key,
                peak: k.peak,
                events: k.events,
                own_limit,
            }),
            None => keys.push(KeyPeak {
                contained: contained.how(&key).map(str::to_string),
                key,
                peak: k.peak,
                events: k.events,
            }),
        }
    }
    // Nearest to their own limit first; ties by key.
    own.sort_by(|a, b| {
        (b.peak / b.own_limit)
            .total_cmp(&(a.peak / a.own_limit))
            .then_with(|| a.key.cmp(&b.key))
    });
    // Highest first; ties by key for a stable order.
    keys.sort_by(|a, b| b.peak.total_cmp(&a.peak).then_with(|| a.key.cmp(&b.key)));
    let mut asc: Vec<f64> = keys.iter().map(|k| k.peak).collect();
    asc.reverse();
    let p50 = percentile(&asc, 0.5);
    let threshold = (p50 > 0.0).then_some(p50 * OUTLIER_FACTOR);
    let ordinary_max = keys
        .iter()
        .filter(|k| k.contained.is_none())
        .map(|k| k.peak)
        .filter(|&p| threshold.is_none_or(|t| p <= t))
        .fold(0.0, f64::max);
    // step_125(x) >= x > ordinary_max for any positive peak, and 1 > 0: no ordinary key is
    // over the suggestion, even with Exim's `rate >= m`.
    let mut suggested = step_125(ordinary_max * HEADROOM).max(1.0);
    // ...unless that would let through a key this limit contained or that went over it.
    let lowest = keys
        .iter()
        .filter(|k| k.contained.is_some())
        .filter(|k| contained.by(&k.key, &def.name) || is_over(algorithm, k.peak, configured))
        .min_by(|a, b| a.peak.total_cmp(&b.peak).then_with(|| a.key.cmp(&b.key)));
    let mut capped_by = None;
    if let Some(k) = lowest.filter(|k| !is_over(algorithm, k.peak, suggested)) {
        suggested = step_under(algorithm, k.peak);
        capped_by = Some(k.key.clone());
    }
    let contained_keys: Vec<KeyPeak> = keys
        .iter()
        .filter(|k| k.contained.is_some())
        .cloned()
        .collect();
    let would_limit = keys
        .iter()
        .filter(|k| is_over(algorithm, k.peak, suggested))
        .cloned()
        .collect();
    let over_configured = keys
        .iter()
        .filter(|k| is_over(algorithm, k.peak, configured))
        .count();
    LimitReport {
        name: def.name.clone(),
        algorithm: algorithm.into(),
        unit,
        configured,
        period,
        action: def.action.as_str().into(),
        events: tally.events,
        keys: all_keys,
        p50,
        p90: percentile(&asc, 0.9),
        p99: percentile(&asc, 0.99),
        max: asc.last().copied().unwrap_or(0.0),
        top: keys.iter().take(top).cloned().collect(),
        outlier_threshold: threshold,
        ordinary_max,
        suggested,
        would_limit,
        over_configured,
        own_limit_keys: own.len(),
        over_own_limit: own.iter().filter(|k| k.over).count(),
        own_limit_top: own.into_iter().take(top).collect(),
        contained: contained_keys,
        capped_by,
    }
}

/// One replayed event, as [`analyze_traced`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct Traced<'a> {
    /// The limit's index in [`Report::limits`].
    pub limit: usize,
    /// The key.
    pub key: &'a str,
    /// The event's time (µs).
    pub time_us: i64,
    /// The key's rate or level after the event (what its peak is the highest of).
    pub value: f64,
    /// The key's own limit on this event, if it has one.
    pub own_limit: Option<f64>,
}

/// Reads the event log `input` (named `source` in errors) and reports on the limits of
/// `model`.
pub fn analyze(
    model: &PolicyModel,
    source: &str,
    input: impl BufRead,
    opts: &Options,
) -> Result<Report, ReportError> {
    analyze_traced(model, source, input, opts, &mut |_| {})
}

/// [`analyze`], showing `trace` every replayed event with the key's value after it (the
/// charts of the HTML report are drawn from these).
pub fn analyze_traced(
    model: &PolicyModel,
    source: &str,
    input: impl BufRead,
    opts: &Options,
    trace: &mut dyn FnMut(&Traced<'_>),
) -> Result<Report, ReportError> {
    if let (Some(s), Some(u)) = (opts.since_us, opts.until_us) {
        if s >= u {
            return Err(ReportError::EmptyRange);
        }
    }
    let chosen = chosen_limits(model, opts)?;
    let index: HashMap<&str, usize> = chosen
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), i))
        .collect();
    let replays: Vec<Replay> = chosen.iter().filter_map(|d| replay_of(d)).collect();
    let mut tallies: Vec<Tally> = chosen.iter().map(|_| Tally::default()).collect();
    let store = MemoryStore::new(MemoryConfig {
        shards: 1,
        ..MemoryConfig::default()
    });
    let mut report = Report::empty(source, opts);
    let mut line = String::new();
    let mut input = input;
    let mut line_no = 0usize;
    let mut decision = Decision::default();
    let mut contained = Contained::default();
    loop {
        line.clear();
        let n = input.read_line(&mut line).map_err(|e| ReportError::Io {
            path: source.to_string(),
            source: e,
        })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = line.trim();
        // Contained keys are noted; queued messages and their outcomes are not
        // evaluations.
        if text.starts_with("{\"event\":\"contained\"") {
            note_contained(text, opts, &mut contained);
            continue;
        }
        if text.is_empty() || is_other_event(text) {
            continue;
        }
        report.lines += 1;
        let bad = |detail: String| ReportError::Input {
            path: source.to_string(),
            line: line_no,
            detail,
        };
        let mut ev = Evaluation::parse(text).map_err(|e| bad(e.to_string()))?;
        let now_us = ev.time_us;
        if opts.since_us.is_some_and(|s| now_us < s) || opts.until_us.is_some_and(|u| now_us >= u) {
            report.outside += 1;
            continue;
        }
        let Some(limit) = ev.limit.as_deref() else {
            return Err(bad("missing field `limit`".into()));
        };
        let Some(&i) = index.get(limit) else {
            report.unknown_limit += 1;
            continue;
        };
        let key_text = ev.key.take().unwrap_or_default();
        let asked = Asked {
            replay: &replays[i],
            ev: &ev,
            key_text: &key_text,
            prefix: format!("{i}/"),
            now_us,
        };
        asked.decision(&mut decision, &store, &bad)?;
        let result = store.decide_at(now_us, &decision);
        let value = result.limits.first().map_or(0.0, |r| r.value);
        trace(&Traced {
            limit: i,
            key: &key_text,
            time_us: now_us,
            value,
            own_limit: ev.own_limit,
        });
        tallies[i].add(key_text, value, ev.own_limit);
        report.events += 1;
        report.first_us = Some(report.first_us.map_or(now_us, |f| f.min(now_us)));
        report.last_us = Some(report.last_us.map_or(now_us, |l| l.max(now_us)));
    }
    report.limits = chosen
        .iter()
        .zip(tallies)
        .map(|(d, t)| summarise(d, t, opts.top, &contained))
        .collect();
    Ok(report)
}

impl Report {
    /// The report on `source` before any line is read.
    fn empty(source: &str, opts: &Options) -> Self {
        Report {
            source: source.to_string(),
            since_us: opts.since_us,
            until_us: opts.until_us,
            first_us: None,
            last_us: None,
            lines: 0,
            events: 0,
            outside: 0,
            unknown_limit: 0,
            limits: Vec::new(),
            baselines: Vec::new(),
        }
    }
}

/// The limits to report on: every replayable one, or the one `opts` names (an error when
/// no replayable limit has that name).
fn chosen_limits<'m>(
    model: &'m PolicyModel,
    opts: &Options,
) -> Result<Vec<&'m LimitDef>, ReportError> {
    let chosen: Vec<&LimitDef> = model
        .limits
        .iter()
        .filter(|d| replay_of(d).is_some())
        .filter(|d| opts.limit.as_ref().is_none_or(|n| *n == d.name))
        .collect();
    if let Some(n) = &opts.limit {
        if chosen.is_empty() {
            let names: Vec<&str> = model.limits.iter().map(|d| d.name.as_str()).collect();
            return Err(ReportError::NoSuchLimit(n.clone(), names.join(", ")));
        }
    }
    Ok(chosen)
}

/// Notes a `contained` line in `contained` when it is inside the range of `opts`.
fn note_contained(text: &str, opts: &Options, contained: &mut Contained) {
    if let Some(c) = Containment::parse(text) {
        let at = c.time_us;
        if opts.since_us.is_none_or(|s| at >= s) && opts.until_us.is_none_or(|u| at < u) {
            contained.note(c);
        }
    }
}

/// One event of a limit, to be asked of the replay's store.
struct Asked<'e> {
    /// The limit's replay.
    replay: &'e Replay,
    /// The event.
    ev: &'e Evaluation,
    /// Its key.
    key_text: &'e str,
    /// The limit's prefix of database keys (its index), so limits never share a key.
    prefix: String,
    /// The event's time (µs).
    now_us: i64,
}

impl Asked<'_> {
    /// Fills `decision` with the event's one request (a bucket's check is asked of `store`
    /// first, as the proxy does, so that its commit follows it).
    fn decision(
        self,
        decision: &mut Decision,
        store: &MemoryStore,
        bad: &dyn Fn(String) -> ReportError,
    ) -> Result<(), ReportError> {
        let Asked {
            replay,
            ev,
            key_text,
            prefix,
            now_us,
        } = self;
        decision.limits.clear();
        let first_req = |key: String, algorithm: Algorithm, count: f64, unique| LimitRequest {
            key,
            algorithm,
            count,
            unique,
            blocking: true,
        };
        match replay {
            Replay::Ewma {
                limit,
                period_secs,
                default_count,
                unique,
                spec,
            } => {
                if ev.unique.is_some() && unique.is_none() {
                    return Err(bad(format!(
                        "\"unique\" given but limit {} has no unique= or per_addr",
                        ev.limit.as_deref().unwrap_or_default()
                    )));
                }
                let u = unique
                    .as_ref()
                    .map(|u| ev.unique.clone().unwrap_or_else(|| u.clone()));
                decision.limits.push(first_req(
                    prefix + &spec.database_key(key_text, key_text),
                    Algorithm::Ewma {
                        limit: *limit,
                        period_secs: *period_secs,
                        mode: UpdateMode::Strict,
                        unique_kind: UniqueKind::Bloom,
                    },
                    ev.count.unwrap_or(*default_count),
                    u,
                ));
            }
            Replay::Gcra(g) => {
                if ev.unique.is_some() {
                    return Err(bad("\"unique\" applies to Exim limits only".into()));
                }
                // A key's own limit m is also its drain rate: m per the limit's period.
                let g = ev
                    .own_limit
                    .and_then(|m| Rate::new(m, g.rate.period_secs()))
                    .and_then(|r| GcraSpec::new(f64::MAX, r))
                    .unwrap_or(*g);
                decision.limits.push(first_req(
                    prefix + key_text,
                    Algorithm::Gcra(g),
                    ev.count.unwrap_or(1.0),
                    None,
                ));
            }
            Replay::Bucket(b) => {
                if ev.unique.is_some() {
                    return Err(bad("\"unique\" applies to Exim limits only".into()));
                }
                let count = ev.count.unwrap_or(1.0);
                let mut spec = *b;
                if let Some(r) = ev
                    .own_limit
                    .and_then(|m| Rate::new(m, b.rate.period_secs()))
                {
                    spec.rate = r;
                }
                for op in [BucketOp::Check, BucketOp::Commit(MessageClass::Other)] {
                    decision.limits.clear();
                    decision.limits.push(first_req(
                        prefix.clone() + key_text,
                        Algorithm::Bucket { spec, op },
                        count,
                        None,
                    ));
                    if op == BucketOp::Check {
                        store.decide_at(now_us, decision);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Tally {
    /// Counts one event of `key` with the key's `value` after it and its own limit.
    fn add(&mut self, key: String, value: f64, own_limit: Option<f64>) {
        self.events += 1;
        let k = self.keys.entry(key).or_insert(KeyTally {
            peak: f64::NEG_INFINITY,
            events: 0,
            own_limit: None,
        });
        k.peak = k.peak.max(value);
        k.events += 1;
        k.own_limit = own_limit;
    }
}

#[cfg(test)]
mod tests;
