//! What a key means for every configured limit: its database key, its current value read
//! without changing anything, how far it is from its limit and when it will be under again.
//! Pure functions over the policy model and stored records; the API does the I/O.

use serde::Serialize;

use crate::limit::bucket::BucketOp;
use crate::limit::ewma::decayed_rate;
use crate::policy::model::{LimitDef, PolicyModel, RateDef};
use crate::store::{Record, RecordKind};

/// One limit's view of one key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reading {
    /// The limit's name.
    pub limit: String,
    /// `ewma`, `gcra`, `bucket`, `sessions` or `ratio`.
    pub algorithm: &'static str,
    /// The database key KEY maps to under this limit (`None`: not kept in the store).
    pub key: Option<String>,
    /// A record exists for the key.
    pub stored: bool,
    /// EWMA: the rate decayed to now (Exim's readonly view); GCRA and buckets: the level;
    /// ratios: numerator / denominator over the window (0 when the denominator is 0).
    pub value: f64,
    /// The limit (EWMA: m; GCRA: burst; bucket: capacity).
    pub limit_value: f64,
    /// The period of the limit, as written or normalised (`1h`, `1d`, …).
    pub period: String,
    /// Over now (EWMA: rate ≥ m; GCRA and buckets: one more event would be refused).
    pub over: bool,
    /// Seconds until under again (0 when under; `None` when no wait is enough).
    pub until_under_secs: Option<f64>,
    /// The key's own limit from the limit's `baseline`, and how it was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineReading>,
}

/// How a key's limit follows from its own history (`baseline`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineReading {
    /// The baseline as configured (`p95 / 14d`).
    pub baseline: String,
    /// The key's percentile daily peak (`None`: no history).
    pub peak: Option<f64>,
    /// The factor applied to it.
    pub factor: f64,
    /// The lowest limit.
    pub floor: f64,
    /// When the baselines were computed (RFC 3339; `None`: not yet).
    pub computed: Option<String>,
}

impl Reading {
    /// `value / limit_value` (how close to its limit; 1 and more is over for EWMA).
    pub fn ratio(&self) -> f64 {
        if self.limit_value > 0.0 {
            self.value / self.limit_value
        } else {
            f64::INFINITY
        }
    }
}

/// The database key that `key` maps to under `def`: `key` is used as the key text, and as
/// the client IP for limits keyed by IP. `None` for concurrency limits (not stored).
pub fn database_key(def: &LimitDef, key: &str) -> Option<String> {
    match &def.rate {
        RateDef::Exim { spec, .. } => Some(spec.database_key(key, key)),
        RateDef::Gcra(_) => Some(format!("gcra/{}/{key}", def.name)),
        RateDef::Bucket(_) => Some(format!("bucket/{}/{key}", def.name)),
        RateDef::Concurrency(_) => None,
        RateDef::Ratio(_) => Some(format!("ratio/{}/{key}", def.name)),
    }
}

/// The prefix every database key of `def` starts with, and the record kind it uses.
fn key_prefix(def: &LimitDef) -> Option<(String, RecordKind)> {
    match &def.rate {
        RateDef::Exim { spec, .. } => Some((
            spec.database_key("", ""),
            if spec.unique().is_some() {
                RecordKind::Unique
            } else {
                RecordKind::Ewma
            },
        )),
        RateDef::Gcra(_) => Some((format!("gcra/{}/", def.name), RecordKind::Gcra)),
        RateDef::Bucket(_) => Some((format!("bucket/{}/", def.name), RecordKind::Bucket)),
        // Ratio windows are not records of the rate tables.
        RateDef::Concurrency(_) | RateDef::Ratio(_) => None,
    }
}

/// The limits a stored record belongs to (Exim limits with the same period and per_*
/// option share their records, as in Exim).
pub fn owners<'m>(model: &'m PolicyModel, key: &str, kind: RecordKind) -> Vec<&'m LimitDef> {
    model
        .limits
        .iter()
        .filter(|d| {
            key_prefix(d)
                .is_some_and(|(p, k)| k == kind && key.len() > p.len() && key.starts_with(&p))
        })
        .collect()
}

fn algorithm_of(def: &LimitDef) -> &'static str {
    match def.rate {
        RateDef::Exim { .. } => "ewma",
        RateDef::Gcra(_) => "gcra",
        RateDef::Bucket(_) => "bucket",
        RateDef::Concurrency(_) => "sessions",
        RateDef::Ratio(_) => "ratio",
    }
}

fn period_of(def: &LimitDef) -> String {
    let secs = match &def.rate {
        RateDef::Exim { spec, .. } => return spec.period_text().to_string(),
        RateDef::Gcra(g) => g.rate.period_secs(),
        RateDef::Bucket(b) => b.rate.period_secs(),
        RateDef::Concurrency(_) => return "session".into(),
        RateDef::Ratio(r) => r.period_secs as f64,
    };
    crate::figures::period_precise(secs)
}

/// Reads `def`'s record among `records` (all records of `db_key`) at `now_us`.
pub fn reading(def: &LimitDef, db_key: Option<&str>, records: &[Record], now_us: i64) -> Reading {
    let mut r = Reading {
        limit: def.name.clone(),
        algorithm: algorithm_of(def),
        key: db_key.map(str::to_string),
        stored: false,
        value: 0.0,
        limit_value: 0.0,
        period: period_of(def),
        over: false,
        until_under_secs: Some(0.0),
        baseline: None,
    };
    match &def.rate {
        RateDef::Exim { spec, .. } => {
            let m = spec.limit();
            r.limit_value = m;
            let p = spec.period_secs();
            let state = records.iter().find_map(|rec| match rec {
                Record::Ewma(s) if spec.unique().is_none() => Some(*s),
                Record::Unique(u) if spec.unique().is_some() => Some(u.state),
                _ => None,
            });
            if let Some(s) = state {
                r.stored = true;
                // Exim's readonly view: count 0, no floor.
                r.value = decayed_rate(&s, now_us, p);
            }
            // Exim's truth value is rate >= m; the decay takes p·ln(rate/m) to get under.
            r.over = crate::limit::ewma::is_over(r.value, m);
            if r.over {
                r.until_under_secs = Some(f64::from(p) * (r.value / m).ln());
            }
        }
        RateDef::Gcra(g) => {
            r.limit_value = g.burst;
            if let Some(tat) = records.iter().find_map(|rec| match rec {
                Record::Gcra { tat_ns } => Some(*tat_ns),
                _ => None,
            }) {
                r.stored = true;
                let now_ns = now_us.saturating_mul(1000);
                r.value = g.level_at(tat, now_ns);
                let o = g.evaluate(Some(tat), now_ns, 1.0);
                r.over = o.over;
                r.until_under_secs = o.retry_after_ns.map(|ns| ns as f64 / 1e9);
            }
        }
        RateDef::Bucket(b) => {
            r.limit_value = b.burst;
            if let Some(st) = records.iter().find_map(|rec| match rec {
                Record::Bucket(s) => Some(*s),
                _ => None,
            }) {
                r.stored = true;
                r.limit_value = b.capacity(&st);
                let o = b.apply(Some(&st), now_us as f64 / 1000.0, 1.0, BucketOp::Check);
                r.value = o.level;
                r.over = o.over;
                r.until_under_secs = o.retry_after_ms.map(|ms| ms / 1000.0);
            }
        }
        RateDef::Concurrency(n) => {
            r.limit_value = *n as f64;
        }
        RateDef::Ratio(q) => {
            r.limit_value = q.above;
        }
    }
    r
}

/// Like [`reading`], for the key text `key`: a limit with a `baseline` is read against the
/// key's own limit, and says how it was found.
pub fn reading_of_key(
    def: &LimitDef,
    model: &PolicyModel,
    key: &str,
    db_key: Option<&str>,
    records: &[Record],
    now_us: i64,
) -> Reading {
    let Some(b) = &def.baseline else {
        return reading(def, db_key, records, now_us);
    };
    let peak = model.baselines.peak(&def.name, b, key);
    let m = b.limit_of(peak);
    let mut own = def.clone();
    match &mut own.rate {
        RateDef::Gcra(g) => {
            if let Some(ng) = crate::limit::rate::Rate::new(m, g.rate.period_secs())
                .and_then(|r| crate::limit::gcra::GcraSpec::new(m, r))
            {
                *g = ng;
            }
        }
        RateDef::Bucket(bk) => {
            if let Some(r) = crate::limit::rate::Rate::new(m, bk.rate.period_secs()) {
                bk.burst = m;
                bk.rate = r;
            }
        }
        RateDef::Exim { .. } | RateDef::Concurrency(_) | RateDef::Ratio(_) => {}
    }
    let mut r = reading(&own, db_key, records, now_us);
    if let RateDef::Exim { spec, .. } = &def.rate {
        r.limit_value = m;
        r.over = crate::limit::ewma::is_over(r.value, m);
        r.until_under_secs = Some(if r.over && m > 0.0 {
            f64::from(spec.period_secs()) * (r.value / m).ln()
        } else {
            0.0
        });
        if r.over && m <= 0.0 {
            r.until_under_secs = None;
        }
    }
    r.baseline = Some(BaselineReading {
        baseline: b.spec.text(),
        peak,
        factor: b.factor,
        floor: b.floor,
        computed: model
            .baselines
            .get(&def.name)
            .filter(|s| s.signature == b.signature())
            .map(|s| crate::time::rfc3339(s.computed_us)),
    });
    r
}

/// One line of `top`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopEntry {
    /// The database key.
    pub key: String,
    /// The limit's reading of it.
    #[serde(flatten)]
    pub reading: Reading,
    /// `value / limit`.
    pub ratio: f64,
}

/// Collects the highest `top` entries from records offered one at a time, keeping at
/// most about `2n` in memory whatever the number of records.
pub struct TopBuilder<'m> {
    model: &'m PolicyModel,
    now_us: i64,
    only: Option<&'m str>,
    n: usize,
    buf: Vec<TopEntry>,
    offered: usize,
}

fn order(a: &TopEntry, b: &TopEntry) -> std::cmp::Ordering {
    b.ratio
        .total_cmp(&a.ratio)
        .then_with(|| a.key.cmp(&b.key))
        .then_with(|| a.reading.limit.cmp(&b.reading.limit))
}

impl<'m> TopBuilder<'m> {
    /// Entries of `only` (every limit when `None`) read at `now_us`; at most `n`.
    pub fn new(model: &'m PolicyModel, now_us: i64, only: Option<&'m str>, n: usize) -> Self {
        TopBuilder {
            model,
            now_us,
            only,
            n,
            buf: Vec::new(),
            offered: 0,
        }
    }

    /// Offers one stored record.
    pub fn add(&mut self, key: &str, rec: Record) {
        for def in owners(self.model, key, rec.kind()) {
            if self.only.is_some_and(|o| o != def.name) {
                continue;
            }
            let r = reading(def, Some(key), std::slice::from_ref(&rec), self.now_us);
            self.offered += 1;
            self.buf.push(TopEntry {
                key: key.to_string(),
                ratio: r.ratio(),
                reading: r,
            });
        }
        if self.buf.len() >= 2 * self.n.max(1) + 16 {
            self.buf.sort_by(order);
            self.buf.truncate(self.n);
        }
    }

    /// How many entries (key and limit) were offered so far, kept or not.
    pub fn offered(&self) -> usize {
        self.offered
    }

    /// The entries, highest first (ties by key, then limit name).
    pub fn finish(mut self) -> Vec<TopEntry> {
        self.buf.sort_by(order);
        self.buf.truncate(self.n);
        self.buf
    }
}

/// Keys by value relative to their limit, highest first (ties by key, then limit name).
/// `records` are stored (database key, record) pairs; `only` keeps one limit; at most `n`.
pub fn top(
    model: &PolicyModel,
    records: impl IntoIterator<Item = (String, Record)>,
    now_us: i64,
    only: Option<&str>,
    n: usize,
) -> Vec<TopEntry> {
    let mut b = TopBuilder::new(model, now_us, only, n);
    for (k, r) in records {
        b.add(&k, r);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generation::Generation;
    use crate::limit::ewma::EwmaState;

    fn model(limits: &str) -> std::sync::Arc<PolicyModel> {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n{limits}"
        );
        Generation::parse(std::path::Path::new("t.toml"), &text)
            .unwrap()
            .policy
    }

    const LIMITS: &str = r#"
[[limit]]
name = "per-user"
stage = "rcpt"
ratelimit = "10 / 1h / per_rcpt / ${authenticated_id}"
action = "defer"
[[limit]]
name = "per-ip"
stage = "mail"
ratelimit = "5 / 1h"
action = "defer"
[[limit]]
name = "tb"
stage = "mail"
rate = "2 / 1m"
burst = "4"
count = "messages"
action = "defer"
"#;

    #[test]
    fn database_keys() {
        let m = model(LIMITS);
        let keys: Vec<_> = m.limits.iter().map(|d| database_key(d, "alice")).collect();
        assert_eq!(keys[0].as_deref(), Some("1h/per_rcpt/alice"));
        assert_eq!(keys[1].as_deref(), Some("1h/per_mail/alice"));
        assert_eq!(keys[2].as_deref(), Some("gcra/tb/alice"));
    }

    #[test]
    fn ewma_reading_and_time_until_under() {
        let m = model(LIMITS);
        let def = &m.limits[0];
        let now = 1_000_000_000_000_000;
        let rec = Record::Ewma(EwmaState {
            time_us: now,
            rate: 20.0,
        });
        let r = reading(
            def,
            Some("1h/per_rcpt/alice"),
            std::slice::from_ref(&rec),
            now,
        );
        assert!(r.stored && r.over);
        assert!((r.value - 20.0).abs() < 1e-9);
        let t = r.until_under_secs.unwrap();
        assert!((t - 3600.0 * 2f64.ln()).abs() < 1e-6);
        // Decayed by exactly that long, the rate is at the limit (still over: rate >= m);
        // a second later it is under.
        let later = now + (t * 1e6) as i64 + 1_000_000;
        let r2 = reading(def, None, &[rec], later);
        assert!(!r2.over && r2.value < 10.0 && r2.value > 9.99);
        // Nothing stored: rate 0, under.
        let r3 = reading(def, None, &[], now);
        assert!(!r3.stored && !r3.over && r3.value == 0.0);
    }

    #[test]
    fn gcra_reading() {
        let m = model(LIMITS);
        let def = &m.limits[2];
        let now = 1_000_000_000_000_000i64;
        // Level 4 (30 s per event): full.
        let rec = Record::Gcra {
            tat_ns: now * 1000 + 120_000_000_000,
        };
        let r = reading(def, None, &[rec], now);
        assert!((r.value - 4.0).abs() < 1e-9);
        assert!(r.over);
        assert!((r.until_under_secs.unwrap() - 30.0).abs() < 1e-6);
    }

    #[test]
    fn top_orders_and_filters() {
        let m = model(LIMITS);
        let now = 1_000_000_000_000_000;
        let ew = |rate| Record::Ewma(EwmaState { time_us: now, rate });
        let recs = vec![
            ("1h/per_rcpt/bob".to_string(), ew(3.0)),
            ("1h/per_rcpt/alice".to_string(), ew(12.0)),
            ("1h/per_mail/10.0.0.1".to_string(), ew(4.0)),
            ("foreign/key".to_string(), ew(100.0)),
        ];
        let t = top(&m, recs.clone(), now, None, 10);
        let order: Vec<_> = t
            .iter()
            .map(|e| (e.key.as_str(), e.reading.limit.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("1h/per_rcpt/alice", "per-user"),
                ("1h/per_mail/10.0.0.1", "per-ip"),
                ("1h/per_rcpt/bob", "per-user"),
            ]
        );
        let t = top(&m, recs.clone(), now, Some("per-user"), 1);
        assert_eq!(t.len(), 1);
        let mut b = TopBuilder::new(&m, now, None, 1);
        for (k, r) in recs.clone() {
            b.add(&k, r);
        }
        assert_eq!(b.offered(), 3, "the foreign key belongs to no limit");
        assert_eq!(t[0].key, "1h/per_rcpt/alice");
        assert!(top(&m, recs, now, Some("nope"), 10).is_empty());
    }
}
