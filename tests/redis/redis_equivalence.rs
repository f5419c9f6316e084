//! The same event sequences give the same decisions, rates and stored
//! records on the memory store and on a real Redis (property test), for every
//! algorithm: EWMA (leaky, strict, readonly), unique sets (Bloom and exact),
//! GCRA, buckets with reservations and dynamic multipliers, and limits answered
//! from an earlier EWMA limit of their decision (`Algorithm::Same`).

use crate::common::redis as redis_server;

use floodgate::limit::bucket::{BucketOp, BucketSpec, MessageClass, Multipliers};
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::{UniqueKind, UniqueSet};
use floodgate::store::redis::{ConnectOptions, HashTag, RedisOptions, RedisStore};
use floodgate::store::{
    Algorithm, Decision, DecisionResult, LimitRequest, MemoryStore, Record, Store,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_server::RedisServer;
use std::time::Duration;

/// A realistic epoch time (2024), microseconds.
const T0: i64 = 1_718_000_000_123_456;

fn store_for(server: &RedisServer, tag: HashTag) -> RedisStore {
    RedisStore::new(RedisOptions {
        connect: ConnectOptions {
            url: Some(server.url()),
            connect_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        // Generous: the property test is about answers, not speed.
        timeout: Duration::from_secs(5),
        hash_tag: tag,
        ..Default::default()
    })
    .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn close_dur(a: Option<Duration>, b: Option<Duration>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            close(a.as_secs_f64(), b.as_secs_f64()) || a.abs_diff(b) <= Duration::from_nanos(1)
        }
        _ => false,
    }
}

fn same_result(m: &DecisionResult, r: &DecisionResult) -> Result<(), String> {
    if m.refused != r.refused || m.limits.len() != r.limits.len() {
        return Err(format!("refused/len differ:\nmemory {m:?}\nredis  {r:?}"));
    }
    for (i, (a, b)) in m.limits.iter().zip(&r.limits).enumerate() {
        if a.over != b.over
            || a.stored != b.stored
            || a.seen != b.seen
            || !close(a.value, b.value)
            || !close_dur(a.retry_after, b.retry_after)
        {
            return Err(format!("limit {i} differs:\nmemory {a:?}\nredis  {b:?}"));
        }
    }
    Ok(())
}

fn same_records(m: &[Record], r: &[Record]) -> Result<(), String> {
    let msg = || format!("records differ:\nmemory {m:?}\nredis  {r:?}");
    if m.len() != r.len() {
        return Err(msg());
    }
    for (a, b) in m.iter().zip(r) {
        let ok = match (a, b) {
            (Record::Ewma(x), Record::Ewma(y)) => x.time_us == y.time_us && close(x.rate, y.rate),
            (Record::Unique(x), Record::Unique(y)) => {
                x.state.time_us == y.state.time_us
                    && close(x.state.rate, y.state.rate)
                    && x.created_s == y.created_s
                    && match (&x.set, &y.set) {
                        (UniqueSet::Bloom(p), UniqueSet::Bloom(q)) => p == q,
                        (UniqueSet::Exact(p), UniqueSet::Exact(q)) => p == q,
                        _ => false,
                    }
            }
            (Record::Gcra { tat_ns: x }, Record::Gcra { tat_ns: y }) => x == y,
            (Record::Bucket(x), Record::Bucket(y)) => {
                close(x.last_ms, y.last_ms)
                    && close(x.level, y.level)
                    && close(x.pending, y.pending)
                    && x.dyn_rate == y.dyn_rate
                    && x.dyn_burst == y.dyn_burst
            }
            _ => false,
        };
        if !ok {
            return Err(msg());
        }
    }
    Ok(())
}

/// A limit of the scenario, applied to key `k<i>`.
#[derive(Debug, Clone)]
enum Template {
    Ewma {
        limit: f64,
        period: u32,
        mode: UpdateMode,
        unique: Option<UniqueKind>,
    },
    Gcra(GcraSpec),
    Bucket(BucketSpec),
}

fn template() -> impl Strategy<Value = Template> {
    let mode = prop_oneof![
        Just(UpdateMode::Leaky),
        Just(UpdateMode::Strict),
        Just(UpdateMode::Readonly)
    ];
    let unique = prop_oneof![
        2 => Just(None),
        1 => Just(Some(UniqueKind::Bloom)),
        1 => Just(Some(UniqueKind::Exact)),
    ];
    prop_oneof![
        (0.5f64..30.0, 1u32..600, mode, unique).prop_map(|(limit, period, mode, unique)| {
            Template::Ewma {
                limit,
                period,
                mode,
                unique,
            }
        }),
        (1.0f64..8.0, 1.0f64..10.0, 1.0f64..120.0).prop_map(|(b, a, p)| Template::Gcra(
            GcraSpec::new(b, Rate::new(a, p).unwrap()).unwrap()
        )),
        (0.5f64..8.0, 1.0f64..10.0, 1.0f64..120.0, any::<bool>()).prop_map(|(b, a, p, d)| {
            Template::Bucket(BucketSpec {
                burst: b,
                rate: Rate::new(a, p).unwrap(),
                dynamic: d.then(Multipliers::default),
            })
        }),
    ]
}

#[derive(Debug, Clone)]
struct Use {
    template: usize,
    count: f64,
    value: u8,
    blocking: bool,
    op: u8,
}

/// A limit answered from an earlier EWMA limit of the event (if the event has one).
#[derive(Debug, Clone)]
struct Alias {
    /// Picks the EWMA limit.
    pick: u8,
    /// Picks the position after it.
    at: u8,
    limit: f64,
    blocking: bool,
}

#[derive(Debug, Clone)]
struct Event {
    /// Microseconds since the previous event (0 is common: same instant).
    delta_us: i64,
    uses: Vec<Use>,
    aliases: Vec<Alias>,
}

fn event(n_templates: usize) -> impl Strategy<Value = Event> {
    let delta = prop_oneof![
        2 => Just(0i64),
        3 => 0i64..2_000_000,
        1 => 0i64..400_000_000,
    ];
    let count = prop_oneof![
        Just(1.0f64),
        Just(0.0),
        0.0f64..4.0,
        (1u8..5).prop_map(f64::from)
    ];
    let one_use = (
        0..n_templates,
        count,
        0u8..6,
        prop::bool::weighted(0.8),
        0u8..5,
    )
        .prop_map(|(template, count, value, blocking, op)| Use {
            template,
            count,
            value,
            blocking,
            op,
        });
    let alias = (
        any::<u8>(),
        any::<u8>(),
        0.0f64..12.0,
        prop::bool::weighted(0.7),
    )
        .prop_map(|(pick, at, limit, blocking)| Alias {
            pick,
            at,
            limit,
            blocking,
        });
    (
        delta,
        prop::collection::vec(one_use, 1..4),
        prop::collection::vec(alias, 0..3),
    )
        .prop_map(|(delta_us, uses, aliases)| Event {
            delta_us,
            uses,
            aliases,
        })
}

fn scenario() -> impl Strategy<Value = (Vec<Template>, Vec<Event>)> {
    prop::collection::vec(template(), 1..5).prop_flat_map(|ts| {
        let n = ts.len();
        (Just(ts), prop::collection::vec(event(n), 1..40))
    })
}

fn request(templates: &[Template], u: &Use) -> LimitRequest {
    let key = format!("1h/per_mail/k{}", u.template);
    let (algorithm, unique) = match &templates[u.template] {
        Template::Ewma {
            limit,
            period,
            mode,
            unique,
        } => (
            Algorithm::Ewma {
                limit: *limit,
                period_secs: *period,
                mode: *mode,
                unique_kind: unique.unwrap_or_default(),
            },
            unique.map(|_| format!("rcpt{}@example.org", u.value)),
        ),
        Template::Gcra(s) => (Algorithm::Gcra(*s), None),
        Template::Bucket(s) => (
            Algorithm::Bucket {
                spec: *s,
                op: match u.op {
                    0 | 1 => BucketOp::Check,
                    2 => BucketOp::Commit(MessageClass::Ham),
                    3 => BucketOp::Commit(MessageClass::Spam),
                    _ => BucketOp::Cancel,
                },
            },
            None,
        ),
    };
    LimitRequest {
        key,
        algorithm,
        count: u.count,
        unique,
        blocking: u.blocking,
    }
}

/// The limits of one event: its uses, then each alias inserted after the EWMA limit it
/// is answered from.
fn decision(templates: &[Template], ev: &Event) -> Decision {
    let mut limits: Vec<LimitRequest> = ev.uses.iter().map(|u| request(templates, u)).collect();
    for a in &ev.aliases {
        let ewmas: Vec<usize> = (0..limits.len())
            .filter(|&i| matches!(limits[i].algorithm, Algorithm::Ewma { .. }))
            .collect();
        if ewmas.is_empty() {
            break;
        }
        let of = ewmas[a.pick as usize % ewmas.len()];
        let at = of + 1 + a.at as usize % (limits.len() - of);
        for l in &mut limits[at..] {
            if let Algorithm::Same { of: o, .. } = &mut l.algorithm {
                if *o >= at {
                    *o += 1;
                }
            }
        }
        let key = limits[of].key.clone();
        limits.insert(
            at,
            LimitRequest {
                key,
                algorithm: Algorithm::Same { of, limit: a.limit },
                count: 1.0,
                unique: None,
                blocking: a.blocking,
            },
        );
    }
    Decision { limits }
}

fn run_property(tag: HashTag, cases: u32) {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let redis = store_for(&server, tag);
    let admin = redis::Client::open(server.url()).unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&scenario(), |(templates, events)| {
        rt.block_on(async {
            let mut con = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await.unwrap();
            let memory = MemoryStore::default();
            let mut now = T0;
            for (n, ev) in events.iter().enumerate() {
                now += ev.delta_us;
                let decision = decision(&templates, ev);
                let m = memory.decide_at(now, &decision);
                let r = redis
                    .decide_at(Some(now), &decision)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                same_result(&m, &r)
                    .map_err(|e| TestCaseError::fail(format!("event {n} {decision:?}: {e}")))?;
            }
            for i in 0..templates.len() {
                let key = format!("1h/per_mail/k{i}");
                let m = memory.inspect_key(&key);
                let r = redis
                    .inspect(&key)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("redis: {e}")))?;
                same_records(&m, &r).map_err(TestCaseError::fail)?;
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn memory_and_redis_agree_global_tag() {
    run_property(HashTag::Global, 48);
}

#[test]
fn memory_and_redis_agree_identity_tag() {
    run_property(HashTag::Identity, 16);
}

/// Rates equal to the last bit on a long EWMA sequence (exp and the
/// operation order are the same in Lua and Rust).
#[test]
fn ewma_bit_exact_long_run() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let redis = store_for(&server, HashTag::Global);
    let memory = MemoryStore::default();
    let decision = Decision {
        limits: vec![LimitRequest {
            key: "1h/per_rcpt/alice".into(),
            algorithm: Algorithm::Ewma {
                limit: 1e9,
                period_secs: 3600,
                mode: UpdateMode::Strict,
                unique_kind: UniqueKind::Bloom,
            },
            count: 3.0,
            unique: None,
            blocking: true,
        }],
    };
    let mut now = T0;
    rt.block_on(async {
        for i in 0..300i64 {
            now += (i * 7919) % 5_000_003;
            let m = memory.decide_at(now, &decision);
            let r = redis.decide_at(Some(now), &decision).await.unwrap();
            assert_eq!(
                m.limits[0].value.to_bits(),
                r.limits[0].value.to_bits(),
                "step {i}: {} vs {}",
                m.limits[0].value,
                r.limits[0].value
            );
        }
        // Without an explicit time the script reads Redis TIME and still works.
        let r = redis.decide(&decision).await.unwrap();
        assert!(!r.refused);
    });
}

/// The most limits one decision may carry (every algorithm, unique sets
/// included) go through the script and agree with the memory store; one
/// more is refused as invalid.
#[test]
fn largest_decision_agrees() {
    use floodgate::store::redis::encode::MAX_LIMITS;
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let redis = store_for(&server, HashTag::Global);
    let memory = MemoryStore::default();
    let templates = [
        Template::Ewma {
            limit: 5.0,
            period: 60,
            mode: UpdateMode::Leaky,
            unique: None,
        },
        Template::Ewma {
            limit: 5.0,
            period: 60,
            mode: UpdateMode::Strict,
            unique: Some(UniqueKind::Bloom),
        },
        Template::Gcra(GcraSpec::new(3.0, Rate::new(1.0, 1.0).unwrap()).unwrap()),
        Template::Bucket(BucketSpec {
            burst: 4.0,
            rate: Rate::new(1.0, 1.0).unwrap(),
            dynamic: Some(Multipliers::default()),
        }),
    ];
    // Mixed, then only buckets (the most parameters per limit).
    for only_buckets in [false, true] {
        let limits: Vec<LimitRequest> = (0..MAX_LIMITS)
            .map(|i| {
                let mut r = request(
                    &templates,
                    &Use {
                        template: if only_buckets { 3 } else { i % 4 },
                        count: 1.0,
                        value: (i % 6) as u8,
                        blocking: i % 3 != 0,
                        op: (i % 5) as u8,
                    },
                );
                r.key = format!("1h/per_mail/big{}", i % 97);
                r
            })
            .collect();
        let mut decision = Decision { limits };
        rt.block_on(async {
            for step in 0..3 {
                let now = T0 + step * 250_000;
                let m = memory.decide_at(now, &decision);
                let r = redis.decide_at(Some(now), &decision).await.unwrap();
                if let Err(e) = same_result(&m, &r) {
                    panic!("step {step}: {e}");
                }
            }
            decision.limits.push(decision.limits[0].clone());
            assert!(matches!(
                redis.decide_at(Some(T0), &decision).await,
                Err(floodgate::store::StoreError::Invalid(_))
            ));
        });
    }
}

/// A key holding something else than a record string (a hash of the
/// earlier layout) reads as absent and is replaced by the next write.
#[test]
fn foreign_value_reads_as_absent() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let redis = store_for(&server, HashTag::Global);
    let admin = redis::Client::open(server.url()).unwrap();
    let memory = MemoryStore::default();
    let decision = Decision {
        limits: vec![LimitRequest {
            key: "1h/per_mail/old".into(),
            algorithm: Algorithm::Gcra(GcraSpec::new(2.0, Rate::new(1.0, 60.0).unwrap()).unwrap()),
            count: 1.0,
            unique: None,
            blocking: true,
        }],
    };
    rt.block_on(async {
        let mut con = admin.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("HSET")
            .arg("fg:{g}:g:1h/per_mail/old")
            .arg("s")
            .arg("99999999999")
            .arg("n")
            .arg("0")
            .query_async(&mut con)
            .await
            .unwrap();
        for step in 0..3 {
            let m = memory.decide_at(T0, &decision);
            let r = redis.decide_at(Some(T0), &decision).await.unwrap();
            same_result(&m, &r).unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
        let kind: String = redis::cmd("TYPE")
            .arg("fg:{g}:g:1h/per_mail/old")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(kind, "string");
        let m = memory.inspect_key("1h/per_mail/old");
        let r = redis.inspect("1h/per_mail/old").await.unwrap();
        same_records(&m, &r).unwrap();
    });
}

/// Limits answered from an earlier EWMA limit (Exim's cache): the same values, refusals,
/// retry times and records on both stores, for leaky, strict, readonly and unique first
/// limits, with the alias refusing while the first is under (nothing leaky charged).
#[test]
fn same_limits_agree() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let redis = store_for(&server, HashTag::Identity);
    let memory = MemoryStore::default();
    let ewma = |key: &str, limit: f64, mode: UpdateMode, unique: Option<&str>| LimitRequest {
        key: key.into(),
        algorithm: Algorithm::Ewma {
            limit,
            period_secs: 60,
            mode,
            unique_kind: UniqueKind::Exact,
        },
        count: 1.0,
        unique: unique.map(str::to_string),
        blocking: false,
    };
    let same = |of: usize, limit: f64, blocking: bool| LimitRequest {
        key: "ignored".into(),
        algorithm: Algorithm::Same { of, limit },
        count: 1.0,
        unique: None,
        blocking,
    };
    let bucket = LimitRequest {
        key: "1h/per_mail/b".into(),
        algorithm: Algorithm::Bucket {
            spec: BucketSpec {
                burst: 50.0,
                rate: Rate::new(1.0, 1.0).unwrap(),
                dynamic: None,
            },
            op: BucketOp::Check,
        },
        count: 1.0,
        unique: None,
        blocking: true,
    };
    let decisions = [
        // Warn before block on one key, with a bucket charged only when not refused.
        vec![
            ewma("1h/per_mail/a", 2.0, UpdateMode::Leaky, None),
            bucket.clone(),
            same(0, 4.0, true),
        ],
        vec![
            ewma("1h/per_mail/a", 2.0, UpdateMode::Strict, None),
            same(0, 3.0, true),
            ewma("1h/per_mail/c", 9.0, UpdateMode::Leaky, None),
        ],
        vec![
            ewma("1h/per_mail/a", 2.0, UpdateMode::Readonly, None),
            same(0, 3.0, true),
        ],
        vec![
            ewma("1h/per_rcpt/unique/u", 9.0, UpdateMode::Leaky, Some("x")),
            same(0, 2.0, true),
            same(0, 1.0, false),
        ],
    ];
    rt.block_on(async {
        let mut now = T0;
        for step in 0..12 {
            for (n, limits) in decisions.iter().enumerate() {
                now += 1_500_000;
                let d = Decision {
                    limits: limits.clone(),
                };
                let m = memory.decide_at(now, &d);
                let r = redis.decide_at(Some(now), &d).await.unwrap();
                if let Err(e) = same_result(&m, &r) {
                    panic!("step {step} decision {n}: {e}");
                }
            }
        }
        for key in [
            "1h/per_mail/a",
            "1h/per_mail/b",
            "1h/per_mail/c",
            "1h/per_rcpt/unique/u",
        ] {
            let m = memory.inspect_key(key);
            assert!(!m.is_empty(), "{key}");
            same_records(&m, &redis.inspect(key).await.unwrap()).unwrap();
        }
        // Refused somewhere along the way, and answered over by an alias.
        let d = Decision {
            limits: decisions[0].clone(),
        };
        let r = redis.decide_at(Some(now), &d).await.unwrap();
        assert!(r.refused && !r.limits[0].stored && r.limits[2].over);
        assert!(r.limits[2].retry_after.is_some());
    });
}
