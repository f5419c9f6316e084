//! The time one message's keys may take: a deadline on a clock the caller gives, read once
//! every [`CHECK_EVERY`] steps of work so that the long loops (HTML reduction, words,
//! links) can ask at every step for the price of an addition.
//!
//! A step is a unit of work of about the same cost everywhere it is counted: a word, a tag,
//! a link, a line, or 64 octets of text scanned. The clock is the caller's (the CPU time of
//! the computing thread in a running floodgate): this module reads no clock of its own.

use std::time::Duration;

/// Steps between two readings of the clock.
pub const CHECK_EVERY: u32 = 1024;

/// Octets of text scanned that count as one step.
pub const OCTETS_PER_STEP: usize = 64;

/// A clock: the time elapsed since some fixed origin (any origin, as long as it is the same
/// at every reading).
pub type Clock = fn() -> Duration;

/// What one message's keys may still spend (see the module documentation).
#[derive(Debug, Clone)]
pub struct Budget {
    /// The clock and the reading past which the budget is spent; none: unlimited.
    deadline: Option<(Clock, Duration)>,
    /// Steps since the clock was last read.
    steps: u32,
    /// Whether the deadline was seen passed: every later ask is refused.
    spent: bool,
}

impl Budget {
    /// A budget that is never spent.
    pub fn unlimited() -> Budget {
        Budget {
            deadline: None,
            steps: 0,
            spent: false,
        }
    }

    /// A budget of `limit` from now, on `clock`.
    pub fn new(limit: Duration, clock: Clock) -> Budget {
        Budget {
            deadline: Some((clock, clock().saturating_add(limit))),
            steps: 0,
            spent: false,
        }
    }

    /// Counts `steps` of work about to be done: true while the budget allows it, false from
    /// the first reading of the clock past the deadline on.
    #[inline]
    pub fn spend(&mut self, steps: u32) -> bool {
        if self.spent {
            return false;
        }
        self.steps = self.steps.saturating_add(steps);
        if self.steps < CHECK_EVERY {
            return true;
        }
        self.steps = 0;
        self.check()
    }

    /// Counts the work of scanning `octets` of text (see [`OCTETS_PER_STEP`]).
    #[inline]
    pub fn spend_octets(&mut self, octets: usize) -> bool {
        let steps = octets / OCTETS_PER_STEP + 1;
        self.spend(u32::try_from(steps).unwrap_or(u32::MAX))
    }

    /// Reads the clock now, whatever the steps counted: true while the deadline is ahead.
    pub fn check(&mut self) -> bool {
        if let Some((clock, deadline)) = self.deadline {
            if clock() > deadline {
                self.spent = true;
            }
        }
        !self.spent
    }

    /// Whether the budget was found spent (the keys are then those finished before).
    pub fn exceeded(&self) -> bool {
        self.spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Each test's own clock (tests run on threads of their own).
        static NOW_MS: Cell<u64> = const { Cell::new(0) };
    }

    fn test_clock() -> Duration {
        Duration::from_millis(NOW_MS.get())
    }

    fn set_now(ms: u64) {
        NOW_MS.set(ms);
    }

    #[test]
    fn unlimited_is_never_spent() {
        let mut b = Budget::unlimited();
        for _ in 0..10 * CHECK_EVERY {
            assert!(b.spend(1));
        }
        assert!(b.spend(u32::MAX) && b.check() && !b.exceeded());
    }

    #[test]
    fn the_clock_is_read_every_check_every_steps_and_spent_stays_spent() {
        set_now(1_000);
        let mut b = Budget::new(Duration::from_millis(5), test_clock);
        set_now(1_006);
        // Not read before CHECK_EVERY steps: still allowed.
        for _ in 0..CHECK_EVERY - 1 {
            assert!(b.spend(1));
        }
        assert!(!b.exceeded());
        assert!(!b.spend(1), "the clock read at the CHECK_EVERY-th step");
        assert!(b.exceeded());
        set_now(1_000);
        assert!(!b.spend(1) && !b.check(), "spent stays spent");
    }

    #[test]
    fn octets_count_in_steps_of_64() {
        set_now(0);
        let mut b = Budget::new(Duration::from_secs(3600), test_clock);
        assert!(b.spend_octets(OCTETS_PER_STEP * (CHECK_EVERY as usize - 2)));
        assert_eq!(b.steps, CHECK_EVERY - 1);
        assert!(b.spend_octets(usize::MAX) && b.steps == 0);
    }
}
