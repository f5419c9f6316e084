//! Criterion benchmarks of one limit decision in the memory store, at 1 000
//! and 1 000 000 live keys, from one and from two threads; plus the heap
//! bytes per EWMA key, measured with a counting global allocator.
//!
//! Run: `cargo bench --bench engine -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::{Algorithm, Decision, LimitRequest, MemoryConfig, MemoryStore};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

/// Counts live heap bytes (requested sizes) so that bytes per key can be measured.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const T0: i64 = 1_750_000_000_000_000;

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("1h/per_rcpt/user{i}@example.com"))
        .collect()
}

fn decision(key: String) -> Decision {
    Decision {
        limits: vec![LimitRequest {
            key,
            algorithm: Algorithm::Ewma {
                // High enough that every decision stores (the costly path).
                limit: 1e12,
                period_secs: 3600,
                mode: UpdateMode::Leaky,
                unique_kind: UniqueKind::Bloom,
            },
            count: 1.0,
            unique: None,
            blocking: true,
        }],
    }
}

fn populated(keys: &[String]) -> MemoryStore {
    let store = MemoryStore::new(MemoryConfig {
        max_keys: 4_000_000,
        ..MemoryConfig::default()
    });
    let mut d = decision(String::new());
    for (i, k) in keys.iter().enumerate() {
        d.limits[0].key.clone_from(k);
        store.decide_at(T0 + i as i64, &d);
    }
    store
}

/// Runs `iters` decisions on random keys among the first `active` of
/// `keys` (`decide = false`: only the key handling, to measure the bench's
/// own overhead); returns the elapsed time.
fn run(
    store: &MemoryStore,
    keys: &mut [String],
    active: usize,
    iters: u64,
    seed: u64,
    decide: bool,
) -> Duration {
    let mut d = decision(String::new());
    let mut x = seed | 1;
    let n = active.min(keys.len()) as u64;
    let start = Instant::now();
    for i in 0..iters {
        // xorshift64: uniformly random keys defeat the CPU cache (worst case).
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (x % n) as usize;
        std::mem::swap(&mut d.limits[0].key, &mut keys[k]);
        if decide {
            black_box(store.decide_at(T0 + 10_000_000 + i as i64, black_box(&d)));
        } else {
            black_box(&d);
        }
        std::mem::swap(&mut d.limits[0].key, &mut keys[k]);
    }
    start.elapsed()
}

fn bytes_per_key(n: usize) -> (f64, f64) {
    let ks = keys(n);
    let text: usize = ks.iter().map(String::len).sum();
    let before = LIVE.load(Ordering::Relaxed);
    let store = populated(&ks);
    let after = LIVE.load(Ordering::Relaxed);
    let per_key = (after - before) as f64 / n as f64;
    let beyond_text = (after - before - text as isize) as f64 / n as f64;
    drop(store);
    (per_key, beyond_text)
}

fn bench(c: &mut Criterion) {
    for n in [1_000usize, 1_000_000] {
        let (all, beyond) = bytes_per_key(n);
        println!("bytes per EWMA key at {n} keys: {all:.1} total, {beyond:.1} beyond the key text");
    }
    let mut group = c.benchmark_group("decision");
    for n in [1_000usize, 1_000_000] {
        let mut ks = keys(n);
        let store = populated(&ks);
        group.bench_with_input(BenchmarkId::new("1-thread", n), &n, |b, _| {
            b.iter_custom(|iters| run(&store, &mut ks, n, iters, 0x9e37_79b9_7f4a_7c15, true))
        });
        group.bench_with_input(BenchmarkId::new("key-fetch-only", n), &n, |b, _| {
            b.iter_custom(|iters| run(&store, &mut ks, n, iters, 0x9e37_79b9_7f4a_7c15, false))
        });
        if n > 10_000 {
            // All keys live, traffic on a hot set of 10 000 (active senders).
            group.bench_with_input(BenchmarkId::new("1-thread-hot-10k", n), &n, |b, _| {
                b.iter_custom(|iters| {
                    run(&store, &mut ks, 10_000, iters, 0x9e37_79b9_7f4a_7c15, true)
                })
            });
        }
        // Two threads, each on its own half of the keys, sharing the store:
        // the time reported is per decision per thread (latency under contention).
        group.bench_with_input(BenchmarkId::new("2-threads", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let (lo, hi) = ks.split_at_mut(n / 2);
                std::thread::scope(|s| {
                    let a =
                        s.spawn(|| run(&store, lo, usize::MAX, iters, 0x1234_5678_9abc_def1, true));
                    let b =
                        s.spawn(|| run(&store, hi, usize::MAX, iters, 0x0fed_cba9_8765_4321, true));
                    a.join().unwrap().max(b.join().unwrap())
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
