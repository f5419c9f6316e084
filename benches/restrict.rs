//! Criterion benchmarks of the restricted-set check that every MAIL FROM pays, in the memory
//! store: an empty set (one atomic load), and a set of 10 000 restricted keys probed with a
//! session's candidate keys (its user and client address), missing and hitting. The
//! candidate keys are built inside the measured loop, as the policy builds them per MAIL.
//!
//! Run: `cargo bench --bench restrict -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate::store::{MemoryStore, Restriction, Store};
use std::hint::black_box;
use std::net::IpAddr;

const NOW: i64 = 1_750_000_000_000_000;

fn restriction(key: String) -> Restriction {
    Restriction {
        key,
        limit: "per-user".into(),
        since_us: 0,
        until_us: None,
        rate: Some(6.0),
        limit_text: "5 / 1h".into(),
        by: "bench".into(),
        reason: "bench".into(),
        evidence: serde_json::Value::Null,
    }
}

fn candidates(user: &str, ip: IpAddr) -> Vec<String> {
    vec![user.to_string(), ip.to_string()]
}

fn bench(c: &mut Criterion) {
    let ip: IpAddr = "192.0.2.77".parse().unwrap();
    let empty = MemoryStore::default();
    c.bench_function("restricted/empty-set", |b| {
        b.iter(|| black_box(empty.may_restrict()))
    });
    let full = MemoryStore::default();
    for i in 0..10_000 {
        full.restricted_set()
            .insert(restriction(format!("user{i}")), None, NOW);
    }
    c.bench_function("restricted/10k-set-miss", |b| {
        b.iter(|| {
            let keys = candidates(black_box("someone-else"), ip);
            black_box(full.may_restrict() && full.restricted_set().check(&keys, NOW).is_some())
        })
    });
    c.bench_function("restricted/10k-set-hit", |b| {
        b.iter(|| {
            let keys = candidates(black_box("user4242"), ip);
            black_box(full.restricted_set().check(&keys, NOW))
        })
    });
    c.bench_function("restricted/candidates-only", |b| {
        b.iter(|| black_box(candidates(black_box("someone-else"), ip)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
