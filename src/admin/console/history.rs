//! The last hour, minute by minute: sessions, messages and, per limit, deferrals and
//! over-limit verdicts.
//!
//! Nothing is added to the session path. The metrics registry already counts all of it
//! with relaxed atomics (sessions per listener, messages relayed, verdicts per limit and
//! action); a sampler reads those totals every few seconds (and whenever the overview is
//! shown) and adds the difference since the previous reading to the current minute.
//! The window is bounded: at most [`MINUTES`] minutes, each with one number per
//! configured limit that was over in it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use crate::admin::Metrics;
use crate::generation::Generation;
use crate::metrics::ACTIONS;

/// Minutes kept (and drawn): the last hour.
pub const MINUTES: usize = 60;

/// The counters' totals at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Sessions admitted, all listeners.
    pub sessions: u64,
    /// Messages upstream accepted.
    pub messages: u64,
    /// Per configured limit: (name, deferrals, over-limit verdicts of any action).
    pub limits: Vec<(String, u64, u64)>,
}

impl Totals {
    /// Reads the registry's totals for the limits and listeners of `config`.
    pub fn read(metrics: &Metrics, generation: &Generation) -> Totals {
        let sessions = generation
            .config
            .listeners
            .iter()
            .map(|l| metrics.listener(&l.display_name()).sessions.get())
            .sum();
        let limits = generation
            .policy
            .limits
            .iter()
            .map(|d| {
                let over = ACTIONS
                    .iter()
                    .map(|a| metrics.verdicts_of(&d.name, a))
                    .sum();
                (d.name.clone(), metrics.verdicts_of(&d.name, "defer"), over)
            })
            .collect();
        Totals {
            sessions,
            messages: metrics.messages.get(),
            limits,
        }
    }
}

/// What happened in one minute.
#[derive(Clone, Debug, Default, PartialEq)]
struct Minute {
    /// Minutes since the Unix epoch.
    minute: i64,
    sessions: u64,
    messages: u64,
    /// Limit name → (deferrals, verdicts).
    limits: BTreeMap<String, (u64, u64)>,
}

/// The per-minute window and the last totals read.
#[derive(Debug, Default)]
pub struct History {
    minutes: VecDeque<Minute>,
    last: Option<Totals>,
}

impl History {
    /// Adds what changed since the previous reading to `minute` (minutes since the
    /// epoch). The first reading only sets the baseline; so does a limit's first
    /// appearance (a limit added by a reload whose counts predate it). A counter that went
    /// back (a restart of the registry) counts from its new value.
    pub fn record(&mut self, minute: i64, now: Totals) {
        if let Some(last) = self.last.take() {
            let d = |new: u64, old: u64| new.checked_sub(old).unwrap_or(new);
            let mut m = Minute {
                minute,
                sessions: d(now.sessions, last.sessions),
                messages: d(now.messages, last.messages),
                limits: BTreeMap::new(),
            };
            for (name, deferred, over) in &now.limits {
                if let Some((_, d0, o0)) = last.limits.iter().find(|(n, _, _)| n == name) {
                    let (dd, od) = (d(*deferred, *d0), d(*over, *o0));
                    if dd > 0 || od > 0 {
                        m.limits.insert(name.clone(), (dd, od));
                    }
                }
            }
            self.add(m);
        }
        self.last = Some(now);
        self.forget_before(minute - MINUTES as i64 + 1);
    }

    fn add(&mut self, m: Minute) {
        match self.minutes.iter_mut().find(|x| x.minute == m.minute) {
            Some(x) => {
                x.sessions += m.sessions;
                x.messages += m.messages;
                for (name, (d, o)) in m.limits {
                    let e = x.limits.entry(name).or_default();
                    e.0 += d;
                    e.1 += o;
                }
            }
            None => {
                // Minutes arrive in order; a clock stepped back joins the newest minute.
                let minute = self
                    .minutes
                    .back()
                    .map_or(m.minute, |b| b.minute.max(m.minute));
                if self.minutes.back().is_some_and(|b| b.minute == minute) {
                    let mut m = m;
                    m.minute = minute;
                    return self.add(m);
                }
                self.minutes.push_back(Minute { minute, ..m });
            }
        }
    }

    fn forget_before(&mut self, first: i64) {
        while self.minutes.front().is_some_and(|m| m.minute < first) {
            self.minutes.pop_front();
        }
        while self.minutes.len() > MINUTES {
            self.minutes.pop_front();
        }
    }

    /// One value per minute of the hour ending at `now` (oldest first, `now` last).
    fn series(&self, now: i64, f: impl Fn(&Minute) -> u64) -> Vec<f64> {
        let first = now - MINUTES as i64 + 1;
        let mut out = vec![0.0; MINUTES];
        for m in &self.minutes {
            if (first..=now).contains(&m.minute) {
                out[(m.minute - first) as usize] = f(m) as f64;
            }
        }
        out
    }

    /// Sessions admitted per minute over the hour ending at `now`.
    pub fn sessions(&self, now: i64) -> Vec<f64> {
        self.series(now, |m| m.sessions)
    }

    /// Messages relayed per minute over the hour ending at `now`.
    pub fn messages(&self, now: i64) -> Vec<f64> {
        self.series(now, |m| m.messages)
    }

    /// Per limit named in `names`: its deferrals per minute over the hour ending at
    /// `now`, and its totals of deferrals and verdicts in that hour.
    pub fn limits(&self, now: i64, names: &[&str]) -> Vec<LimitHour> {
        names
            .iter()
            .map(|&name| {
                let get = |m: &Minute| m.limits.get(name).copied().unwrap_or_default();
                let deferred = self.series(now, |m| get(m).0);
                let over = self.series(now, |m| get(m).1).iter().sum::<f64>() as u64;
                LimitHour {
                    name: name.to_string(),
                    total_deferred: deferred.iter().sum::<f64>() as u64,
                    deferred,
                    total_over: over,
                }
            })
            .collect()
    }
}

/// One limit's last hour.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitHour {
    /// The limit's name.
    pub name: String,
    /// Deferrals per minute, oldest first.
    pub deferred: Vec<f64>,
    /// Deferrals in the hour.
    pub total_deferred: u64,
    /// Over-limit verdicts (any action) in the hour.
    pub total_over: u64,
}

/// The history behind a lock taken only by the sampler and the overview page.
#[derive(Debug, Default)]
pub struct Recorder(Mutex<History>);

impl Recorder {
    /// Reads the totals of `metrics` for `config` and records them at `minute`.
    pub fn sample(&self, metrics: &Metrics, generation: &Generation, minute: i64) {
        let totals = Totals::read(metrics, generation);
        self.lock().record(minute, totals);
    }

    /// The history, locked.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, History> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Minutes since the Unix epoch of `time_us` (microseconds since the epoch).
pub fn minute_of(time_us: i64) -> i64 {
    time_us.div_euclid(60_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(sessions: u64, messages: u64, limits: &[(&str, u64, u64)]) -> Totals {
        Totals {
            sessions,
            messages,
            limits: limits
                .iter()
                .map(|(n, d, o)| (n.to_string(), *d, *o))
                .collect(),
        }
    }

    #[test]
    fn differences_land_in_their_minute() {
        let mut h = History::default();
        h.record(100, totals(5, 10, &[("a", 1, 2)]));
        // The baseline is not counted.
        assert!(h.messages(100).iter().all(|&v| v == 0.0));
        h.record(100, totals(6, 13, &[("a", 1, 2)]));
        h.record(101, totals(8, 20, &[("a", 4, 6), ("b", 9, 9)]));
        h.record(101, totals(8, 21, &[("a", 5, 7), ("b", 10, 10)]));
        let m = h.messages(101);
        assert_eq!(m.len(), MINUTES);
        assert_eq!((m[58], m[59]), (3.0, 8.0));
        let s = h.sessions(101);
        assert_eq!((s[58], s[59]), (1.0, 2.0));
        let l = h.limits(101, &["a", "b", "c"]);
        assert_eq!(l[0].deferred[59], 4.0);
        assert_eq!((l[0].total_deferred, l[0].total_over), (4, 5));
        // b appeared at minute 101: its first reading is its baseline.
        assert_eq!((l[1].total_deferred, l[1].total_over), (1, 1));
        assert_eq!(l[2].total_over, 0);
    }

    #[test]
    fn window_is_one_hour_and_bounded() {
        let mut h = History::default();
        for i in 0..500u64 {
            h.record(1000 + i as i64, totals(i, i * 2, &[("a", i, i)]));
        }
        assert!(h.minutes.len() <= MINUTES, "{}", h.minutes.len());
        let now = 1499;
        let m = h.messages(now);
        assert!(m.iter().all(|&v| v == 2.0), "{m:?}");
        // An hour later with no reading in between, everything has aged out.
        h.record(now + 61, totals(499, 998, &[("a", 499, 499)]));
        assert!(h.messages(now + 61).iter().all(|&v| v == 0.0));
        assert_eq!(h.minutes.len(), 1);
    }

    #[test]
    fn counters_that_go_back_and_clocks_that_step_back() {
        let mut h = History::default();
        h.record(10, totals(100, 100, &[]));
        h.record(10, totals(3, 4, &[]));
        assert_eq!(h.messages(10)[59], 4.0);
        h.record(12, totals(3, 6, &[]));
        h.record(11, totals(3, 7, &[]));
        // The minute 11 reading after 12 joins minute 12.
        let m = h.messages(12);
        assert_eq!((m[58], m[59]), (0.0, 3.0));
    }

    #[test]
    fn minutes_of_times() {
        assert_eq!(minute_of(0), 0);
        assert_eq!(minute_of(59_999_999), 0);
        assert_eq!(minute_of(60_000_000), 1);
        assert_eq!(minute_of(-1), -1);
    }
}
