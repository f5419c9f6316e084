//! Per-key baselines from the event log (see [`crate::policy::baseline`] for what they
//! mean): the daily peaks of every key of every limit with a `baseline`, read from the event
//! log (`PATH.1`, then `PATH`), and [`BaselineKeeper`], which computes them at start when the
//! store has none from today, on every reload and after every UTC midnight, installs them in
//! the configuration in force and saves them with the store.
//!
//! The log is read line by line; memory is one day-vector per (limit, key). Lines that are
//! not events (a torn last line, a line of another shape) are skipped and counted. Events
//! are expected in time order, as the writer appends them: an event older than the window a
//! key's previous event opened starts a new window of its own, so an event that arrives
//! late across a window boundary can split that window's count.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::config::{ConfigError, LimitConfig};
use crate::policy::baseline::{BaselineDef, DAY_SECS};
use crate::policy::model::PolicyModel;
use crate::store::{BaselineSet, Store};

const DAY_US: i64 = DAY_SECS * 1_000_000;

/// Refuses a limit with a `baseline` when there is no event log (`events` is false) to read
/// its history from.
pub fn check_config(
    limits: &[LimitConfig],
    events: bool,
    at: &dyn Fn(std::ops::Range<usize>, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if events {
        return Ok(());
    }
    for (i, l) in limits.iter().enumerate() {
        if let Some(b) = &l.baseline {
            let name = l
                .name
                .as_ref()
                .map_or_else(|| format!("limit-{}", i + 1), |n| n.get_ref().clone());
            return Err(at(
                b.span(),
                format!(
                    "limit {name}: baseline reads each key's history from the event log: set [report] events"
                ),
            ));
        }
    }
    Ok(())
}

/// One key's days: the window being summed and the peak of each day of the range.
struct KeyDays {
    slot: i64,
    sum: f64,
    days: Vec<f64>,
}

/// The daily peaks of one limit's keys over one range of days.
struct LimitDays {
    def: BaselineDef,
    /// The first day (days since the epoch) of the limit's window.
    first_day: i64,
    /// Windows a day is cut into (the last one may be shorter).
    per_day: i64,
    keys: HashMap<String, KeyDays>,
}

/// Puts a key's open window into its day.
fn close(per_day: i64, first_day: i64, k: &mut KeyDays) {
    let d = k.slot.div_euclid(per_day) - first_day;
    if let Some(v) = usize::try_from(d).ok().and_then(|d| k.days.get_mut(d)) {
        *v = v.max(k.sum);
    }
}

/// Daily peaks of every baseline limit over its window's whole UTC days before `now_us`'s.
pub struct DailyPeaks {
    limits: HashMap<String, LimitDays>,
    /// Lines that were not events.
    pub skipped: u64,
    /// Events counted.
    pub events: u64,
}

impl DailyPeaks {
    /// An empty tally for the baseline limits of `model` as of `now_us`.
    pub fn new(model: &PolicyModel, now_us: i64) -> DailyPeaks {
        let today = now_us.div_euclid(DAY_US);
        let mut limits = HashMap::new();
        for d in &model.limits {
            if let Some(b) = &d.baseline {
                let window_us = b.window_secs * 1_000_000;
                limits.insert(
                    d.name.clone(),
                    LimitDays {
                        def: b.clone(),
                        first_day: today - i64::from(b.spec.days),
                        per_day: (DAY_US + window_us - 1) / window_us,
                        keys: HashMap::new(),
                    },
                );
            }
        }
        DailyPeaks {
            limits,
            skipped: 0,
            events: 0,
        }
    }

    /// Whether any limit has a baseline.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// Counts `count` for `key` of `limit` at `t_us`.
    pub fn add(&mut self, t_us: i64, limit: &str, key: &str, count: f64) {
        let Some(l) = self.limits.get_mut(limit) else {
            return;
        };
        let day = t_us.div_euclid(DAY_US);
        let n = l.def.spec.days as usize;
        let index = day - l.first_day;
        if index < 0 || index >= n as i64 || !(count.is_finite() && count >= 0.0) {
            return;
        }
        let window_us = l.def.window_secs * 1_000_000;
        let slot = day * l.per_day + (t_us - day * DAY_US) / window_us;
        let (per_day, first_day) = (l.per_day, l.first_day);
        match l.keys.get_mut(key) {
            Some(k) => {
                if k.slot != slot {
                    close(per_day, first_day, k);
                    k.slot = slot;
                    k.sum = 0.0;
                }
                k.sum += count;
            }
            None => {
                l.keys.insert(
                    key.to_string(),
                    KeyDays {
                        slot,
                        sum: count,
                        days: vec![0.0; n],
                    },
                );
            }
        }
        self.events += 1;
    }

    /// Reads event lines from `input`.
    pub fn read(&mut self, input: impl BufRead) -> std::io::Result<()> {
        let mut input = input;
        let mut line = String::new();
        loop {
            line.clear();
            if input.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            match crate::eventlog::Evaluation::parse(text) {
                Ok(ev) if ev.limit.is_some() => {
                    let key = ev.key.unwrap_or_default();
                    let limit = ev.limit.unwrap_or_default();
                    self.add(ev.time_us, &limit, &key, ev.count.unwrap_or(1.0));
                }
                _ => self.skipped += 1,
            }
        }
    }

    /// The sets: per limit, each key's percentile of its daily peaks (keys whose
    /// percentile is 0 are left out: they get the floor like keys without events).
    pub fn finish(self, now_us: i64) -> HashMap<String, BaselineSet> {
        self.limits
            .into_iter()
            .map(|(name, mut l)| {
                let keys = std::mem::take(&mut l.keys);
                let peaks = keys
                    .into_iter()
                    .filter_map(|(key, mut k)| {
                        close(l.per_day, l.first_day, &mut k);
                        let p = l.def.percentile_of(&k.days);
                        // Sums past f64's range (absurd counts) are no history.
                        (p > 0.0 && p.is_finite()).then_some((key, p))
                    })
                    .collect();
                (
                    name,
                    BaselineSet {
                        signature: l.def.signature().to_string(),
                        computed_us: now_us,
                        peaks,
                    },
                )
            })
            .collect()
    }
}

/// The event log's files, oldest first: `PATH.1` (the rotated one) when present, then `PATH`.
pub fn log_files(events: &Path) -> Vec<PathBuf> {
    let mut rotated = events.as_os_str().to_owned();
    rotated.push(".1");
    [PathBuf::from(rotated), events.to_path_buf()]
        .into_iter()
        .filter(|p| p.exists())
        .collect()
}

/// Computes the baselines of `model`'s limits from the event log `events` as of `now_us`.
/// Neither `PATH` nor `PATH.1` there is a `NotFound` error: a log that went away must not
/// replace the baselines in force with empty ones.
pub fn compute(
    model: &PolicyModel,
    events: &Path,
    now_us: i64,
) -> std::io::Result<(HashMap<String, BaselineSet>, u64)> {
    let mut peaks = DailyPeaks::new(model, now_us);
    if peaks.is_empty() {
        return Ok((HashMap::new(), 0));
    }
    let files = log_files(events);
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no event log (neither the file nor its .1)",
        ));
    }
    for f in files {
        let file = std::fs::File::open(&f)?;
        peaks.read(std::io::BufReader::new(file))?;
    }
    let skipped = peaks.skipped;
    Ok((peaks.finish(now_us), skipped))
}

/// Keeps the baselines of the configuration in force computed, installed and saved.
pub struct BaselineKeeper {
    store: Arc<dyn Store>,
    current: RwLock<(Arc<PolicyModel>, Option<PathBuf>)>,
    wake: tokio::sync::Notify,
    clock: fn() -> i64,
}

impl BaselineKeeper {
    /// Loads the sets saved with the store into `model`, then computes at once those
    /// missing, computed for other settings or before today (from the event log `events`),
    /// and keeps them fresh (a task on the current runtime).
    pub async fn start(
        model: Arc<PolicyModel>,
        events: Option<PathBuf>,
        store: Arc<dyn Store>,
    ) -> Arc<BaselineKeeper> {
        let keeper = Arc::new(BaselineKeeper {
            store,
            current: RwLock::new((model.clone(), events)),
            wake: tokio::sync::Notify::new(),
            clock: crate::store::now_micros,
        });
        let mut fresh = true;
        let today = (keeper.clock)().div_euclid(DAY_US);
        for d in &model.limits {
            let Some(b) = &d.baseline else { continue };
            match keeper.store.load_baselines(&d.name).await {
                Ok(Some(set)) if set.signature == b.signature() => {
                    fresh &= set.computed_us.div_euclid(DAY_US) == today;
                    info!(limit = %d.name, keys = set.peaks.len(), "baselines loaded from the store");
                    model.baselines.put(&d.name, Arc::new(set));
                }
                Ok(_) => fresh = false,
                Err(e) => {
                    warn!(limit = %d.name, error = %e, "baselines not readable from the store");
                    fresh = false;
                }
            }
        }
        if !fresh {
            keeper.refresh().await;
        }
        tokio::spawn(keeper.clone().run());
        keeper
    }

    /// Takes `model`, read from the event log `events`, as the one in force: it adopts the
    /// sets computed for the previous one (call this before it is installed), and they are
    /// computed again at once.
    pub fn reload(&self, model: &Arc<PolicyModel>, events: Option<PathBuf>) {
        let mut cur = self.current.write().unwrap_or_else(|e| e.into_inner());
        model.baselines.adopt(&cur.0.baselines);
        *cur = (model.clone(), events);
        drop(cur);
        self.wake.notify_one();
    }

    async fn run(self: Arc<Self>) {
        loop {
            // Just after the next UTC midnight, or at a reload.
            let now = (self.clock)();
            let next = (now.div_euclid(DAY_US) + 1) * DAY_US + 60_000_000;
            let wait = Duration::from_micros((next - now).max(1_000_000) as u64);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
            }
            self.refresh().await;
        }
    }

    /// Computes every baseline of the configuration in force, installs and saves them.
    pub async fn refresh(&self) {
        let (model, events) = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(events) = events else { return };
        if !model.limits.iter().any(|d| d.baseline.is_some()) {
            return;
        }
        let now = (self.clock)();
        let m = model.clone();
        let path = events.clone();
        let sets = match tokio::task::spawn_blocking(move || compute(&m, &path, now)).await {
            Ok(Ok((sets, skipped))) => {
                if skipped > 0 {
                    warn!(path = %events.display(), skipped, "baselines: event log lines skipped");
                }
                sets
            }
            Ok(Err(e)) => {
                warn!(path = %events.display(), error = %e, "baselines: event log not readable; the previous values stay");
                return;
            }
            Err(e) => {
                warn!(error = %e, "baselines: computation failed");
                return;
            }
        };
        for (limit, set) in sets {
            let set = Arc::new(set);
            model.baselines.put(&limit, set.clone());
            info!(limit = %limit, keys = set.peaks.len(), "baselines computed");
            if let Err(e) = self.store.save_baselines(&limit, &set).await {
                warn!(limit = %limit, error = %e, "baselines not saved with the store");
            }
        }
    }
}

/// One key's baseline in the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineKey {
    /// The key text.
    pub key: String,
    /// Its percentile daily peak.
    pub peak: f64,
    /// Its limit.
    pub limit: f64,
}

/// The per-key limits of one limit with a `baseline`, as `floodgate report` shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineReport {
    /// The limit's name.
    pub limit: String,
    /// The baseline (`p95 / 14d`).
    pub baseline: String,
    /// Its factor.
    pub factor: f64,
    /// Its floor (the limit of keys without history).
    pub floor: f64,
    /// As of when (µs): the days before this one's are the window.
    pub as_of_us: i64,
    /// Keys with history in the window.
    pub keys: usize,
    /// Of those, the ones whose limit is the floor.
    pub at_floor: usize,
    /// The keys with the highest limits, highest first (ties by key).
    pub top: Vec<BaselineKey>,
}

/// The baselines of `model`'s limits from the event log `events` as of `as_of_us`, the
/// `top` highest keys of each.
pub fn summarise(
    model: &PolicyModel,
    events: &Path,
    as_of_us: i64,
    top: usize,
) -> std::io::Result<Vec<BaselineReport>> {
    let (mut sets, _) = compute(model, events, as_of_us)?;
    let mut out = Vec::new();
    for d in &model.limits {
        let (Some(b), Some(set)) = (&d.baseline, sets.remove(&d.name)) else {
            continue;
        };
        let mut keys: Vec<BaselineKey> = set
            .peaks
            .into_iter()
            .map(|(key, peak)| BaselineKey {
                limit: b.limit_of(Some(peak)),
                key,
                peak,
            })
            .collect();
        keys.sort_by(|a, c| c.limit.total_cmp(&a.limit).then_with(|| a.key.cmp(&c.key)));
        out.push(BaselineReport {
            limit: d.name.clone(),
            baseline: b.spec.text(),
            factor: b.factor,
            floor: b.floor,
            as_of_us,
            keys: keys.len(),
            at_floor: keys.iter().filter(|k| k.limit <= b.floor).count(),
            top: keys.into_iter().take(top).collect(),
        });
    }
    Ok(out)
}

/// The text of one limit's baselines in `floodgate report`.
pub fn render(o: &mut String, b: &BaselineReport) {
    use crate::figures::num;
    use std::fmt::Write as _;
    let _ = writeln!(
        o,
        "  baseline {} as of {}: limit = max({}, {} x the key's daily peak); {} keys with history, {} of them at the floor; any other key: {}",
        b.baseline,
        crate::time::rfc3339(b.as_of_us),
        num(b.floor),
        num(b.factor),
        b.keys,
        b.at_floor,
        num(b.floor)
    );
    for k in &b.top {
        let _ = writeln!(
            o,
            "    {:>12}  {}  (daily peak {})",
            num(k.limit),
            k.key,
            num(k.peak)
        );
    }
}

#[cfg(test)]
mod tests;
