//! Decisions per second and p50/p99 latency of the Redis store from one
//! process against a local redis-server, with 1, 10 and 100 concurrent
//! sessions. Each decision has two limits (an Exim EWMA and a GCRA quota)
//! on one of 10 000 users.
//!
//! `cargo bench --bench redis` measures (3 s per level); under `cargo test`
//! the binary runs a short smoke of the same code.

#[path = "../tests/common/redis.rs"]
mod redis_server;

use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::redis::{ConnectOptions, RedisOptions, RedisStore};
use floodgate::store::{Algorithm, Decision, LimitRequest, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

struct Run {
    decisions: usize,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

async fn run(store: Arc<RedisStore>, sessions: usize, budget: Duration, max_each: usize) -> Run {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut user = s as u64 * 7919;
            while start.elapsed() < budget && lat.len() < max_each {
                user = (user + 104_729) % 10_000;
                let d = decision(user);
                let t = Instant::now();
                store.decide(&d).await.expect("decision");
                lat.push(t.elapsed().as_micros() as u64);
            }
            lat
        }));
    }
    let mut latencies_us = Vec::new();
    for t in tasks {
        latencies_us.extend(t.await.unwrap());
    }
    Run {
        decisions: latencies_us.len(),
        elapsed: start.elapsed(),
        latencies_us,
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (budget, max_each) = if bench {
        (Duration::from_secs(3), usize::MAX)
    } else {
        (Duration::from_millis(300), 50)
    };
    let server = redis_server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let store = Arc::new(
        RedisStore::new(RedisOptions {
            connect: ConnectOptions {
                url: Some(server.url()),
                connect_timeout: Duration::from_secs(2),
                ..Default::default()
            },
            timeout: Duration::from_secs(2),
            ..Default::default()
        })
        .unwrap(),
    );
    // Warm up: connect and load the script.
    rt.block_on(run(store.clone(), 1, Duration::from_millis(200), 200));
    println!("redis store: two-limit decisions against a local redis-server");
    println!("sessions  decisions/s   p50 us   p99 us   (n)");
    for sessions in [1usize, 10, 100] {
        let mut r = rt.block_on(run(store.clone(), sessions, budget, max_each));
        r.latencies_us.sort_unstable();
        println!(
            "{sessions:>8}  {:>11.0}  {:>7}  {:>7}   ({})",
            r.decisions as f64 / r.elapsed.as_secs_f64(),
            percentile(&r.latencies_us, 0.50),
            percentile(&r.latencies_us, 0.99),
            r.decisions
        );
        assert!(r.decisions > 0);
    }
    // Server-side cost of the script, to tell Redis time from client time.
    let stats = redis_server::raw_command(server.port, "INFO commandstats").unwrap_or_default();
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_evalsha")) {
        println!("{line}");
    }
}
