//! Lock-free counters for the metrics registry: relaxed atomics, sharded by thread so that
//! the worker threads never write the same cache line.
//!
//! A [`Counter`] is a row of cache-line-padded slots; each thread adds to the slot of its
//! own (thread-local) index and a scrape sums the row. Relaxed ordering is enough: a
//! scrape only needs every increment to show up eventually, not an order between them.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Slots per counter (a power of two; more threads than slots share slots, still exact).
const SLOTS: usize = 8;

/// One slot on its own cache line.
#[derive(Default)]
#[repr(align(64))]
struct Slot(AtomicU64);

thread_local! {
    /// This thread's slot index, handed out round-robin on first use.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

static NEXT_SLOT: AtomicU64 = AtomicU64::new(0);

fn slot() -> usize {
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = (NEXT_SLOT.fetch_add(1, Ordering::Relaxed) as usize) % SLOTS;
        s.set(v);
        v
    })
}

/// A monotonically increasing count.
#[derive(Default)]
pub struct Counter {
    slots: [Slot; SLOTS],
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counter({})", self.get())
    }
}

impl Counter {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.slots[slot()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current total.
    pub fn get(&self) -> u64 {
        self.slots
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// A value that goes up and down (sessions open).
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one away.
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the value (a gauge read from elsewhere, such as the hold spool).
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
}

/// Upper bounds of the decision-latency buckets, in seconds (`+Inf` is implicit).
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25,
];

/// A latency histogram with the fixed buckets of [`LATENCY_BUCKETS`].
#[derive(Default)]
pub struct Histogram {
    /// Non-cumulative counts: one per bound, then the overflow.
    buckets: [Counter; LATENCY_BUCKETS.len() + 1],
    /// Sum of observations in nanoseconds.
    sum_ns: Counter,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (cum, count, sum) = self.snapshot();
        f.debug_struct("Histogram")
            .field("cumulative", &cum)
            .field("count", &count)
            .field("sum_secs", &sum)
            .finish()
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].inc();
        self.sum_ns
            .add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Cumulative bucket counts (one per bound), the total count and the sum in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, u64, f64) {
        let mut acc = 0u64;
        let mut cum = Vec::with_capacity(LATENCY_BUCKETS.len());
        for b in &self.buckets[..LATENCY_BUCKETS.len()] {
            acc += b.get();
            cum.push(acc);
        }
        let count = acc + self.buckets[LATENCY_BUCKETS.len()].get();
        (cum, count, self.sum_ns.get() as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_sums_over_threads() {
        let c = std::sync::Arc::new(Counter::default());
        let hs: Vec<_> = (0..12)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.inc();
                    }
                    c.add(5);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.get(), 12 * 1005);
    }

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_nanos(5_000)); // first bucket
        h.observe(Duration::from_micros(300)); // 0.0005
        h.observe(Duration::from_secs(3)); // overflow
        let (cum, count, sum) = h.snapshot();
        assert_eq!(count, 3);
        assert_eq!(cum[0], 1);
        assert_eq!(cum[4], 1);
        assert_eq!(cum[5], 2);
        assert_eq!(*cum.last().unwrap(), 2);
        assert!((sum - 3.000305).abs() < 1e-9);
    }

    #[test]
    fn gauge_goes_both_ways() {
        let g = Gauge::default();
        g.inc();
        g.inc();
        g.dec();
        assert_eq!(g.get(), 1);
    }
}
