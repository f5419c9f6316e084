//! Criterion benchmarks of the ledger of Postfix's hold queue at 10 000 held messages (500
//! keys of 20 each): what the console's key page and the evidence ask (`for_key`,
//! `count_for_key`), a record and its end (one line appended each), and opening (reading and
//! compacting) the file.
//!
//! Run: `cargo bench --bench postfix_ledger -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate::hold::postfix::{Done, How, Ledger, LedgerEntry};

const HELD: u64 = 10_000;
const KEYS: u64 = 500;

fn entry(i: u64) -> LedgerEntry {
    LedgerEntry {
        queue_id: format!("Q{i:09}"),
        key: format!("user{}", i % KEYS),
        limit: "per-user".into(),
        reason: "4.7.1 user sends too fast".into(),
        time: 1_764_000_000 + i,
        sender: format!("user{}@example.org", i % KEYS),
        recipients: vec!["bob@example.net".into(), "carol@example.com".into()],
        size: 4096,
        client: Some("192.0.2.7".parse().unwrap()),
        user: Some(format!("user{}", i % KEYS)),
    }
}

fn ledger(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postfix-held");
    let l = Ledger::open(&path, 1_000_000).unwrap();
    for i in 0..HELD {
        l.record(entry(i)).unwrap();
    }
    c.bench_function("ledger/for_key_10k", |b| {
        b.iter(|| black_box(l.for_key(black_box("user7"))))
    });
    c.bench_function("ledger/count_for_key_10k", |b| {
        b.iter(|| black_box(l.count_for_key(black_box("user7"))))
    });
    let mut next = HELD;
    c.bench_function("ledger/record_and_finish", |b| {
        b.iter(|| {
            let e = entry(next);
            let id = e.queue_id.clone();
            l.record(e).unwrap();
            l.finish(Done {
                queue_id: id,
                how: How::Deleted,
                time: 1_764_100_000,
                by: None,
            })
            .unwrap();
            next += 1;
        })
    });
    drop(l);
    c.bench_function("ledger/open_10k", |b| {
        b.iter(|| black_box(Ledger::open(&path, 1_000_000).unwrap()))
    });
}

criterion_group!(benches, ledger);
criterion_main!(benches);
