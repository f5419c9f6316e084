//! A limit of each key's own (`baseline = "p95 / 14d"`, `factor = 5`, `floor = 50`): each
//! key's limit is `max(floor, factor × P)`, where P is the percentile of the key's *daily
//! peaks* over the window.
//!
//! # Daily peak
//!
//! The limit's period is cut into windows aligned on UTC midnight (for a period of one day,
//! the day itself; for `1h`, the day's 24 clock hours). A key's daily peak on a day is the
//! largest amount offered to the limit (the event log's counts: messages, recipients, …)
//! in one window of that day. For a limit counting per day it is the day's count; for a
//! shorter period, the busiest period of the day. Periods longer than a day are refused.
//!
//! # The percentile
//!
//! Over the window's whole UTC days before today (`14d`: the 14 days before today; today is
//! the day being limited), days without events counting 0, nearest rank: with 14 days `p95`
//! is the highest day and `p90` the second highest. A key without events in the window has
//! P = 0 and gets the floor.
//!
//! # Where the values live
//!
//! [`Baselines`] holds, per limit, the [`BaselineSet`] last computed from the event log
//! (by [`crate::report::baseline`]); every check of a baseline limit reads the key's limit
//! from it, the way a `limit_list` value is read. The set is kept with the store and
//! carried from one configuration generation to the next.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::figures::num;
use crate::store::BaselineSet;

/// The factor when none is given.
pub const DEFAULT_FACTOR: f64 = 5.0;
/// The longest window, in days.
pub const MAX_DAYS: u32 = 366;
/// Seconds in a day.
pub const DAY_SECS: i64 = 86_400;

/// Why a `baseline` string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaselineError {
    /// Not `PERCENTILE / WINDOW`.
    #[error("baseline {0:?} is not \"PERCENTILE / WINDOW\" (e.g. \"p95 / 14d\")")]
    Shape(String),
    /// The percentile is not `pN` with N in 1..=100.
    #[error("unknown percentile {0:?}: write p followed by a number from 1 to 100 (p50, p95, p99, p100)")]
    Percentile(String),
    /// The window is not a whole number of days.
    #[error("bad window {0:?}: write a whole number of days from 1 to {MAX_DAYS} (\"14d\")")]
    Window(String),
}

/// The percentile and the window of a baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BaselineSpec {
    /// The percentile, in (0, 100].
    pub percentile: f64,
    /// The window, in whole days.
    pub days: u32,
}

impl BaselineSpec {
    /// Parses `"p95 / 14d"` (spaces optional).
    pub fn parse(text: &str) -> Result<BaselineSpec, BaselineError> {
        let (p, w) = text
            .split_once('/')
            .ok_or_else(|| BaselineError::Shape(text.to_string()))?;
        let (p, w) = (p.trim(), w.trim());
        if p.is_empty() || w.is_empty() || w.contains('/') {
            return Err(BaselineError::Shape(text.to_string()));
        }
        let percentile = p
            .strip_prefix('p')
            .or_else(|| p.strip_prefix('P'))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|v| *v > 0.0 && *v <= 100.0 && v.is_finite())
            .ok_or_else(|| BaselineError::Percentile(p.to_string()))?;
        let days = w
            .strip_suffix('d')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|d| (1..=MAX_DAYS).contains(d))
            .ok_or_else(|| BaselineError::Window(w.to_string()))?;
        Ok(BaselineSpec { percentile, days })
    }

    /// The canonical text (`p95 / 14d`).
    pub fn text(&self) -> String {
        format!("p{} / {}d", self.percentile, self.days)
    }
}

/// A limit's baseline, compiled ([`BaselineDef::new`]; the signature is made there from
/// `spec` and `window_secs`, so change those by making a new one).
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineDef {
    /// Percentile and window.
    pub spec: BaselineSpec,
    /// The multiple of the percentile a key may reach.
    pub factor: f64,
    /// The lowest limit of any key.
    pub floor: f64,
    /// Width in seconds of the windows a daily peak is taken over (the limit's period).
    pub window_secs: i64,
    /// [`BaselineDef::signature`], made once (it is compared at every check).
    signature: String,
}

impl BaselineDef {
    /// A baseline of `spec` scaled by `factor`, never under `floor`, over daily peaks taken
    /// in windows of `window_secs`.
    pub fn new(spec: BaselineSpec, factor: f64, floor: f64, window_secs: i64) -> BaselineDef {
        BaselineDef {
            signature: format!("p{}/{}d/{}s", spec.percentile, spec.days, window_secs),
            spec,
            factor,
            floor,
            window_secs,
        }
    }

    /// What a computed set must have been computed for to be used with this baseline
    /// (factor and floor are applied when read, so they may change freely).
    pub fn signature(&self) -> &str {
        &self.signature
    }

    /// The limit of a key whose percentile peak is `peak` (`None`: no history).
    pub fn limit_of(&self, peak: Option<f64>) -> f64 {
        let scaled = peak.map_or(0.0, |p| self.factor * p);
        if scaled.is_finite() {
            scaled.max(self.floor)
        } else {
            self.floor
        }
    }

    /// The percentile (nearest rank) of one key's daily peaks, `days` values, one a day.
    pub fn percentile_of(&self, daily: &[f64]) -> f64 {
        let mut v = daily.to_vec();
        v.sort_by(f64::total_cmp);
        crate::figures::percentile(&v, self.spec.percentile / 100.0)
    }

    /// How `floodgate check` explains it.
    pub fn describe(&self, configured: f64) -> String {
        let floor = if self.floor == configured {
            format!("{} (the configured limit)", num(self.floor))
        } else {
            num(self.floor)
        };
        format!(
            "each key's limit is max({floor}, {} × its p{} daily peak over the {} days before today); \
             a daily peak is the most the key was offered in one {} window of a UTC day; \
             computed from the event log at start, on reload and daily; a key with no history gets {}",
            num(self.factor),
            self.spec.percentile,
            self.spec.days,
            crate::figures::period_text(self.window_secs as f64),
            num(self.floor),
        )
    }
}

/// The computed baselines of every limit that has one, shared by every configuration
/// generation in turn.
#[derive(Debug, Default)]
pub struct Baselines {
    sets: RwLock<HashMap<String, Arc<BaselineSet>>>,
}

impl Baselines {
    /// The percentile peak of `key` under limit `limit`, if a set computed for `def` has
    /// the key (`None`: no history, or no set yet).
    pub fn peak(&self, limit: &str, def: &BaselineDef, key: &str) -> Option<f64> {
        let sets = self.sets.read().unwrap_or_else(|e| e.into_inner());
        let set = sets.get(limit)?;
        if set.signature != def.signature() {
            return None;
        }
        set.peaks.get(key).copied()
    }

    /// The limit in force for `key` under limit `limit` with baseline `def`.
    pub fn limit(&self, limit: &str, def: &BaselineDef, key: &str) -> f64 {
        def.limit_of(self.peak(limit, def, key))
    }

    /// Makes `set` limit `limit`'s baselines.
    pub fn put(&self, limit: &str, set: Arc<BaselineSet>) {
        self.sets
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(limit.to_string(), set);
    }

    /// Limit `limit`'s set, if any.
    pub fn get(&self, limit: &str) -> Option<Arc<BaselineSet>> {
        self.sets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(limit)
            .cloned()
    }

    /// Takes over `other`'s sets for the limits it has and this one has not.
    pub fn adopt(&self, other: &Baselines) {
        let theirs = other.sets.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut mine = self.sets.write().unwrap_or_else(|e| e.into_inner());
        for (k, v) in theirs {
            mine.entry(k).or_insert(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn def(p: f64, days: u32) -> BaselineDef {
        BaselineDef::new(
            BaselineSpec {
                percentile: p,
                days,
            },
            5.0,
            50.0,
            DAY_SECS,
        )
    }

    #[test]
    fn parses() {
        assert_eq!(
            BaselineSpec::parse("p95 / 14d").unwrap(),
            BaselineSpec {
                percentile: 95.0,
                days: 14
            }
        );
        assert_eq!(BaselineSpec::parse("p50/1d").unwrap().days, 1);
        assert_eq!(BaselineSpec::parse("p99.5 / 30d").unwrap().percentile, 99.5);
        assert_eq!(BaselineSpec::parse("p100 / 366d").unwrap().days, 366);
        assert_eq!(
            BaselineSpec::parse("p95 / 14d").unwrap().text(),
            "p95 / 14d"
        );
    }

    #[test]
    fn refuses_with_the_reason() {
        let e = |t: &str| BaselineSpec::parse(t).unwrap_err();
        assert_eq!(e("p95"), BaselineError::Shape("p95".into()));
        assert_eq!(e("/ 14d"), BaselineError::Shape("/ 14d".into()));
        assert_eq!(
            e("p95 / 14d / x"),
            BaselineError::Shape("p95 / 14d / x".into())
        );
        assert_eq!(e("q95 / 14d"), BaselineError::Percentile("q95".into()));
        assert_eq!(e("p0 / 14d"), BaselineError::Percentile("p0".into()));
        assert_eq!(e("p101 / 14d"), BaselineError::Percentile("p101".into()));
        assert_eq!(e("p-5 / 14d"), BaselineError::Percentile("p-5".into()));
        assert_eq!(e("pNaN / 14d"), BaselineError::Percentile("pNaN".into()));
        assert_eq!(
            e("median / 14d"),
            BaselineError::Percentile("median".into())
        );
        assert_eq!(e("p95 / 14"), BaselineError::Window("14".into()));
        assert_eq!(e("p95 / 2w"), BaselineError::Window("2w".into()));
        assert_eq!(e("p95 / 0d"), BaselineError::Window("0d".into()));
        assert_eq!(e("p95 / 367d"), BaselineError::Window("367d".into()));
        assert_eq!(e("p95 / 1.5d"), BaselineError::Window("1.5d".into()));
        assert!(e("p101 / 14d").to_string().contains("from 1 to 100"));
        assert!(e("p95 / 2w").to_string().contains("whole number of days"));
    }

    #[test]
    fn limit_is_the_larger_of_floor_and_scaled_peak() {
        let d = def(95.0, 14);
        assert_eq!(d.limit_of(None), 50.0);
        assert_eq!(d.limit_of(Some(0.0)), 50.0);
        assert_eq!(d.limit_of(Some(10.0)), 50.0);
        assert_eq!(d.limit_of(Some(11.0)), 55.0);
        assert_eq!(d.limit_of(Some(500.0)), 2500.0);
        assert_eq!(d.limit_of(Some(f64::MAX)), 50.0);
    }

    #[test]
    fn nearest_rank_over_the_days() {
        let mut days = vec![10.0; 13];
        days.push(400.0);
        // With 14 days p95 is the highest day, p90 the second highest.
        assert_eq!(def(95.0, 14).percentile_of(&days), 400.0);
        assert_eq!(def(90.0, 14).percentile_of(&days), 10.0);
        assert_eq!(def(50.0, 14).percentile_of(&[0.0; 14]), 0.0);
    }

    #[test]
    fn sets_of_other_settings_are_not_used() {
        let b = Baselines::default();
        let d = def(95.0, 14);
        b.put(
            "l",
            Arc::new(BaselineSet {
                signature: def(95.0, 7).signature().to_string(),
                computed_us: 0,
                peaks: HashMap::from([("alice".into(), 100.0)]),
            }),
        );
        assert_eq!(b.limit("l", &d, "alice"), 50.0);
        b.put(
            "l",
            Arc::new(BaselineSet {
                signature: d.signature().to_string(),
                computed_us: 0,
                peaks: HashMap::from([("alice".into(), 100.0)]),
            }),
        );
        assert_eq!(b.limit("l", &d, "alice"), 500.0);
        assert_eq!(b.limit("l", &d, "bob"), 50.0);
        assert_eq!(b.limit("other", &d, "alice"), 50.0);
        // Adopting keeps what a generation already has.
        let next = Baselines::default();
        next.adopt(&b);
        assert_eq!(next.limit("l", &d, "alice"), 500.0);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,30}") {
            let _ = BaselineSpec::parse(&s);
        }

        #[test]
        fn canonical_text_round_trips(p in 1u32..=100, d in 1u32..=MAX_DAYS, sp in 0usize..3) {
            let pad = " ".repeat(sp);
            let s = BaselineSpec::parse(&format!("p{p}{pad}/{pad}{d}d")).unwrap();
            prop_assert_eq!(BaselineSpec::parse(&s.text()).unwrap(), s);
            prop_assert_eq!(s.days, d);
        }

        /// The limit is never below the floor and grows with the peak.
        #[test]
        fn limit_is_monotonic(a in 0.0f64..1e9, b in 0.0f64..1e9, floor in 0.0f64..1e6) {
            let mut d = def(95.0, 14);
            d.floor = floor;
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(d.limit_of(Some(lo)) >= floor);
            prop_assert!(d.limit_of(Some(lo)) <= d.limit_of(Some(hi)));
        }
    }
}
