//! Shared enforcement on a real Redis: two stores with their own connections
//! together get exactly m accepts under a limit of m; Redis killed under load
//! gives the configured failure mode with every decision answered once, and
//! shared enforcement resumes when Redis returns; a three-node cluster works;
//! passwords from the environment.

use crate::common::redis as redis_server;

use floodgate::config::StoreConfig;
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::open::{open_store, Opened};
use floodgate::store::redis::{
    ConnectOptions, FailoverStore, FailureMode, FailurePolicy, HashTag, RedisOptions, RedisStore,
};
use floodgate::store::{Algorithm, Decision, LimitRequest, MemoryStore, Store, StoreError};
use redis_server::{RedisCluster, RedisServer};
use std::sync::Arc;
use std::time::Duration;

/// Bound on any single await in these tests: a hang guard, not a speed check.
const HANG: Duration = Duration::from_secs(20);

fn options(url: Option<String>, nodes: Vec<String>) -> RedisOptions {
    RedisOptions {
        connect: ConnectOptions {
            url,
            nodes,
            connect_timeout: Duration::from_millis(500),
            ..Default::default()
        },
        timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

/// m messages at once, then one a day.
fn quota(key: &str, m: f64) -> Decision {
    Decision {
        limits: vec![LimitRequest {
            key: key.into(),
            algorithm: Algorithm::Gcra(GcraSpec::new(m, Rate::new(1.0, 86400.0).unwrap()).unwrap()),
            count: 1.0,
            unique: None,
            blocking: true,
        }],
    }
}

fn ewma(key: &str, m: f64) -> LimitRequest {
    LimitRequest {
        key: key.into(),
        algorithm: Algorithm::Ewma {
            limit: m,
            period_secs: 3600,
            mode: UpdateMode::Leaky,
            unique_kind: UniqueKind::Bloom,
        },
        count: 1.0,
        unique: None,
        blocking: true,
    }
}

async fn accepts(store: Arc<dyn Store>, decision: Decision, tries: usize) -> usize {
    let mut n = 0;
    for _ in 0..tries {
        let r = tokio::time::timeout(HANG, store.decide(&decision))
            .await
            .expect("decision hung")
            .expect("decision failed");
        if !r.refused {
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_share_one_limit_exactly() {
    let server = RedisServer::start();
    let a: Arc<dyn Store> = Arc::new(RedisStore::new(options(Some(server.url()), vec![])).unwrap());
    let b: Arc<dyn Store> = Arc::new(RedisStore::new(options(Some(server.url()), vec![])).unwrap());
    let m = 37usize;
    // Several concurrent senders on each "node".
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(accepts(
            s,
            quota("1d/per_mail/shared", m as f64),
            20,
        )));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, m, "two stores together must accept exactly m");
    // A two-limit decision (quota plus a loose Exim limit on another key):
    // still exactly m between the two nodes.
    let mut d = quota("1d/per_mail/pair", 7.0);
    d.limits.push(ewma("1h/per_mail/loose", 1e6));
    let (x, y) = tokio::join!(
        accepts(a.clone(), d.clone(), 10),
        accepts(b.clone(), d.clone(), 10)
    );
    assert_eq!(x + y, 7);
}

/// Runs `n` decisions on `store` concurrently; returns (accepted, refused, errors).
async fn load(store: Arc<FailoverStore>, d: Decision, n: usize) -> (usize, usize, usize) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let s = store.clone();
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::timeout(HANG, s.decide(&d))
                .await
                .expect("session hung")
        }));
    }
    let (mut ok, mut refused, mut err) = (0, 0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) if r.refused => refused += 1,
            Ok(_) => ok += 1,
            Err(StoreError::Unavailable(_)) => err += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    (ok, refused, err)
}

async fn failover(server: &RedisServer, mode: FailureMode) -> Arc<FailoverStore> {
    let redis = Arc::new(RedisStore::new(options(Some(server.url()), vec![])).unwrap());
    Arc::new(FailoverStore::new(
        redis,
        FailurePolicy {
            default: mode,
            overrides: vec![],
        },
        Duration::from_millis(50),
    ))
}

/// Waits (bounded) until a decision is answered by Redis again.
async fn until_back(store: &FailoverStore, d: &Decision) {
    for _ in 0..400 {
        let _ = store.decide(d).await;
        if !store.stats().down {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("Redis never came back: {:?}", store.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_each_mode() {
    for mode in [FailureMode::Closed, FailureMode::Open, FailureMode::Local] {
        let mut server = RedisServer::start();
        let store = failover(&server, mode).await;
        let other = failover(&server, mode).await;
        let m = 10usize;
        let key = format!("1d/per_mail/{}", mode.as_str());
        let d = quota(&key, m as f64);
        // Before: shared enforcement.
        let (ok, refused, err) = load(store.clone(), d.clone(), 6).await;
        assert_eq!((ok, refused, err), (6, 0, 0));
        // Kill Redis in the middle of a burst of concurrent decisions.
        let during = tokio::spawn(load(store.clone(), d.clone(), 40));
        tokio::time::sleep(Duration::from_millis(2)).await;
        server.kill();
        let (ok1, ref1, err1) = during.await.unwrap();
        assert_eq!(
            ok1 + ref1 + err1,
            40,
            "every decision answered exactly once"
        );
        // After: Redis is down.
        let (ok2, ref2, err2) = load(store.clone(), d.clone(), 30).await;
        assert_eq!(ok2 + ref2 + err2, 30);
        let stats = store.stats();
        assert!(stats.down && stats.switches_to_fallback == 1, "{stats:?}");
        match mode {
            FailureMode::Closed => assert_eq!((ok2, ref2, err2), (0, 0, 30), "closed defers"),
            FailureMode::Open => assert_eq!((ok2, ref2, err2), (30, 0, 0), "open allows"),
            FailureMode::Local => {
                // The local store enforces m on its own (it started empty).
                assert_eq!(err2, 0);
                assert!(ok2 <= m && ref2 >= 30 - m, "{ok2} {ref2}");
            }
        }
        // Redis returns (empty): shared enforcement resumes automatically.
        server.restart();
        until_back(&store, &d).await;
        until_back(&other, &d).await;
        let s = store.stats();
        assert!(s.switches_to_redis >= 1 && !s.down, "{s:?}");
        let fresh = quota(&format!("{key}/after"), m as f64);
        let (a, b) = tokio::join!(
            load(store.clone(), fresh.clone(), 8),
            load(other.clone(), fresh, 8)
        );
        assert_eq!(a.0 + b.0, m, "shared again: exactly m together");
        assert_eq!(a.2 + b.2, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_per_limit_override() {
    let mut server = RedisServer::start();
    let redis = Arc::new(RedisStore::new(options(Some(server.url()), vec![])).unwrap());
    let store = FailoverStore::new(
        redis,
        FailurePolicy {
            default: FailureMode::Open,
            overrides: vec![("1h/per_rcpt/".into(), FailureMode::Closed)],
        },
        Duration::from_secs(3600),
    );
    server.kill();
    let open_only = Decision {
        limits: vec![ewma("1h/per_mail/x", 1.0), ewma("1h/per_mail/x", 1.0)],
    };
    let r = store.decide(&open_only).await.unwrap();
    assert!(!r.refused && r.limits.iter().all(|l| !l.over));
    let with_closed = Decision {
        limits: vec![ewma("1h/per_mail/x", 1.0), ewma("1h/per_rcpt/x", 1.0)],
    };
    assert!(matches!(
        store.decide(&with_closed).await,
        Err(StoreError::Unavailable(_))
    ));
    assert_eq!(store.stats().closed_failures, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_cluster() {
    let cluster = RedisCluster::start();
    let memory = MemoryStore::default();
    for tag in [HashTag::Identity, HashTag::Global] {
        let mut o = options(None, cluster.addrs());
        o.hash_tag = tag;
        o.timeout = Duration::from_secs(5);
        let store = RedisStore::new(o).unwrap();
        let info = store.ping().await.unwrap();
        assert_eq!(info.mode, "cluster");
        // Many identities spread over the three masters; two limits of one
        // identity in one decision share a slot.
        let mut t = 1_718_000_000_000_000i64;
        for round in 0..3 {
            for user in 0..30 {
                t += 1000;
                let d = Decision {
                    limits: vec![
                        ewma(&format!("1h/per_mail/u{user}-{tag:?}"), 2.0),
                        LimitRequest {
                            count: 2.0,
                            ..ewma(&format!("1d/per_rcpt/u{user}-{tag:?}"), 5.0)
                        },
                    ],
                };
                let r = store.decide_at(Some(t), &d).await.unwrap();
                let m = memory.decide_at(t, &d);
                assert_eq!(r, m, "round {round} user {user}");
            }
        }
    }
    // Keys of all three masters were used.
    let used = cluster
        .nodes
        .iter()
        .filter(|n| redis_server::raw_command(n.port, "DBSIZE").is_some_and(|r| r.trim() != ":0"))
        .count();
    assert_eq!(used, 3, "identity tags spread keys over every master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_from_environment_via_config() {
    let server = RedisServer::start_with(&["--requirepass", "hunter2-test"]);
    let var = "FLOODGATE_TEST_REDIS_PASSWORD_SHARED";
    std::env::set_var(var, "hunter2-test");
    let config = StoreConfig {
        backend: "redis".into(),
        url: Some(server.url()),
        password_env: Some(var.into()),
        ..Default::default()
    };
    let Opened::Redis(store) = open_store(&config).unwrap() else {
        panic!("not redis")
    };
    assert!(!format!("{store:?}").contains("hunter2"));
    let info = store.redis().ping().await.unwrap();
    assert_eq!(info.mode, "standalone");
    let r = store.decide(&quota("1d/per_mail/pw", 1.0)).await.unwrap();
    assert!(!r.refused);
    assert_eq!(store.stats().redis_decisions, 1);
    // A wrong password is an unavailable store, never a panic or a hang.
    let wrong = RedisStore::new(RedisOptions {
        connect: ConnectOptions {
            url: Some(server.url()),
            password: Some(zeroize::Zeroizing::new("nope".into())),
            connect_timeout: Duration::from_millis(500),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    assert!(wrong.ping().await.is_err());
}
