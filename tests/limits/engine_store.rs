//! The memory store: all-or-nothing decisions, cap, expiry, inspect/reset,
//! snapshots (round trip and refusal of corrupt or foreign files), the
//! async `Store` trait, and `simulate`.

use floodgate::limit::bucket::{BucketOp, BucketSpec, MessageClass};
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::{
    Algorithm, Decision, LimitRequest, MemoryConfig, MemoryStore, Record, SnapshotError, Store,
};
use std::time::Duration;

fn ewma(key: &str, limit: f64, mode: UpdateMode, blocking: bool) -> LimitRequest {
    LimitRequest {
        key: key.to_string(),
        algorithm: Algorithm::Ewma {
            limit,
            period_secs: 3600,
            mode,
            unique_kind: UniqueKind::Bloom,
        },
        count: 1.0,
        unique: None,
        blocking,
    }
}

fn gcra(key: &str, burst: f64) -> LimitRequest {
    LimitRequest {
        key: key.to_string(),
        algorithm: Algorithm::Gcra(GcraSpec::new(burst, Rate::parse("1 / 1s").unwrap()).unwrap()),
        count: 1.0,
        unique: None,
        blocking: true,
    }
}

fn rate_of(store: &MemoryStore, key: &str) -> Option<f64> {
    store.inspect_key(key).into_iter().find_map(|r| match r {
        Record::Ewma(s) => Some(s.rate),
        _ => None,
    })
}

#[test]
fn refused_decision_charges_nothing_leaky_but_strict() {
    let store = MemoryStore::default();
    // Fill the blocking limit "b" to its limit of 2.
    for t in 0..2 {
        store.decide_at(
            t,
            &Decision {
                limits: vec![ewma("b", 2.0, UpdateMode::Leaky, true)],
            },
        );
    }
    let d = Decision {
        limits: vec![
            ewma("a", 100.0, UpdateMode::Leaky, true),
            ewma("s", 100.0, UpdateMode::Strict, true),
            gcra("g", 10.0),
            ewma("b", 2.0, UpdateMode::Leaky, true),
        ],
    };
    let r = store.decide_at(10, &d);
    assert!(r.refused);
    assert_eq!(
        r.limits.iter().map(|l| l.over).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    assert_eq!(
        r.limits.iter().map(|l| l.stored).collect::<Vec<_>>(),
        [false, true, false, false]
    );
    assert_eq!(rate_of(&store, "a"), None);
    assert_eq!(rate_of(&store, "s"), Some(1.0));
    assert!(store.inspect_key("g").is_empty());
}

/// More limits than the store keeps inline (8), over few shards so that
/// several limits share a lock: refusal still undoes every leaky write and
/// keeps the strict ones, and a passing decision stores all of them.
#[test]
fn many_limits_all_or_nothing() {
    let store = MemoryStore::new(MemoryConfig {
        shards: 2,
        ..MemoryConfig::default()
    });
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let mut limits: Vec<LimitRequest> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mode = if i % 3 == 0 {
                UpdateMode::Strict
            } else {
                UpdateMode::Leaky
            };
            ewma(k, 100.0, mode, true)
        })
        .collect();
    // The same key twice, past the inline part: written once in the undo log.
    limits.push(ewma("k10", 100.0, UpdateMode::Leaky, true));
    let pass = Decision {
        limits: limits.clone(),
    };
    let r = store.decide_at(0, &pass);
    assert!(!r.refused);
    assert_eq!(r.limits.len(), 13);
    assert!(keys.iter().all(|k| rate_of(&store, k).is_some()));
    let before: Vec<Option<f64>> = keys.iter().map(|k| rate_of(&store, k)).collect();
    // Now a blocking limit at the end that is over refuses everything.
    limits.push(ewma("full", 0.5, UpdateMode::Leaky, true));
    let r = store.decide_at(1_000_000, &Decision { limits });
    assert!(r.refused);
    for (i, k) in keys.iter().enumerate() {
        let now = rate_of(&store, k);
        if i % 3 == 0 {
            assert_ne!(now, before[i], "strict {k} is charged");
        } else {
            assert_eq!(now, before[i], "leaky {k} is not charged");
        }
    }
    assert_eq!(rate_of(&store, "full"), None);
}

#[test]
fn non_blocking_over_does_not_refuse() {
    let store = MemoryStore::default();
    let d = Decision {
        limits: vec![
            ewma("warn", 0.0, UpdateMode::Leaky, false),
            ewma("a", 10.0, UpdateMode::Leaky, true),
        ],
    };
    let r = store.decide_at(0, &d);
    assert!(!r.refused);
    assert_eq!((r.limits[0].over, r.limits[0].stored), (true, false));
    assert_eq!((r.limits[1].over, r.limits[1].stored), (false, true));
}

#[test]
fn same_key_twice_in_one_decision_chains() {
    let store = MemoryStore::default();
    let d = Decision {
        limits: vec![
            ewma("k", 10.0, UpdateMode::Strict, true),
            ewma("k", 10.0, UpdateMode::Readonly, true),
        ],
    };
    let r = store.decide_at(0, &d);
    assert_eq!(r.limits[0].value, 1.0);
    // The readonly check sees the strict write (decayed over Exim's 1e-9 s).
    assert!((r.limits[1].value - 1.0).abs() < 1e-9);
}

#[test]
fn gcra_retry_after_through_store() {
    let store = MemoryStore::default();
    for _ in 0..3 {
        assert!(
            !store
                .decide_at(
                    0,
                    &Decision {
                        limits: vec![gcra("g", 3.0)]
                    }
                )
                .refused
        );
    }
    let r = store.decide_at(
        250_000,
        &Decision {
            limits: vec![gcra("g", 3.0)],
        },
    );
    assert!(r.refused);
    assert_eq!(r.limits[0].retry_after, Some(Duration::from_millis(750)));
    assert!(
        !store
            .decide_at(
                1_000_000,
                &Decision {
                    limits: vec![gcra("g", 3.0)]
                }
            )
            .refused
    );
}

#[test]
fn bucket_check_commit_cancel() {
    let store = MemoryStore::default();
    let spec = BucketSpec::parse("2", "1 / 1s").unwrap();
    let op = |op, n: f64| Decision {
        limits: vec![LimitRequest {
            key: "u".into(),
            algorithm: Algorithm::Bucket { spec, op },
            count: n,
            unique: None,
            blocking: true,
        }],
    };
    assert!(!store.decide_at(0, &op(BucketOp::Check, 1.0)).refused);
    store.decide_at(0, &op(BucketOp::Commit(MessageClass::Ham), 1.0));
    assert!(!store.decide_at(0, &op(BucketOp::Check, 1.0)).refused);
    // One committed + one in flight: a third does not fit.
    assert!(store.decide_at(0, &op(BucketOp::Check, 1.0)).refused);
    store.decide_at(0, &op(BucketOp::Cancel, 1.0));
    assert!(!store.decide_at(0, &op(BucketOp::Check, 1.0)).refused);
}

#[test]
fn cap_evicts_oldest() {
    let store = MemoryStore::new(MemoryConfig {
        max_keys: 64,
        shards: 1,
        ..MemoryConfig::default()
    });
    for i in 0..200i64 {
        store.decide_at(
            i,
            &Decision {
                limits: vec![ewma(&format!("k{i}"), 10.0, UpdateMode::Leaky, true)],
            },
        );
    }
    assert!(store.len() <= 64);
    let stats = store.stats();
    assert!(stats.evictions >= 136);
    // The newest keys survive.
    assert!(rate_of(&store, "k199").is_some());
    assert!(rate_of(&store, "k0").is_none());
}

#[test]
fn expiry_inspect_reset() {
    let store = MemoryStore::new(MemoryConfig {
        idle_ttl: Duration::from_secs(10),
        ..MemoryConfig::default()
    });
    store.decide_at(
        0,
        &Decision {
            limits: vec![ewma("old", 10.0, UpdateMode::Leaky, true)],
        },
    );
    store.decide_at(
        9_000_000,
        &Decision {
            limits: vec![ewma("new", 10.0, UpdateMode::Leaky, true), gcra("g", 5.0)],
        },
    );
    assert_eq!(store.len(), 3);
    // At 11 s: "old" is idle; "g" has drained (TAT 10 s) and equals a new key.
    assert_eq!(store.expire_idle(11_000_000), 2);
    assert_eq!(store.inspect_key("new").len(), 1);
    assert_eq!(store.reset_key("new"), 1);
    assert!(store.is_empty());
}

fn populated() -> MemoryStore {
    let store = MemoryStore::default();
    let mut unique = ewma("1h/per_rcpt/unique/x", 5.0, UpdateMode::Strict, true);
    for (i, v) in ["a", "b"].iter().enumerate() {
        unique.unique = Some(v.to_string());
        store.decide_at(
            i as i64,
            &Decision {
                limits: vec![unique.clone()],
            },
        );
    }
    let mut exact = unique.clone();
    exact.key = "1h/per_rcpt/unique/y".into();
    if let Algorithm::Ewma { unique_kind, .. } = &mut exact.algorithm {
        *unique_kind = UniqueKind::Exact;
    }
    store.decide_at(
        5,
        &Decision {
            limits: vec![exact],
        },
    );
    store.decide_at(
        7,
        &Decision {
            limits: vec![ewma("e", 5.0, UpdateMode::Leaky, true), gcra("g", 4.0)],
        },
    );
    let spec = BucketSpec::parse("3", "1 / 1m").unwrap();
    store.decide_at(
        9,
        &Decision {
            limits: vec![LimitRequest {
                key: "b".into(),
                algorithm: Algorithm::Bucket {
                    spec,
                    op: BucketOp::Check,
                },
                count: 2.0,
                unique: None,
                blocking: true,
            }],
        },
    );
    store
}

fn all_records(store: &MemoryStore) -> Vec<(String, String)> {
    let mut v = Vec::new();
    store.for_each_record(|k, r| v.push((k.to_string(), format!("{r:?}"))));
    v.sort();
    v
}

#[test]
fn snapshot_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let store = populated();
    store.save_snapshot(&path).unwrap();
    let loaded = MemoryStore::default();
    assert_eq!(loaded.load_snapshot(&path).unwrap(), 5);
    assert_eq!(all_records(&loaded), all_records(&store));
    assert_eq!(loaded.snapshot_bytes().len(), store.snapshot_bytes().len());
    // No temporary file is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // The records name users and addresses: the file is its owner's alone, whatever the umask.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "snapshot mode {mode:o}");
    // Decisions continue identically after a restart.
    let d = Decision {
        limits: vec![ewma("e", 5.0, UpdateMode::Leaky, true)],
    };
    assert_eq!(store.decide_at(100, &d), loaded.decide_at(100, &d));
    // Missing file on first start.
    assert_eq!(
        MemoryStore::default()
            .load_snapshot_if_present(&dir.path().join("none"))
            .unwrap(),
        None
    );
}

#[test]
fn corrupt_or_foreign_snapshots_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let good = populated().snapshot_bytes();
    let check = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        let fresh = MemoryStore::default();
        let e = fresh.load_snapshot(&path).unwrap_err();
        assert!(fresh.is_empty(), "nothing loaded from a bad file");
        e
    };
    // Flipped byte in the records: checksum.
    let mut b = good.clone();
    b[40] ^= 1;
    let e = check(&b);
    assert!(matches!(e, SnapshotError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");
    // Truncated.
    let e = check(&good[..good.len() - 5]);
    assert!(matches!(e, SnapshotError::Corrupt { .. }), "{e}");
    assert!(matches!(check(&good[..20]), SnapshotError::Corrupt { .. }));
    // Foreign files.
    assert!(matches!(
        check(b"{\"json\": true}"),
        SnapshotError::Foreign(_)
    ));
    assert!(matches!(check(b""), SnapshotError::Foreign(_)));
    // Another version.
    let mut b = good.clone();
    b[16] = 9;
    assert!(matches!(
        check(&b),
        SnapshotError::Version { version: 9, .. }
    ));
    let msg = check(b"garbage").to_string();
    assert!(msg.contains("not a floodgate state snapshot"), "{msg}");
    // Still refused by the "if present" loader.
    assert!(MemoryStore::default()
        .load_snapshot_if_present(&path)
        .is_err());
}

#[tokio::test]
async fn async_store_trait() {
    let store = MemoryStore::default();
    let dynstore: &dyn Store = &store;
    let d = Decision {
        limits: vec![ewma("k", 2.0, UpdateMode::Leaky, true)],
    };
    assert!(!dynstore.decide(&d).await.unwrap().refused);
    assert_eq!(dynstore.inspect("k").await.unwrap().len(), 1);
    assert_eq!(dynstore.reset("k").await.unwrap(), 1);
}

#[tokio::test]
async fn expiry_task_runs_and_stops() {
    let store = std::sync::Arc::new(MemoryStore::default());
    // A record from the distant past is idle at any real time.
    store.decide_at(
        0,
        &Decision {
            limits: vec![ewma("old", 10.0, UpdateMode::Leaky, true)],
        },
    );
    let token = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(floodgate::store::run_expiry(
        store.clone(),
        Duration::from_millis(10),
        token.clone(),
    ));
    // The first tick fires at once; wait (bounded by count, not time) for it.
    for _ in 0..5000 {
        if store.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(store.is_empty());
    token.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn snapshot_task_saves_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let store = std::sync::Arc::new(populated());
    let token = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(floodgate::store::run_snapshots(
        store.clone(),
        path.clone(),
        Duration::from_secs(3600),
        token.clone(),
    ));
    token.cancel();
    task.await.unwrap().unwrap();
    let loaded = MemoryStore::default();
    assert_eq!(loaded.load_snapshot(&path).unwrap(), 5);
}

fn simulate(spec: &str, input: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    floodgate::simulate::run(spec, input.as_bytes(), &mut out).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect())
}

#[test]
fn simulate_contract() {
    let input = (0..7)
        .map(|t| format!("{{\"t\": {t}, \"key\": \"1.2.3.4\"}}\n"))
        .collect::<String>();
    let out = simulate("4/1h/per_rcpt/leaky", &input).unwrap();
    assert_eq!(out.len(), 7);
    assert_eq!(out[0]["rate"], 1.0);
    assert_eq!(out[0]["key"], "1h/per_rcpt/1.2.3.4");
    let over: Vec<bool> = out.iter().map(|o| o["over"].as_bool().unwrap()).collect();
    assert_eq!(over, [false, false, false, false, true, true, true]);
    assert!(out[4]["retry_after"].as_f64().unwrap() > 0.0);
    assert_eq!(out[4]["stored"], false);
    // count= default, unique, rounding of t to µs, blank lines.
    let out = simulate(
        "10/1h/per_rcpt/count=3",
        "{\"t\": 0}\n\n{\"t\": 1.0000004, \"count\": 1}\n",
    )
    .unwrap();
    assert_eq!(out[0]["rate"], 3.0);
    assert_eq!(out[1]["t"], 1.0);
    let out = simulate(
        "3/1h/per_addr",
        "{\"t\":0,\"unique\":\"x\"}\n{\"t\":1,\"unique\":\"x\"}\n",
    )
    .unwrap();
    assert_eq!(
        (out[0]["seen"].as_bool(), out[1]["seen"].as_bool()),
        (Some(false), Some(true))
    );
    // An event's unique is tested against the key's set without unique= in the spec.
    let out = simulate(
        "4/1h",
        "{\"t\":0,\"key\":\"k\",\"unique\":\"a\"}\n{\"t\":1,\"key\":\"k\",\"unique\":\"a\"}\n",
    )
    .unwrap();
    assert_eq!(out[0]["key"], "1h/per_mail/unique/k");
    assert_eq!(
        (out[0]["seen"].as_bool(), out[1]["seen"].as_bool()),
        (Some(false), Some(true))
    );
    // Other algorithms.
    let out = simulate(
        "gcra: burst=2, rate=1 / 1s",
        "{\"t\":0}\n{\"t\":0}\n{\"t\":0}\n",
    )
    .unwrap();
    assert_eq!(out[2]["over"], true);
    assert_eq!(out[2]["retry_after"], 1.0);
    let out = simulate("bucket: burst=1, rate=10 / 1min", "{\"t\":0}\n{\"t\":0}\n").unwrap();
    assert_eq!(
        (out[0]["over"].as_bool(), out[1]["over"].as_bool()),
        (Some(false), Some(true))
    );
}

#[test]
fn simulate_errors_name_the_line() {
    let e = simulate("4/1h", "{\"t\":0}\nnot json\n").unwrap_err();
    assert!(e.starts_with("line 2: "), "{e}");
    let e = simulate("4/1h", "{\"t\":0}\n{\"t\":1,\"count\":-1}\n").unwrap_err();
    assert!(e.starts_with("line 2: "), "{e}");
    let e = simulate("gcra: burst=2, rate=1 / 1s", "{\"t\":0,\"unique\":\"a\"}\n").unwrap_err();
    assert!(e.starts_with("line 1: "), "{e}");
    let e = simulate("4/1h", "{\"key\":\"a\"}\n").unwrap_err();
    assert!(e.starts_with("line 1: "), "{e}");
    let e = simulate("4/3600", "").unwrap_err();
    assert!(e.contains("\"3600\" is not a time value"), "{e}");
    assert!(simulate("gcra: burst=0, rate=1/1s", "").is_err());
}

#[test]
fn opposite_key_orders_from_two_threads_do_not_deadlock() {
    let store = MemoryStore::new(MemoryConfig {
        shards: 2,
        ..MemoryConfig::default()
    });
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    std::thread::scope(|s| {
        for dir in 0..2 {
            let (store, keys) = (&store, &keys);
            s.spawn(move || {
                for n in 0..2000i64 {
                    let mut ks: Vec<&String> = keys.iter().collect();
                    if dir == 1 {
                        ks.reverse();
                    }
                    let limits = ks
                        .iter()
                        .map(|k| ewma(k, 1e9, UpdateMode::Strict, true))
                        .collect();
                    store.decide_at(n, &Decision { limits });
                }
            });
        }
    });
    // Every decision was applied to every key: 4000 strict events each.
    for k in &keys {
        let r = store.decide_at(
            2000,
            &Decision {
                limits: vec![ewma(k, 1e9, UpdateMode::Readonly, true)],
            },
        );
        assert!(r.limits[0].value > 3000.0, "{}", r.limits[0].value);
    }
}
