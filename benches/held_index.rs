//! The hold spool at size: 10,000 held messages, 1,000 of them held for one key and the
//! others spread over 9,000 keys, as the incident page and the Held page filtered by key
//! read them.
//!
//! * `index by key`: the key's envelopes from the spool's index (one listing of the
//!   directory's names, then the 1,000 envelopes of the key), and its count;
//! * `count for a key`: the count of a key with one message (what the restriction notices
//!   and listings read);
//! * `every envelope read`: the way a key's messages were found before the index, every
//!   file's envelope read and filtered (for comparison).
//!
//! Run: `cargo bench --bench held_index -- --warm-up-time 1 --measurement-time 5`

use criterion::{criterion_group, Criterion};
use floodgate::hold::{HeldEnvelope, HeldMessage, HoldSettings, OnExpiry, Spool};
use floodgate::metrics::Counter;
use std::hint::black_box;
use std::time::Duration;

const HELD: u32 = 10_000;
const OF_THE_KEY: u32 = 1_000;

fn envelope(i: u32) -> HeldEnvelope {
    let key = if i % (HELD / OF_THE_KEY) == 0 {
        "k.harper".to_string()
    } else {
        format!("user{i:06}")
    };
    HeldEnvelope {
        id: floodgate::hold::spool::new_id(),
        key: key.clone(),
        limit: "per-user".into(),
        paced: None,
        time: floodgate::hold::spool::now_secs(),
        client: "192.0.2.1:5000".parse().unwrap(),
        local: None,
        name: None,
        reverse_name: None,
        user: Some(key),
        helo: Some("client.test".into()),
        proto: "ESMTP".into(),
        tls: None,
        mail: "<a@example.org>".into(),
        rcpts: (0..25).map(|r| format!("<r{r}@example.net>")).collect(),
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::TempDir::new().unwrap();
    let spool_dir = dir.path().join("hold");
    std::fs::create_dir(&spool_dir).unwrap();
    std::fs::set_permissions(
        &spool_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    for i in 0..HELD {
        let body = format!("Subject: message {i}\r\nFrom: a@example.org\r\n\r\nhello\r\n");
        let m = HeldMessage::new(envelope(i), body.into_bytes());
        let path = spool_dir.join(format!("{}.held", m.envelope.id));
        std::fs::write(path, m.encode()).unwrap();
    }
    let settings = HoldSettings {
        dir: spool_dir,
        max_bytes: 1 << 32,
        max_messages: 20_000,
        ttl: Duration::from_secs(86_400),
        on_expiry: OnExpiry::Delete,
    };
    let spool = Spool::open(settings, Counter::default()).unwrap();
    // The first read indexes every file once.
    assert_eq!(spool.count_for("k.harper").unwrap(), u64::from(OF_THE_KEY));
    let mut g = c.benchmark_group("held_index");
    g.sample_size(20);
    g.bench_function("index by key (1,000 of 10,000 held)", |b| {
        b.iter(|| {
            let heads = spool.of_keys(&[black_box("k.harper")]).unwrap();
            assert_eq!(heads.len(), OF_THE_KEY as usize);
            black_box(heads);
        })
    });
    g.bench_function("count for a key (of 10,000 held)", |b| {
        b.iter(|| black_box(spool.count_for(black_box("user000001")).unwrap()))
    });
    g.bench_function("every envelope read (10,000 held)", |b| {
        b.iter(|| {
            let mut n = 0;
            for (id, _) in spool.ids().unwrap() {
                if spool.head(&id).unwrap().envelope.key == "k.harper" {
                    n += 1;
                }
            }
            assert_eq!(n, OF_THE_KEY);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    // Under `cargo test` (no `--bench`) the benchmark does not run.
    if std::env::args().any(|a| a == "--bench") {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
