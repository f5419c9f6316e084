//! Property tests of the engine (case counts kept at or below 256).

use floodgate::limit::bucket::{BucketOp, BucketSpec, BucketState, MessageClass, Multipliers};
use floodgate::limit::ewma::{self, EwmaParams, EwmaState};
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::limit::LimitSpec;
use floodgate::store::{Algorithm, Decision, LimitRequest, MemoryConfig, MemoryStore, Record};
use proptest::prelude::*;
use std::collections::HashMap;

fn mode() -> impl Strategy<Value = UpdateMode> {
    prop_oneof![
        Just(UpdateMode::Leaky),
        Just(UpdateMode::Strict),
        Just(UpdateMode::Readonly)
    ]
}

/// (gap in µs, count) pairs; gaps include 0 and jumps backwards.
fn events() -> impl Strategy<Value = Vec<(i64, f64)>> {
    proptest::collection::vec(
        (
            prop_oneof![
                Just(0i64),
                -5_000_000i64..0,
                0i64..10_000_000,
                0i64..10_000_000_000
            ],
            prop_oneof![Just(0.0), Just(1.0), 0.0f64..1e6],
        ),
        1..40,
    )
}

fn req(key: &str, limit: f64, period: u32, mode: UpdateMode, count: f64) -> LimitRequest {
    LimitRequest {
        key: key.to_string(),
        algorithm: Algorithm::Ewma {
            limit,
            period_secs: period,
            mode,
            unique_kind: UniqueKind::Bloom,
        },
        count,
        unique: None,
        blocking: true,
    }
}

fn stored_rate(store: &MemoryStore, key: &str) -> Option<f64> {
    store.inspect_key(key).into_iter().find_map(|r| match r {
        Record::Ewma(s) => Some(s.rate),
        _ => None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn rate_never_negative_and_leaky_never_stores_over(
        evs in events(), limit in 0.0f64..50.0, period in 1u32..100_000, m in mode()
    ) {
        let store = MemoryStore::default();
        let mut now = 1_600_000_000_000_000i64;
        for (gap, count) in evs {
            now += gap;
            let r = store.decide_at(now, &Decision { limits: vec![req("k", limit, period, m, count)] }).limits[0];
            prop_assert!(r.value >= 0.0, "rate {}", r.value);
            if m == UpdateMode::Leaky {
                if let Some(s) = stored_rate(&store, "k") {
                    prop_assert!(s < limit, "leaky stored {} >= {}", s, limit);
                }
            }
            if m == UpdateMode::Readonly {
                prop_assert!(!r.stored);
            }
        }
    }

    #[test]
    fn quiet_for_p_ln_rate_over_m_is_under(
        n in 1usize..60, gap in 0i64..2_000_000, limit in 1.5f64..20.0, period in 1u32..3600
    ) {
        let store = MemoryStore::default();
        let mut now = 0i64;
        let mut last = 0.0;
        for _ in 0..n {
            now += gap;
            last = store.decide_at(now, &Decision { limits: vec![req("k", limit, period, UpdateMode::Strict, 1.0)] }).limits[0].value;
        }
        // Quiet for p·ln(rate/m) (plus 1 ms for rounding to µs).
        let wait = if last > limit { f64::from(period) * (last / limit).ln() } else { 0.0 };
        let t = now + (wait * 1e6).ceil() as i64 + 1000;
        let r = store.decide_at(t, &Decision { limits: vec![req("k", limit, period, UpdateMode::Readonly, 0.0)] }).limits[0];
        prop_assert!(!r.over, "rate {} after waiting {} s from {}", r.value, wait, last);
    }

    #[test]
    fn retry_after_is_enough(
        n in 1usize..40, gap in 0i64..500_000, limit in 1.5f64..20.0, period in 1u32..3600, m in prop_oneof![Just(UpdateMode::Leaky), Just(UpdateMode::Strict)]
    ) {
        let store = MemoryStore::default();
        let mut now = 0i64;
        for _ in 0..n {
            now += gap;
            let r = store.decide_at(now, &Decision { limits: vec![req("k", limit, period, m, 1.0)] }).limits[0];
            if r.over {
                let wait = r.retry_after.expect("computable when limit > count");
                let t = now + wait.as_micros() as i64 + 1000;
                let probe = req("k", limit, period, UpdateMode::Readonly, 0.0);
                let check = store.decide_at(t, &Decision { limits: vec![probe] }).limits[0];
                prop_assert!(check.value + 1.0 < limit, "{} + 1 >= {}", check.value, limit);
                break;
            }
        }
    }

    #[test]
    fn store_from_two_threads_equals_pure_functions(
        evs in proptest::collection::vec((0usize..6, 0i64..3_000_000, prop_oneof![Just(1.0), 0.0f64..5.0]), 1..80),
        limit in 0.5f64..10.0, period in 1u32..600, m in mode()
    ) {
        // Reference: pure functions, one event after the other.
        let params = EwmaParams { limit, period_secs: period, mode: m };
        let mut model: HashMap<usize, EwmaState> = HashMap::new();
        let mut now = 0i64;
        let mut timed = Vec::new();
        let mut expect = Vec::new();
        for &(key, gap, count) in &evs {
            now += gap;
            timed.push((key, now, count));
            let out = ewma::evaluate(model.get(&key), now, count, &params);
            if out.store {
                model.insert(key, out.next);
            }
            expect.push((out.rate, out.over, out.store));
        }
        // The store, keys split over two threads (each key's order kept).
        let store = MemoryStore::new(MemoryConfig { shards: 4, ..MemoryConfig::default() });
        let run = |parity: usize| {
            timed
                .iter()
                .enumerate()
                .filter(|(_, (k, _, _))| k % 2 == parity)
                .map(|(i, &(k, t, c))| {
                    let r = store.decide_at(t, &Decision { limits: vec![req(&format!("key{k}"), limit, period, m, c)] }).limits[0];
                    (i, (r.value, r.over, r.stored))
                })
                .collect::<Vec<_>>()
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| run(0));
            let b = s.spawn(|| run(1));
            (a.join().unwrap(), b.join().unwrap())
        });
        let mut got = vec![(0.0, false, false); evs.len()];
        for (i, r) in a.into_iter().chain(b) {
            got[i] = r;
        }
        for (g, e) in got.iter().zip(&expect) {
            prop_assert_eq!(g.0.to_bits(), e.0.to_bits());
            prop_assert_eq!((g.1, g.2), (e.1, e.2));
        }
    }

    #[test]
    fn spec_parser_never_panics(s in "[0-9a-zA-Z/_=. ${}@-]{0,40}") {
        if let Ok(spec) = LimitSpec::parse(&s) {
            let again = LimitSpec::parse(&spec.to_string());
            prop_assert!(again.is_ok(), "{} -> {}", s, spec);
        }
    }

    #[test]
    fn spec_parser_never_panics_on_any_text(s in "\\PC{0,30}") {
        if let Ok(spec) = LimitSpec::parse(&s) {
            let again = LimitSpec::parse(&spec.to_string()).unwrap();
            prop_assert_eq!(again.database_key("k", "ip"), spec.database_key("k", "ip"));
        }
    }

    #[test]
    fn gcra_level_bounded(evs in proptest::collection::vec((0i64..2_000_000_000, 0.0f64..4.0), 1..60), burst in 1.0f64..20.0, per in 0.1f64..100.0) {
        let spec = GcraSpec::new(burst, Rate::new(per, 1.0).unwrap()).unwrap();
        let mut tat = None;
        let mut now = 0i64;
        for (gap, count) in evs {
            now += gap;
            let o = spec.evaluate(tat, now, count);
            if !o.over {
                prop_assert!(o.level <= burst + 1e-6);
                tat = Some(o.next_tat_ns);
            } else if let Some(wait) = o.retry_after_ns {
                // Waiting exactly the retry time admits the same event.
                prop_assert!(!spec.evaluate(tat, now + wait, count).over);
            }
        }
    }

    #[test]
    fn dynamic_bucket_never_deadlocks(verdicts in proptest::collection::vec(prop_oneof![Just(MessageClass::Spam), Just(MessageClass::Ham), Just(MessageClass::Other)], 0..400), burst in 1.0f64..20.0) {
        let spec = BucketSpec { burst, rate: Rate::new(1.0, 1.0).unwrap(), dynamic: Some(Multipliers::default()) };
        let mut st: Option<BucketState> = None;
        let mut now = 0.0;
        for v in verdicts {
            let o = spec.apply(st.as_ref(), now, 1.0, BucketOp::Check);
            st = Some(o.next);
            let o = spec.apply(st.as_ref(), now, 1.0, if o.over { BucketOp::Cancel } else { BucketOp::Commit(v) });
            st = Some(o.next);
            now += 10.0;
            prop_assert!(spec.capacity(&o.next) >= 1.0);
        }
        // After a long quiet time, one event always passes.
        let o = spec.apply(st.as_ref(), now + 1e9, 1.0, BucketOp::Check);
        prop_assert!(!o.over);
    }
}

/// A store with random records of every kind.
fn random_store(seed: &[(u8, u32, f64)]) -> MemoryStore {
    let store = MemoryStore::default();
    for (i, &(kind, v, x)) in seed.iter().enumerate() {
        let key = format!("key/{i}/{v}");
        let rec = match kind % 4 {
            0 => Record::Ewma(EwmaState {
                time_us: i64::from(v) * 1000,
                rate: x,
            }),
            1 => {
                let mut set = floodgate::limit::unique::UniqueSet::new(
                    if v % 2 == 0 {
                        UniqueKind::Bloom
                    } else {
                        UniqueKind::Exact
                    },
                    x,
                );
                set.insert(&format!("rcpt{v}"));
                Record::Unique(floodgate::store::UniqueRecord {
                    state: EwmaState {
                        time_us: i64::from(v),
                        rate: x,
                    },
                    created_s: i64::from(v) / 7,
                    set,
                })
            }
            2 => Record::Gcra {
                tat_ns: i64::from(v) * 7,
            },
            _ => Record::Bucket(BucketState {
                last_ms: x,
                level: x / 2.0,
                pending: 1.0,
                dyn_rate: v,
                dyn_burst: v / 3,
            }),
        };
        store.insert_record(&key, rec);
    }
    store
}

fn dump(store: &MemoryStore) -> Vec<String> {
    let mut v = Vec::new();
    store.for_each_record(|k, r| v.push(format!("{k} {r:?}")));
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn snapshot_round_trips(seed in proptest::collection::vec((0u8..4, 0u32..100_000, 0.0f64..500.0), 0..30)) {
        let store = random_store(&seed);
        let bytes = store.snapshot_bytes();
        let loaded = MemoryStore::default();
        let path = std::path::Path::new("mem");
        prop_assert_eq!(loaded.load_snapshot_bytes(path, &bytes).unwrap(), seed.len());
        prop_assert_eq!(dump(&loaded), dump(&store));
    }

    #[test]
    fn damaged_snapshots_are_refused(
        seed in proptest::collection::vec((0u8..4, 0u32..100_000, 0.0f64..500.0), 1..10),
        at in any::<proptest::sample::Index>(), flip in 1u8..=255, cut in any::<proptest::sample::Index>()
    ) {
        let bytes = random_store(&seed).snapshot_bytes();
        let path = std::path::Path::new("mem");
        let mut flipped = bytes.clone();
        flipped[at.index(bytes.len())] ^= flip;
        let fresh = MemoryStore::default();
        prop_assert!(fresh.load_snapshot_bytes(path, &flipped).is_err());
        prop_assert!(fresh.load_snapshot_bytes(path, &bytes[..cut.index(bytes.len())]).is_err());
        prop_assert!(fresh.is_empty());
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = b"FLOODGATE-STATE\n\x01\0\0\0".to_vec();
        b.extend_from_slice(&bytes);
        let _ = MemoryStore::default().load_snapshot_bytes(std::path::Path::new("mem"), &b);
        let _ = MemoryStore::default().load_snapshot_bytes(std::path::Path::new("mem"), &bytes);
    }

    #[test]
    fn random_payload_with_valid_checksum_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..300)) {
        use md5::{Digest, Md5};
        // Reach the record decoder: right magic, version, length and checksum.
        let mut b = b"FLOODGATE-STATE\n\x01\0\0\0".to_vec();
        b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        b.extend_from_slice(&payload);
        b.extend_from_slice(&Md5::digest(&payload));
        let store = MemoryStore::default();
        if store.load_snapshot_bytes(std::path::Path::new("mem"), &b).is_err() {
            prop_assert!(store.is_empty());
        }
    }
}
