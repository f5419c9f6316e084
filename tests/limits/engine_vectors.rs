//! Every test vector of exim-ratelimit.md §12, Exim test 0038's cache cases,
//! and Tony Finch's burst table (seed 000/001, reference §8).

use floodgate::limit::cache::SessionCache;
use floodgate::limit::ewma::burst_size;
use floodgate::limit::spec::{Acl, CountSource, UpdateMode};
use floodgate::limit::unique::UniqueKind;
use floodgate::limit::LimitSpec;
use floodgate::store::{Algorithm, Decision, LimitRequest, LimitResult, MemoryStore};

const T0: i64 = 1_700_000_000_000_000;

/// Microseconds for `t` seconds after T0, rounded like the simulate contract.
fn at(t: f64) -> i64 {
    T0 + (t * 1e6).round() as i64
}

fn request(spec: &LimitSpec, mode: UpdateMode, count: f64, unique: Option<&str>) -> LimitRequest {
    LimitRequest {
        key: spec.database_key("K", "192.0.2.1"),
        algorithm: Algorithm::Ewma {
            limit: spec.limit(),
            period_secs: spec.period_secs(),
            mode,
            unique_kind: UniqueKind::Bloom,
        },
        count,
        unique: unique.map(str::to_string),
        blocking: true,
    }
}

/// One uncached evaluation of `spec` in the RCPT ACL.
fn eval(
    store: &MemoryStore,
    spec: &str,
    t: f64,
    count: Option<f64>,
    unique: Option<&str>,
) -> LimitResult {
    let spec = LimitSpec::parse(spec).unwrap();
    let r = spec.resolve(Acl::Rcpt).unwrap();
    let c = match (count, r.count) {
        (Some(c), _) => c,
        (None, CountSource::Fixed(c)) => c,
        _ => panic!("count needed"),
    };
    let d = Decision {
        limits: vec![request(&spec, r.update, c, unique)],
    };
    store.decide_at(at(t), &d).limits[0]
}

/// `actual` equals `written` to the precision written.
fn close(actual: f64, written: &str) {
    let decimals = written.split('.').nth(1).map_or(0, str::len) as i32;
    let expect: f64 = written.parse().unwrap();
    let tol = 0.5 * 10f64.powi(-decimals) + 1e-12;
    assert!((actual - expect).abs() <= tol, "{actual} is not {written}");
}

fn series(spec: &str, times: &[f64], rates: &[&str], over: &[bool], stored: &[bool]) {
    let store = MemoryStore::default();
    for (i, &t) in times.iter().enumerate() {
        let r = eval(&store, spec, t, None, None);
        close(r.value, rates[i]);
        assert_eq!(r.over, over[i], "{spec} event {i} over");
        assert_eq!(r.stored, stored[i], "{spec} event {i} stored");
    }
}

const F: bool = false;
const T: bool = true;

#[test]
fn tv1_leaky() {
    series(
        "4/1h/per_rcpt/leaky",
        &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        &[
            "1.0", "1.99958", "2.99889", "3.99792", "4.99667", "4.99542", "4.99417",
        ],
        &[F, F, F, F, T, T, T],
        &[T, T, T, T, F, F, F],
    );
}

#[test]
fn tv2_strict() {
    series(
        "4/1h/per_rcpt/strict",
        &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        &[
            "1.0", "1.99958", "2.99889", "3.99792", "4.99667", "5.99514", "6.99334",
        ],
        &[F, F, F, F, T, T, T],
        &[T; 7],
    );
}

#[test]
fn tv3_same_instant() {
    series(
        "4/1h/per_rcpt",
        &[0.0; 5],
        &["1", "2.00000008", "3.00000017", "4.00000025", "4.00000025"],
        &[F, F, F, T, T],
        &[T, T, T, F, F],
    );
    series(
        "4/1d/per_rcpt",
        &[0.0; 5],
        &["1", "1.9976", "2.9952", "3.9928", "4.9904"],
        &[F, F, F, F, T],
        &[T, T, T, T, F],
    );
}

#[test]
fn tv3_spacing_table() {
    // §7: is the 4th of 5 events with m = 4 over, for spacings in µs?
    // The rounding noise depends on the absolute time stamps (the double
    // `sec + usec/1e6` loses µs bits at today's epoch values); the table
    // holds for time stamps counted from 0, which is what is used here.
    let cases: [(i64, [bool; 3]); 5] = [
        (1, [T, T, T]),
        (2, [F, T, T]),
        (5, [F, T, T]),
        (10, [F, F, T]),
        (100, [F, F, F]),
    ];
    for (spacing, expect) in cases {
        for (p, want) in ["10m", "1h", "1d"].iter().zip(expect) {
            let store = MemoryStore::default();
            let spec = LimitSpec::parse(&format!("4/{p}/per_rcpt")).unwrap();
            let mut fourth = None;
            for n in 0..4 {
                let d = Decision {
                    limits: vec![request(&spec, UpdateMode::Leaky, 1.0, None)],
                };
                fourth = Some(store.decide_at(n * spacing, &d).limits[0]);
            }
            assert_eq!(fourth.unwrap().over, want, "spacing {spacing} µs, p = {p}");
        }
    }
}

#[test]
fn tv4_limit_one_refuses_forever() {
    series(
        "1/15m/per_rcpt",
        &[0.0, 600.0, 1200.0, 5000.0],
        &["1.0"; 4],
        &[T; 4],
        &[F; 4],
    );
}

#[test]
fn tv5_zero_limit_strict() {
    series(
        "0/1h/strict",
        &[0.0, 0.5, 1.0],
        &["1.0", "1.99979", "2.99944"],
        &[T; 3],
        &[T; 3],
    );
}

#[test]
fn tv6_floor() {
    series(
        "2/1s/per_rcpt/strict",
        &[0.0, 0.05, 3.05],
        &["1.0", "1.92664", "1.0"],
        &[F, F, F],
        &[T; 3],
    );
}

#[test]
fn tv7_leaky_recovers() {
    series(
        "2/2s/per_rcpt/leaky",
        &[0.0, 0.1, 0.2, 3.0],
        &["1.0", "1.92664", "2.80809", "1.0"],
        &[F, F, T, F],
        &[T, T, F, T],
    );
}

#[test]
fn tv8_strict_recovery_time() {
    let spec = "2/10s/per_rcpt/strict";
    series(
        spec,
        &[0.0, 0.001, 0.002, 0.003, 0.004, 0.005],
        &["1.0", "2.0", "3.0", "4.0", "5.0", "5.99825"],
        &[F, F, T, T, T, T],
        &[T; 6],
    );
    let store = MemoryStore::default();
    for n in 0..6 {
        eval(&store, spec, n as f64 * 0.001, None, None);
    }
    let r = eval(&store, "2/10s/per_rcpt/readonly", 10.79, None, None);
    assert!(r.over && !r.stored, "{r:?}");
    // The retry time is p·ln(peak/m) from the last event ≈ 10.99 s.
    let wait = r.retry_after.unwrap().as_secs_f64();
    assert!(
        (wait + 10.79 - 0.005 - 10.0 * (5.99825f64 / 2.0).ln()).abs() < 1e-3,
        "{wait}"
    );
    let r = eval(&store, "2/10s/per_rcpt/readonly", 11.19, None, None);
    assert!(!r.over && !r.stored, "{r:?}");
}

#[test]
fn tv9_readonly() {
    let store = MemoryStore::default();
    for t in 0..4 {
        eval(&store, "4/1h/per_rcpt/leaky", t as f64, None, None);
    }
    let stored = eval(&store, "4/1h/per_rcpt/readonly", 3.0, None, None).value;
    close(stored, "3.99792");
    let r = eval(&store, "4/1h/per_rcpt/readonly", 603.0, None, None);
    assert!((r.value - stored * (-600.0f64 / 3600.0).exp()).abs() < 1e-9);
    assert!(!r.over && !r.stored);
    // Nothing was stored: the same reading again.
    assert_eq!(
        eval(&store, "4/1h/per_rcpt/readonly", 603.0, None, None).value,
        r.value
    );
    // 60m is a different key: a missing record reads 0.0.
    let r = eval(&store, "4/60m/per_rcpt/readonly", 4.0, None, None);
    assert_eq!((r.value, r.over), (0.0, false));
    assert!(eval(&store, "0/60m/per_rcpt/readonly", 4.0, None, None).over);
}

#[test]
fn tv10_count() {
    series(
        "10/1h/per_rcpt/count=3",
        &[0.0, 1.0, 2.0, 3.0],
        &["3.0", "5.99875", "8.99667", "11.99375"],
        &[F, F, F, T],
        &[T, T, T, F],
    );
}

#[test]
fn tv11_per_addr() {
    let store = MemoryStore::default();
    let rcpts = ["x", "x", "y", "x", "z", "z", "w", "w"];
    let rates = [
        "1.0", "0.99972", "1.99931", "1.99875", "2.99806", "2.99722", "3.99625", "3.99528",
    ];
    let seen = [F, T, F, T, F, T, F, F];
    for (i, rcpt) in rcpts.iter().enumerate() {
        let r = eval(&store, "3/1h/per_addr", i as f64, None, Some(rcpt));
        close(r.value, rates[i]);
        assert_eq!(r.seen, Some(seen[i]), "event {i}");
        assert_eq!(r.over, *rcpt == "w", "event {i}");
    }
    let spec = LimitSpec::parse("3/1h/per_addr").unwrap();
    assert_eq!(
        spec.database_key("", "192.0.2.1"),
        "1h/per_rcpt/unique/192.0.2.1"
    );
}

#[test]
fn tv11b_set_reset() {
    for (t, want) in [(61.0, false), (60.0, true)] {
        let store = MemoryStore::default();
        let spec = "10/60s/per_addr";
        assert_eq!(eval(&store, spec, 0.0, None, Some("x")).seen, Some(false));
        assert_eq!(eval(&store, spec, 30.0, None, Some("x")).seen, Some(true));
        assert_eq!(
            eval(&store, spec, t, None, Some("x")).seen,
            Some(want),
            "t = {t}"
        );
    }
}

#[test]
fn tv12_per_byte() {
    let store = MemoryStore::default();
    let spec = LimitSpec::parse("10K/1h/per_byte").unwrap();
    let r = spec.resolve(Acl::Mail).unwrap();
    assert_eq!(r.count, CountSource::MessageSize);
    let sizes = [4096.0, 4096.0, 4096.0, 0.0, 1000.0];
    let rates = ["4096.0", "8191.7", "12287.1", "8190.7", "9190.3"];
    let over = [F, F, T, F, F];
    for i in 0..5 {
        let d = Decision {
            limits: vec![request(&spec, r.update, sizes[i], None)],
        };
        let res = store.decide_at(at(0.2 * i as f64), &d).limits[0];
        close(res.value, rates[i]);
        assert_eq!(res.over, over[i]);
        assert_eq!(res.stored, !over[i]);
    }
}

/// Evaluates like an Exim ACL with the session cache (the policy layer's job).
fn acl_eval(
    store: &MemoryStore,
    cache: &mut SessionCache,
    spec: &str,
    acl: Acl,
    t: f64,
    count: f64,
) -> (f64, bool) {
    let spec = LimitSpec::parse(spec).unwrap();
    let r = spec.resolve(acl).unwrap();
    let req = request(
        &spec,
        r.update,
        if r.update == UpdateMode::Readonly {
            0.0
        } else {
            count
        },
        None,
    );
    if let Some(rate) = cache.get(r.cache, &req.key) {
        return (rate, rate >= spec.limit());
    }
    let res = store
        .decide_at(
            at(t),
            &Decision {
                limits: vec![req.clone()],
            },
        )
        .limits[0];
    cache.remember(r.cache, &req.key, res.value);
    (res.value, res.over)
}

#[test]
fn tv13_per_mail_in_rcpt_cached() {
    let store = MemoryStore::default();
    let mut cache = SessionCache::new();
    cache.start_connection();
    let mut t = 0.0;
    for (msg, rcpts, rate, over) in [(1, 3, "1.0", F), (2, 2, "2.0", F), (3, 2, "3.0", T)] {
        cache.reset_message();
        for _ in 0..rcpts {
            cache.start_command();
            let (r, o) = acl_eval(&store, &mut cache, "2/1h", Acl::Rcpt, t, 1.0);
            close(r, rate);
            assert_eq!(o, over, "message {msg}");
            t += 0.1;
        }
    }
}

#[test]
fn exim_0038_caches() {
    // per_mail in RCPT, then per_byte in DATA: answered from the message cache.
    let store = MemoryStore::default();
    let mut cache = SessionCache::new();
    cache.start_connection();
    cache.reset_message();
    cache.start_command();
    let (r, _) = acl_eval(&store, &mut cache, "0/1h/strict", Acl::Rcpt, 0.0, 1.0);
    assert_eq!(r, 1.0);
    cache.start_command();
    let (r, over) = acl_eval(
        &store,
        &mut cache,
        "0/1h/per_byte/strict",
        Acl::Data,
        1.0,
        19.0,
    );
    assert_eq!((r, over), (1.0, true));

    // readonly then leaky per_rcpt in the same RCPT: nothing is counted.
    let store = MemoryStore::default();
    cache.start_connection();
    cache.reset_message();
    cache.start_command();
    let (r, over) = acl_eval(
        &store,
        &mut cache,
        "1/1m/per_rcpt/noupdate",
        Acl::Rcpt,
        0.0,
        1.0,
    );
    assert_eq!((r, over), (0.0, false));
    let (r, over) = acl_eval(&store, &mut cache, "1/1m/per_rcpt", Acl::Rcpt, 0.0, 1.0);
    assert_eq!((r, over), (0.0, false));
    let key = LimitSpec::parse("1/1m/per_rcpt")
        .unwrap()
        .database_key("K", "192.0.2.1");
    assert!(store.inspect_key(&key).is_empty());

    // per_conn counts once per connection.
    let store = MemoryStore::default();
    for conn in 1..=2 {
        cache.start_connection();
        for cmd in 0..3 {
            cache.reset_message();
            cache.start_command();
            let (r, _) = acl_eval(
                &store,
                &mut cache,
                "0/1h/per_conn/strict",
                Acl::Rcpt,
                conn as f64 + cmd as f64 * 0.01,
                1.0,
            );
            close(r, &format!("{conn}.0"));
        }
    }
}

#[test]
fn finch_burst_table_formula() {
    // (p, m) columns and the table's n values per interval i.
    let intervals = [0.001, 1.0, 10.0, 60.0, 300.0, 600.0];
    let columns: [(f64, f64, [&str; 6]); 4] = [
        (86400.0, 100.0, ["100", "100", "101", "104", "123", "171"]),
        (
            18000.0,
            20.0,
            ["20", "20.01", "20.1", "20.7", "24.3", "33.0"],
        ),
        (3600.0, 4.0, ["4", "4.002", "4.02", "4.14", "4.87", "6.59"]),
        (900.0, 1.0, ["1", "1.001", "1.01", "1.03", "1.21", "1.65"]),
    ];
    for (p, m, ns) in columns {
        for (i, n) in intervals.iter().zip(ns) {
            let got = burst_size(p, m, *i, 0.0);
            // The seed's table is rounded or truncated to its last digit.
            let decimals = n.split('.').nth(1).map_or(0, str::len) as i32;
            let want: f64 = n.parse().unwrap();
            assert!((got - want).abs() <= 10f64.powi(-decimals), "{got} vs {n}");
            // The pure EWMA from rate 0, event by event, passes floor(n) events.
            let a = (-i / p).exp();
            let rk = p / i;
            let (mut r, mut passed) = (0.0f64, 0);
            loop {
                r = (1.0 - a) * rk + a * r;
                if r >= m {
                    break;
                }
                passed += 1;
            }
            assert_eq!(passed, got.floor() as i32, "p={p} m={m} i={i}");
        }
    }
}

#[test]
fn finch_burst_table_exim_semantics() {
    // Reference §8: a fresh key under Exim semantics (leaky, floor, start at count).
    for (p, m, i, want) in [
        ("1h", 4.0, 1.0, 4),
        ("1d", 100.0, 60.0, 103),
        ("15m", 1.0, 600.0, 0),
    ] {
        let store = MemoryStore::default();
        let spec = format!("{m}/{p}/per_rcpt");
        let mut passed = 0;
        for n in 0..400 {
            if eval(&store, &spec, n as f64 * i, None, None).over {
                break;
            }
            passed += 1;
        }
        assert_eq!(passed, want, "{spec} at {i} s");
    }
}
