//! Lock-free storage for counters and the latency histogram: relaxed atomics, sharded by
//! thread so that the worker threads never write the same cache line.
//!
//! A [`Sharded`] value is a row of cache-line-padded slots; each thread adds to the slot of
//! its own (thread-local) index and a scrape sums the row. Relaxed ordering is enough: a
//! scrape only needs every increment to show up eventually, not an order between them.
//! [`Sharded`] is the storage of the registry's counters
//! (`prometheus_client::metrics::counter::Counter<u64, Sharded>`).

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Atomic;

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

/// A monotonically increasing count, one slot per thread group.
#[derive(Default)]
pub struct Sharded {
    slots: [Slot; SLOTS],
}

impl std::fmt::Debug for Sharded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sharded({})", self.total())
    }
}

impl Sharded {
    /// Adds `n` to this thread's slot; returns the slot's value before the add.
    #[inline]
    fn add(&self, n: u64) -> u64 {
        self.slots[slot()].0.fetch_add(n, Ordering::Relaxed)
    }

    /// The sum of the slots.
    fn total(&self) -> u64 {
        self.slots
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// The storage of a counter. `inc` and `inc_by` return the value of this thread's slot
/// before the add, not the counter's total: summing the row on every add would read the
/// other threads' cache lines, which sharding exists to avoid. `get` is the total.
impl Atomic<u64> for Sharded {
    #[inline]
    fn inc(&self) -> u64 {
        self.add(1)
    }

    #[inline]
    fn inc_by(&self, v: u64) -> u64 {
        self.add(v)
    }

    fn get(&self) -> u64 {
        self.total()
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
    buckets: [Sharded; LATENCY_BUCKETS.len() + 1],
    /// Sum of observations in nanoseconds.
    sum_ns: Sharded,
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
        self.buckets[i].add(1);
        self.sum_ns
            .add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Cumulative bucket counts (one per bound), the total count and the sum in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, u64, f64) {
        let mut acc = 0u64;
        let mut cum = Vec::with_capacity(LATENCY_BUCKETS.len());
        for b in &self.buckets[..LATENCY_BUCKETS.len()] {
            acc += b.total();
            cum.push(acc);
        }
        let count = acc + self.buckets[LATENCY_BUCKETS.len()].total();
        (cum, count, self.sum_ns.total() as f64 / 1e9)
    }

    /// Appends the histogram in the Prometheus text format as family `name`.
    ///
    /// Written here rather than by `prometheus_client`'s histogram encoder: that one prints
    /// bounds below 1e-4 in Go's exponent form (`le="5e-05"`), which would rename three of
    /// these series, exported since the first release as `le="0.00005"` and so on.
    pub fn write_text(&self, out: &mut String, name: &str, help: &str) {
        let (cum, count, sum) = self.snapshot();
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (bound, n) in LATENCY_BUCKETS.iter().zip(&cum) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_sums_over_threads() {
        let c = std::sync::Arc::new(
            prometheus_client::metrics::counter::Counter::<u64, Sharded>::default(),
        );
        let hs: Vec<_> = (0..12)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.inc();
                    }
                    c.inc_by(5);
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
    fn histogram_text_keeps_decimal_bounds() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(30));
        let mut t = String::new();
        h.write_text(&mut t, "x_seconds", "Latency.");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "# HELP x_seconds Latency.");
        assert_eq!(lines[1], "# TYPE x_seconds histogram");
        assert_eq!(lines[2], "x_seconds_bucket{le=\"0.00001\"} 0");
        assert_eq!(lines[4], "x_seconds_bucket{le=\"0.00005\"} 1");
        assert_eq!(lines[15], "x_seconds_bucket{le=\"0.25\"} 1");
        assert_eq!(lines[16], "x_seconds_bucket{le=\"+Inf\"} 1");
        assert_eq!(lines[17], "x_seconds_sum 0.00003");
        assert_eq!(lines[18], "x_seconds_count 1");
        assert_eq!(lines.len(), 19);
    }
}
