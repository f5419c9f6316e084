//! The cost of the restricted-set check that every MAIL FROM pays, and how fast a
//! restriction reaches another node.
//!
//! * Criterion, memory store: an empty set (one atomic load), and a set of 10 000 restricted
//!   keys probed with a session's candidate keys (its user and client address), missing and
//!   hitting; the candidate keys are built inside the measured loop, as the policy builds
//!   them per MAIL. Then the MAIL stage's decision (an EWMA and a GCRA limit) alone and
//!   guarded by the check (`decide_unless_restricted`), each on one of 10 000 users.
//! * Redis (a local redis-server on a free loopback port), timed loops of one session:
//!   the decision alone, guarded (one script call), and the check as its own call before
//!   the decision (two round trips); ns per transaction. Then the time from a restriction
//!   sent by one node (its own store and connection) to the first MAIL FROM refused on
//!   another node that loops on guarded decisions.
//!
//! Run: `cargo bench --bench restrict -- --warm-up-time 1 --measurement-time 3`
//! (under `cargo test` the Redis part runs a short smoke of the same code).

#[path = "../tests/common/redis.rs"]
mod redis_server;

use criterion::{criterion_group, Criterion};
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::redis::{ConnectOptions, RedisOptions, RedisStore};
use floodgate::store::{
    Algorithm, Decision, Guarded, LimitRequest, MemoryStore, Restriction, Store,
};
use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    // The MAIL stage's decision alone, and guarded by the check (10 000 keys restricted).
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut user = 0u64;
    let plain = MemoryStore::default();
    c.bench_function("mail/memory-decision", |b| {
        b.iter(|| {
            user = (user + 104_729) % 10_000;
            let d = decision(user);
            black_box(rt.block_on(plain.decide(&d)).unwrap())
        })
    });
    c.bench_function("mail/memory-decision-guarded", |b| {
        b.iter(|| {
            user = (user + 104_729) % 10_000;
            let d = decision(user);
            let keys = candidates(&format!("someone{user}"), ip);
            black_box(
                rt.block_on(full.decide_unless_restricted(&keys, &d))
                    .unwrap(),
            )
        })
    });
}

criterion_group!(benches, bench);

/// The MAIL stage's decision of `user`: an Exim EWMA and a GCRA quota (never over).
fn decision(user: u64) -> Decision {
    Decision {
        limits: vec![
            LimitRequest {
                key: format!("1h/per_mail/user{user}"),
                algorithm: Algorithm::Ewma {
                    limit: 1e9,
                    period_secs: 3600,
                    mode: UpdateMode::Leaky,
                    unique_kind: UniqueKind::Bloom,
                },
                count: 1.0,
                unique: None,
                blocking: true,
            },
            LimitRequest {
                key: format!("1d/per_mail/user{user}"),
                algorithm: Algorithm::Gcra(
                    GcraSpec::new(1e6, Rate::new(1e6, 86400.0).unwrap()).unwrap(),
                ),
                count: 1.0,
                unique: None,
                blocking: true,
            },
        ],
    }
}

fn redis_store(url: &str) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::new(RedisOptions {
            connect: ConnectOptions {
                url: Some(url.to_string()),
                connect_timeout: Duration::from_secs(2),
                ..Default::default()
            },
            timeout: Duration::from_secs(2),
            ..Default::default()
        })
        .unwrap(),
    )
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[derive(Clone, Copy)]
enum Way {
    /// The decision only (no restricted set).
    Decision,
    /// Check and decision in one script call.
    Guarded,
    /// The check, then the decision: two calls.
    Separate,
}

/// `n` sequential MAIL FROMs on one connection: the time of each, µs, and the whole.
async fn mail_loop(store: &RedisStore, way: Way, n: usize) -> (Vec<u64>, Duration) {
    let ip: IpAddr = "192.0.2.77".parse().unwrap();
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    let mut user = 0u64;
    for _ in 0..n {
        user = (user + 104_729) % 10_000;
        let d = decision(user);
        let t = Instant::now();
        match way {
            Way::Decision => {
                store.decide_at(None, &d).await.unwrap();
            }
            Way::Guarded => {
                let keys = candidates(&format!("someone{user}"), ip);
                let g = store.decide_guarded(&keys, &d).await.unwrap();
                assert!(matches!(g, Guarded::Decided(_)));
            }
            Way::Separate => {
                let keys = candidates(&format!("someone{user}"), ip);
                assert!(store.restricted_keys(&keys).await.unwrap().is_none());
                store.decide_at(None, &d).await.unwrap();
            }
        }
        lat.push(t.elapsed().as_micros() as u64);
    }
    (lat, start.elapsed())
}

/// Microseconds Redis spent in scripts since the last `CONFIG RESETSTAT`.
fn script_usec(port: u16) -> f64 {
    let stats = redis_server::raw_command(port, "INFO commandstats").unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum()
}

/// Time from node A sending a restriction to node B's first refused MAIL FROM, `reps`
/// times; µs, sorted.
async fn propagation(a: Arc<RedisStore>, b: Arc<RedisStore>, reps: usize) -> Vec<u64> {
    let victim = vec!["victim".to_string()];
    let mut out = Vec::with_capacity(reps);
    for i in 0..reps {
        a.release_key("victim").await.unwrap();
        let ready = Arc::new(tokio::sync::Notify::new());
        let (bb, keys, go) = (b.clone(), victim.clone(), ready.clone());
        let poller = tokio::spawn(async move {
            go.notify_one();
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut user = 0u64;
            loop {
                user += 1;
                let d = decision(user % 10_000);
                if let Guarded::Restricted(_) = bb.decide_guarded(&keys, &d).await.unwrap() {
                    return Some(Instant::now());
                }
                if Instant::now() > deadline {
                    return None;
                }
            }
        });
        ready.notified().await;
        // Let B be somewhere in its loop.
        tokio::time::sleep(Duration::from_micros(200 + (i as u64 * 37) % 800)).await;
        let t0 = Instant::now();
        a.restrict_key(&restriction("victim".into()), None)
            .await
            .unwrap();
        let t1 = poller.await.unwrap().expect("B saw the restriction");
        out.push(t1.saturating_duration_since(t0).as_micros() as u64);
    }
    out.sort_unstable();
    out
}

fn redis_part(bench: bool) {
    let (n, reps) = if bench { (20_000, 300) } else { (200, 5) };
    let server = redis_server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let store = redis_store(&server.url());
    rt.block_on(async {
        for i in 0..1_000 {
            store
                .restrict_key(&restriction(format!("user{i}")), None)
                .await
                .unwrap();
        }
        // Warm up: connect and load the scripts.
        for way in [Way::Decision, Way::Guarded, Way::Separate] {
            mail_loop(&store, way, 200).await;
        }
    });
    println!("redis: one session's MAIL FROMs, 1 000 keys restricted, none of the senders");
    // The three ways in rounds, the order turning each round, so that load from elsewhere
    // on the machine falls on all three alike.
    let ways = [
        ("decision only", Way::Decision),
        ("guarded (one call)", Way::Guarded),
        ("check, then decision", Way::Separate),
    ];
    let rounds = 10;
    let mut lat: [Vec<u64>; 3] = Default::default();
    let mut wall = [Duration::ZERO; 3];
    let mut server_us = [0f64; 3];
    for round in 0..rounds {
        for k in 0..3 {
            let w = (round + k) % 3;
            let _ = redis_server::raw_command(server.port, "CONFIG RESETSTAT");
            let (l, t) = rt.block_on(mail_loop(&store, ways[w].1, n / rounds));
            server_us[w] += script_usec(server.port);
            lat[w].extend(l);
            wall[w] += t;
        }
    }
    if std::env::var_os("RESTRICT_BENCH_STATS").is_some() {
        let _ = redis_server::raw_command(server.port, "CONFIG RESETSTAT");
        rt.block_on(mail_loop(&store, Way::Guarded, 100));
        println!(
            "{}",
            redis_server::raw_command(server.port, "INFO commandstats").unwrap_or_default()
        );
    }
    println!("way                         ns/txn    p50 us  p99 us  server us/txn  (n)");
    for w in 0..3 {
        let n = lat[w].len();
        lat[w].sort_unstable();
        println!(
            "{:<26} {:>8.0}  {:>7}  {:>6}  {:>13.1}  ({n})",
            ways[w].0,
            wall[w].as_nanos() as f64 / n as f64,
            percentile(&lat[w], 0.5),
            percentile(&lat[w], 0.99),
            server_us[w] / n as f64
        );
    }
    let a = redis_store(&server.url());
    let b = redis_store(&server.url());
    let lat = rt.block_on(propagation(a, b, reps));
    println!(
        "restriction on node A -> first refusal on node B: p50 {} us, p99 {} us, max {} us ({} runs)",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0),
        lat.len()
    );
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    redis_part(bench);
}
