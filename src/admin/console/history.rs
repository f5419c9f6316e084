//! The last day, minute by minute: sessions, messages sent (relayed, released from hold,
//! notices to users) and, per limit, deferrals and over-limit verdicts; read over a
//! [`Range`] of 1, 6 or 24 hours.
//!
//! Nothing is added to the session path. The metrics registry already counts all of it
//! with relaxed atomics (sessions per listener, messages relayed, verdicts per limit and
//! action); a sampler reads those totals every few seconds (and whenever the overview is
//! shown) and adds the difference since the previous reading to the current minute.
//! The window is bounded: at most [`KEPT`] minutes, each with one number per configured
//! limit that was over in it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use crate::admin::Metrics;
use crate::generation::Generation;
use crate::metrics::ACTIONS;

/// Minutes in an hour: the key page's window.
pub const MINUTES: usize = 60;
/// Minutes kept: the longest [`Range`].
pub const KEPT: usize = 24 * 60;

/// The span the overview's charts cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    /// The last hour, a point a minute.
    Hour,
    /// The last 6 hours, a point per 5 minutes.
    SixHours,
    /// The last 24 hours, a point per 15 minutes.
    Day,
}

impl Range {
    /// Every range, shortest first.
    pub const ALL: [Range; 3] = [Range::Hour, Range::SixHours, Range::Day];

    /// `1h`, `6h` or `24h` (a `?range=` value); `None` for anything else.
    pub fn parse(s: &str) -> Option<Range> {
        Range::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The range as its query value.
    pub fn as_str(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::SixHours => "6h",
            Range::Day => "24h",
        }
    }

    /// The range in words, for titles.
    pub fn words(self) -> &'static str {
        match self {
            Range::Hour => "last hour",
            Range::SixHours => "last 6 hours",
            Range::Day => "last 24 hours",
        }
    }

    /// Minutes covered.
    pub fn minutes(self) -> usize {
        match self {
            Range::Hour => 60,
            Range::SixHours => 6 * 60,
            Range::Day => 24 * 60,
        }
    }

    /// Minutes per point.
    pub fn step(self) -> usize {
        match self {
            Range::Hour => 1,
            Range::SixHours => 5,
            Range::Day => 15,
        }
    }

    /// Points drawn.
    pub fn points(self) -> usize {
        self.minutes() / self.step()
    }
}

/// The counters' totals at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Sessions admitted, all listeners.
    pub sessions: u64,
    /// Messages upstream accepted from clients (rerouted ones included).
    pub messages: u64,
    /// Held and paced messages released to upstream.
    pub released: u64,
    /// Notices mailed to restricted users.
    pub notices: u64,
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
            released: metrics.hold.released.get() + metrics.graded.paced_released.get(),
            notices: metrics.restrictions_of("user_notified"),
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
    released: u64,
    notices: u64,
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
                released: d(now.released, last.released),
                notices: d(now.notices, last.notices),
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
        self.forget_before(minute - KEPT as i64 + 1);
    }

    fn add(&mut self, m: Minute) {
        match self.minutes.iter_mut().find(|x| x.minute == m.minute) {
            Some(x) => {
                x.sessions += m.sessions;
                x.messages += m.messages;
                x.released += m.released;
                x.notices += m.notices;
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
        while self.minutes.len() > KEPT {
            self.minutes.pop_front();
        }
    }

    /// One value per point of `range` ending with the minute `now` (oldest first): the
    /// sum of its minutes.
    fn series(&self, now: i64, range: Range, f: impl Fn(&Minute) -> u64) -> Vec<f64> {
        let first = now - range.minutes() as i64 + 1;
        let mut out = vec![0.0; range.points()];
        for m in &self.minutes {
            if (first..=now).contains(&m.minute) {
                out[(m.minute - first) as usize / range.step()] += f(m) as f64;
            }
        }
        out
    }

    /// Sessions admitted per point of `range` ending at `now`.
    pub fn sessions(&self, now: i64, range: Range) -> Vec<f64> {
        self.series(now, range, |m| m.sessions)
    }

    /// Messages sent upstream per point of `range` ending at `now`: relayed, released
    /// from hold and notices to users.
    pub fn messages(&self, now: i64, range: Range) -> Vec<f64> {
        self.series(now, range, |m| m.messages + m.released + m.notices)
    }

    /// What was sent over `range` ending at `now`: (relayed, released, notices).
    pub fn sent(&self, now: i64, range: Range) -> (u64, u64, u64) {
        let sum = |f: fn(&Minute) -> u64| self.series(now, range, f).iter().sum::<f64>() as u64;
        (sum(|m| m.messages), sum(|m| m.released), sum(|m| m.notices))
    }

    /// Per limit named in `names`: its deferrals per point of `range` ending at `now`, and
    /// its totals of deferrals and verdicts over it.
    pub fn limits(&self, now: i64, range: Range, names: &[&str]) -> Vec<LimitHour> {
        names
            .iter()
            .map(|&name| {
                let get = |m: &Minute| m.limits.get(name).copied().unwrap_or_default();
                let deferred = self.series(now, range, |m| get(m).0);
                let over = self.series(now, range, |m| get(m).1).iter().sum::<f64>() as u64;
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

/// One limit over a range.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitHour {
    /// The limit's name.
    pub name: String,
    /// Deferrals per point, oldest first.
    pub deferred: Vec<f64>,
    /// Deferrals in the range.
    pub total_deferred: u64,
    /// Over-limit verdicts (any action) in the range.
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
            released: 0,
            notices: 0,
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
        assert!(h.messages(100, Range::Hour).iter().all(|&v| v == 0.0));
        h.record(100, totals(6, 13, &[("a", 1, 2)]));
        h.record(101, totals(8, 20, &[("a", 4, 6), ("b", 9, 9)]));
        h.record(101, totals(8, 21, &[("a", 5, 7), ("b", 10, 10)]));
        let m = h.messages(101, Range::Hour);
        assert_eq!(m.len(), MINUTES);
        assert_eq!((m[58], m[59]), (3.0, 8.0));
        let s = h.sessions(101, Range::Hour);
        assert_eq!((s[58], s[59]), (1.0, 2.0));
        let l = h.limits(101, Range::Hour, &["a", "b", "c"]);
        assert_eq!(l[0].deferred[59], 4.0);
        assert_eq!((l[0].total_deferred, l[0].total_over), (4, 5));
        // b appeared at minute 101: its first reading is its baseline.
        assert_eq!((l[1].total_deferred, l[1].total_over), (1, 1));
        assert_eq!(l[2].total_over, 0);
    }

    #[test]
    fn window_is_a_day_and_bounded() {
        let mut h = History::default();
        for i in 0..2000u64 {
            h.record(1000 + i as i64, totals(i, i * 2, &[("a", i, i)]));
        }
        assert!(h.minutes.len() <= KEPT, "{}", h.minutes.len());
        let now = 2999;
        let m = h.messages(now, Range::Hour);
        assert_eq!(m.len(), 60);
        assert!(m.iter().all(|&v| v == 2.0), "{m:?}");
        // Six hours: a point per 5 minutes; a day: per 15 minutes.
        let m = h.messages(now, Range::SixHours);
        assert_eq!(m.len(), 72);
        assert!(m.iter().all(|&v| v == 10.0), "{m:?}");
        let m = h.messages(now, Range::Day);
        assert_eq!(m.len(), 96);
        assert!(m.iter().all(|&v| v == 30.0), "{m:?}");
        assert_eq!(h.limits(now, Range::Day, &["a"])[0].total_deferred, 1440);
        // A day later with no reading in between, everything has aged out.
        h.record(now + 1441, totals(1999, 3998, &[("a", 1999, 1999)]));
        assert!(h.messages(now + 1441, Range::Day).iter().all(|&v| v == 0.0));
        assert_eq!(h.minutes.len(), 1);
    }

    #[test]
    fn released_mail_and_notices_are_messages_sent() {
        let mut h = History::default();
        let mut t = totals(0, 0, &[]);
        h.record(10, t.clone());
        t.messages = 4;
        t.released = 3;
        t.notices = 1;
        h.record(10, t);
        assert_eq!(h.messages(10, Range::Hour)[59], 8.0);
        assert_eq!(h.sent(10, Range::Hour), (4, 3, 1));
    }

    #[test]
    fn ranges_read_their_query_values() {
        for r in Range::ALL {
            assert_eq!(Range::parse(r.as_str()), Some(r));
            assert_eq!(r.points() * r.step(), r.minutes());
        }
        assert_eq!(Range::parse("2h"), None);
        assert_eq!(Range::parse(""), None);
    }

    #[test]
    fn counters_that_go_back_and_clocks_that_step_back() {
        let mut h = History::default();
        h.record(10, totals(100, 100, &[]));
        h.record(10, totals(3, 4, &[]));
        assert_eq!(h.messages(10, Range::Hour)[59], 4.0);
        h.record(12, totals(3, 6, &[]));
        h.record(11, totals(3, 7, &[]));
        // The minute 11 reading after 12 joins minute 12.
        let m = h.messages(12, Range::Hour);
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
