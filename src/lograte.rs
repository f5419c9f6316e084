//! Warnings that can come once per event, told once per interval with a count.
//!
//! While a store is down, every MAIL FROM can meet the same failure; a line per message
//! buries the log. [`Repeated`] is the count without I/O: the first occurrence after a quiet
//! interval is told at once, later ones are counted, and the count is told at the next
//! occurrence once the interval has passed, or by [`Repeated::flush`] (which a periodic task
//! calls) — as `… (N times in the last 10 s)`. [`RepeatedWarning`] is the same with its
//! text, writing the lines with `tracing`.
//!
//! Nothing is lost: every occurrence is in exactly one told line's count.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The interval floodgate's repeated warnings use.
pub const EVERY: Duration = Duration::from_secs(10);

/// One line to tell: how many occurrences it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// Occurrences since the previous line (this one included).
    pub times: u64,
    /// Time since the previous line (zero for the first line ever).
    pub over: Duration,
    /// The detail of the last occurrence (usually the error).
    pub detail: String,
    /// Whether the line stands for more than the one occurrence that told it at once.
    pub summary: bool,
}

impl Told {
    /// What follows the warning's text: nothing for an occurrence told as it came,
    /// else ` (N times in the last S s)` (S in whole seconds).
    pub fn suffix(&self) -> String {
        if !self.summary {
            return String::new();
        }
        let word = if self.times == 1 { "time" } else { "times" };
        format!(
            " ({} {word} in the last {} s)",
            self.times,
            self.over.as_secs()
        )
    }
}

#[derive(Debug)]
struct State {
    last_told: Option<Instant>,
    untold: u64,
    detail: String,
}

/// The count of one repeated occurrence (see the module's documentation).
#[derive(Debug)]
pub struct Repeated {
    every: Duration,
    state: Mutex<State>,
}

impl Repeated {
    /// Tells at most one line per `every`.
    pub const fn new(every: Duration) -> Repeated {
        Repeated {
            every,
            state: Mutex::new(State {
                last_told: None,
                untold: 0,
                detail: String::new(),
            }),
        }
    }

    /// One occurrence at `now` with `detail`: the line to tell now, if any.
    pub fn note(&self, now: Instant, detail: &str) -> Option<Told> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.untold += 1;
        if s.detail != detail {
            s.detail.clear();
            s.detail.push_str(detail);
        }
        let due = s
            .last_told
            .is_none_or(|t| now.saturating_duration_since(t) >= self.every);
        let summary = s.untold > 1;
        due.then(|| Self::tell(&mut s, now, summary))
    }

    /// The line of the occurrences not told yet, once the interval since the last line has
    /// passed; `None` when there are none or it is too early.
    pub fn flush(&self, now: Instant) -> Option<Told> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.untold == 0 {
            return None;
        }
        let due = s
            .last_told
            .is_none_or(|t| now.saturating_duration_since(t) >= self.every);
        due.then(|| Self::tell(&mut s, now, true))
    }

    fn tell(s: &mut State, now: Instant, summary: bool) -> Told {
        let over = s
            .last_told
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let told = Told {
            times: s.untold,
            over,
            detail: s.detail.clone(),
            summary,
        };
        s.untold = 0;
        s.last_told = Some(now);
        told
    }
}

/// A warning told at most once per [`EVERY`] with the count of its occurrences
/// (`tracing::warn!`, the detail in the `error` field, the count in `times`).
#[derive(Debug)]
pub struct RepeatedWarning {
    text: &'static str,
    count: Repeated,
}

impl RepeatedWarning {
    /// The warning `text`, told at most once per [`EVERY`].
    pub const fn new(text: &'static str) -> RepeatedWarning {
        RepeatedWarning {
            text,
            count: Repeated::new(EVERY),
        }
    }

    /// One occurrence with `detail`; logged now or counted for a later line.
    pub fn warn(&self, detail: &str) {
        if let Some(t) = self.count.note(Instant::now(), detail) {
            self.write(&t);
        }
    }

    /// Logs the count of the occurrences not told yet, once the interval has passed.
    pub fn flush(&self) {
        if let Some(t) = self.count.flush(Instant::now()) {
            self.write(&t);
        }
    }

    fn write(&self, t: &Told) {
        tracing::warn!(error = %t.detail, times = t.times, "{}{}", self.text, t.suffix());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_is_told_at_once_and_the_rest_once_per_interval_with_a_count() {
        let r = Repeated::new(10 * S);
        let t0 = Instant::now();
        let first = r.note(t0, "down").unwrap();
        assert_eq!((first.times, first.summary), (1, false));
        assert_eq!(first.suffix(), "");
        // Within the interval: counted, not told; flushing early tells nothing.
        for i in 1..=5 {
            assert_eq!(r.note(t0 + i * S, "down"), None);
        }
        assert_eq!(r.flush(t0 + 9 * S), None);
        // The flush after the interval tells the five with the last detail.
        let t = r.flush(t0 + 10 * S).unwrap();
        assert_eq!(t.times, 5);
        assert_eq!(t.over, 10 * S);
        assert_eq!(t.suffix(), " (5 times in the last 10 s)");
        assert_eq!(r.flush(t0 + 30 * S), None, "nothing left to tell");
    }

    #[test]
    fn an_occurrence_after_the_interval_tells_those_counted_before_it() {
        let r = Repeated::new(10 * S);
        let t0 = Instant::now();
        r.note(t0, "a");
        assert_eq!(r.note(t0 + 2 * S, "b"), None);
        let t = r.note(t0 + 12 * S, "c").unwrap();
        assert_eq!(t.times, 2);
        assert_eq!(t.detail, "c");
        assert_eq!(t.suffix(), " (2 times in the last 12 s)");
        // A lone occurrence after a quiet interval is told as it comes.
        let t = r.note(t0 + 60 * S, "d").unwrap();
        assert_eq!((t.times, t.suffix()), (1, String::new()));
    }

    #[test]
    fn a_single_counted_occurrence_is_told_as_one() {
        let r = Repeated::new(10 * S);
        let t0 = Instant::now();
        r.note(t0, "x");
        r.note(t0 + S, "x");
        let t = r.flush(t0 + 10 * S + S / 2).unwrap();
        assert_eq!(t.suffix(), " (1 time in the last 10 s)");
    }

    #[test]
    fn every_occurrence_is_in_exactly_one_line() {
        let r = Repeated::new(10 * S);
        let t0 = Instant::now();
        let mut told = 0;
        // 1000 occurrences over 100 s, with a flush each second.
        for ms in 0..1000u64 {
            let now = t0 + Duration::from_millis(ms * 100);
            told += r.note(now, "e").map_or(0, |t| t.times);
            if ms % 10 == 0 {
                told += r.flush(now).map_or(0, |t| t.times);
            }
        }
        told += r.flush(t0 + 200 * S).map_or(0, |t| t.times);
        assert_eq!(told, 1000);
    }

    #[test]
    fn a_warning_with_nothing_to_tell_writes_nothing() {
        let w = RepeatedWarning::new("test warning");
        w.flush();
        w.warn("once");
        // Within the interval: counted.
        w.warn("twice");
        let s = w.count.state.lock().unwrap();
        assert_eq!((s.untold, s.detail.as_str()), (1, "twice"));
    }
}
