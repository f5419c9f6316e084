//! Criterion benchmarks of one limit decision in the memory store, at 1 000
//! and 1 000 000 live keys, from one and from two threads; plus the heap
//! bytes per EWMA key, measured with a counting global allocator.
//!
//! What is measured: the caller builds the key text in its own buffer (as
//! the proxy does with `LimitSpec::database_key`), so the text is in cache;
//! the store then hashes it, locks a shard, finds and updates the record.
//! `key-fetch-only` is that key building alone (the bench's overhead).
//! `baseline` is the memory floor on this machine: one random read-modify-
//! write in a flat 1 M x 32-byte array (independent accesses, which the
//! CPU overlaps, and dependent ones, which it cannot) and in a
//! `HashMap<u128, [u8; 32]>`.
//!
//! Run: `cargo bench --bench engine -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::{
    Algorithm, Decision, DecisionResult, LimitRequest, MemoryConfig, MemoryStore,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::fmt::Write as _;
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

fn key_text(out: &mut String, i: usize) {
    out.clear();
    // Cannot fail: writing to a String.
    let _ = write!(out, "1h/per_rcpt/user{i}@example.com");
}

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut s = String::new();
            key_text(&mut s, i);
            s
        })
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

/// xorshift64: uniformly random keys defeat the CPU cache (worst case).
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Runs `iters` decisions on random keys among the first `active` of
/// `n` live keys (`decide = false`: only the key text building, to
/// measure the bench's own overhead); returns the elapsed time.
fn run(
    store: &MemoryStore,
    n: usize,
    active: usize,
    iters: u64,
    seed: u64,
    decide: bool,
) -> Duration {
    let mut d = decision(String::with_capacity(64));
    let mut out = DecisionResult::default();
    let mut x = seed | 1;
    let n = active.min(n) as u64;
    let start = Instant::now();
    for i in 0..iters {
        let k = (next(&mut x) % n) as usize;
        key_text(&mut d.limits[0].key, k);
        if decide {
            store.decide_into(T0 + 10_000_000 + i as i64, black_box(&d), &mut out);
            black_box(&out);
        } else {
            black_box(&d);
        }
    }
    start.elapsed()
}

/// The memory floor: `iters` random read-modify-writes of a 32-byte record
/// in a flat array of `n` records.
fn run_flat(table: &mut [[u64; 4]], iters: u64) -> Duration {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let n = table.len() as u64;
    let start = Instant::now();
    for _ in 0..iters {
        let r = &mut table[(next(&mut x) % n) as usize];
        r[0] = r[0].wrapping_add(1);
        black_box(&*r);
    }
    start.elapsed()
}

/// Like [`run_flat`], but each index also depends on the value read by the
/// previous access, so the CPU cannot overlap the misses of consecutive
/// accesses: the latency of one random access, the floor of one decision
/// (a decision runs a few hundred instructions between its misses, too
/// many to overlap the next decision's miss).
fn run_flat_dependent(table: &mut [[u64; 4]], iters: u64) -> Duration {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let n = table.len() as u64;
    let mut prev = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        let rec = &mut table[((next(&mut x) ^ prev) % n) as usize];
        rec[0] = rec[0].wrapping_add(1);
        prev = rec[0] & 1;
    }
    black_box(prev);
    start.elapsed()
}

/// A random-looking 128-bit id of index `i` (splitmix64 twice).
fn id_of(i: u64) -> u128 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (u128::from(mix(i)) << 64) | u128::from(mix(i ^ 0x5555_5555_5555_5555))
}

/// A bare hash-table floor: random read-modify-writes in a
/// `HashMap<u128, [u8; 32]>` keyed by precomputed random ids (no key text,
/// no hashing of text, no lock).
fn run_map(map: &mut HashMap<u128, [u8; 32]>, iters: u64) -> Duration {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let n = map.len() as u64;
    let start = Instant::now();
    for _ in 0..iters {
        // The id is computed from the index (no read of an id array), so
        // only the table's memory is touched.
        let id = id_of(next(&mut x) % n);
        if let Some(v) = map.get_mut(&id) {
            v[0] = v[0].wrapping_add(1);
            black_box(&*v);
        }
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
    let mut base = c.benchmark_group("baseline");
    for n in [1_000usize, 1_000_000] {
        let mut flat = vec![[0u64; 4]; n];
        base.bench_with_input(BenchmarkId::new("flat-array-rmw", n), &n, |b, _| {
            b.iter_custom(|iters| run_flat(&mut flat, iters))
        });
        base.bench_with_input(
            BenchmarkId::new("flat-array-rmw-dependent", n),
            &n,
            |b, _| b.iter_custom(|iters| run_flat_dependent(&mut flat, iters)),
        );
        drop(flat);
        let mut map: HashMap<u128, [u8; 32]> =
            (0..n as u64).map(|i| (id_of(i), [0u8; 32])).collect();
        base.bench_with_input(BenchmarkId::new("hashmap-u128-rmw", n), &n, |b, _| {
            b.iter_custom(|iters| run_map(&mut map, iters))
        });
    }
    base.finish();
    let mut group = c.benchmark_group("decision");
    for n in [1_000usize, 1_000_000] {
        let ks = keys(n);
        let store = populated(&ks);
        drop(ks);
        group.bench_with_input(BenchmarkId::new("1-thread", n), &n, |b, _| {
            b.iter_custom(|iters| run(&store, n, n, iters, 0x9e37_79b9_7f4a_7c15, true))
        });
        group.bench_with_input(BenchmarkId::new("key-fetch-only", n), &n, |b, _| {
            b.iter_custom(|iters| run(&store, n, n, iters, 0x9e37_79b9_7f4a_7c15, false))
        });
        if n > 10_000 {
            // All keys live, traffic on a hot set of 10 000 (active senders).
            group.bench_with_input(BenchmarkId::new("1-thread-hot-10k", n), &n, |b, _| {
                b.iter_custom(|iters| run(&store, n, 10_000, iters, 0x9e37_79b9_7f4a_7c15, true))
            });
        }
        // Two threads on random keys of the whole set, sharing the store:
        // the time reported is per decision per thread (latency under
        // contention; the machine has two cores shared with other work).
        group.bench_with_input(BenchmarkId::new("2-threads", n), &n, |b, _| {
            b.iter_custom(|iters| {
                std::thread::scope(|s| {
                    let a = s.spawn(|| run(&store, n, n, iters, 0x1234_5678_9abc_def1, true));
                    let b = s.spawn(|| run(&store, n, n, iters, 0x0fed_cba9_8765_4321, true));
                    a.join().unwrap().max(b.join().unwrap())
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
