//! Criterion benchmarks of what a `baseline` adds to a transaction: the same per-user GCRA
//! limit on messages (checked at MAIL FROM, upstream's 250 then reported) with and without
//! a baseline, over 10 000 users whose baselines are all computed (the baseline variant
//! reads the key's set on every check). The limits are high enough that no check is over,
//! so both take the same path through the engine and the store. `baseline/lookup` is the
//! per-key lookup alone.
//!
//! Run: `cargo bench --bench baseline -- --warm-up-time 1 --measurement-time 3`

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate::generation::Generation;
use floodgate::policy::{Facts, Policy, RatePolicy, Stage};
use floodgate::smtp::reply::Reply;
use floodgate::store::{BaselineSet, MemoryStore};

const USERS: usize = 10_000;

fn config(baseline: bool) -> Generation {
    let extra = if baseline {
        "baseline = \"p95 / 14d\"\nfactor = 5\nfloor = 1000000\n"
    } else {
        ""
    };
    let text = format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
[report]
events = "/nonexistent/floodgate-bench-events.jsonl"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "1000000 / 1d"
burst = "1000000"
{extra}"#
    );
    Generation::parse(Path::new("/etc/floodgate/bench.toml"), &text).expect("bench config")
}

fn user(i: usize) -> String {
    format!("user{i}@example.org")
}

fn facts() -> Vec<Facts> {
    (0..USERS)
        .map(|i| Facts {
            client_ip: Some("192.0.2.7".parse().expect("ip")),
            listener: "submission".into(),
            user: Some(user(i)),
            sender: Some(user(i)),
            ..Facts::default()
        })
        .collect()
}

fn with_history(config: &Generation) {
    let def = config.policy.limits[0]
        .baseline
        .clone()
        .expect("a baseline");
    let peaks: HashMap<String, f64> = (0..USERS).map(|i| (user(i), 1_000_000.0)).collect();
    config.policy.baselines.put(
        "per-user",
        Arc::new(BaselineSet {
            signature: def.signature().to_string(),
            computed_us: 0,
            peaks,
        }),
    );
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let all = facts();
    let ok = Reply::new(250, "2.1.0 ok");
    for baseline in [false, true] {
        let config = config(baseline);
        if baseline {
            with_history(&config);
        }
        let policy = RatePolicy::new(config.policy.clone(), Arc::new(MemoryStore::default()));
        let mut session = policy.session();
        let mut i = 0;
        let name = if baseline {
            "transaction/with-baseline"
        } else {
            "transaction/plain"
        };
        c.bench_function(name, |b| {
            b.iter(|| {
                let f = &all[i % USERS];
                i += 1;
                rt.block_on(async {
                    let v = session.check(Stage::Mail, f).await;
                    session.after_upstream(Stage::Mail, f, &ok).await;
                    black_box(v)
                })
            })
        });
    }
    let config = config(true);
    with_history(&config);
    let def = config.policy.limits[0]
        .baseline
        .clone()
        .expect("a baseline");
    let keys: Vec<String> = (0..USERS).map(user).collect();
    let mut i = 0;
    c.bench_function("baseline/lookup", |b| {
        b.iter(|| {
            i += 1;
            black_box(
                config
                    .policy
                    .baselines
                    .limit("per-user", &def, &keys[i % USERS]),
            )
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
