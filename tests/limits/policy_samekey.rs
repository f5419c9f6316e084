//! Exim's result cache within one check: two limits of one stage whose Exim specs give the
//! same database key (and the same cache) are one evaluation, as in Exim (exim-ratelimit.md
//! §4 step 1): the later one is answered from the earlier one's rate with its own m, and
//! nothing more is counted.

use crate::common::redis as redis_server;
use crate::support::{facts, ok};

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use floodgate::generation::Generation;
use floodgate::limit::ewma::next_rate;
use floodgate::policy::{Policy, RatePolicy, SessionPolicy, Stage, Verdict};
use floodgate::store::redis::{ConnectOptions, RedisOptions, RedisStore};
use floodgate::store::{
    Decision, DecisionResult, MemoryStore, Record, Store, StoreError, StoreFuture,
};

const HEAD: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
"#;

/// 2023-11-14T22:13:20Z, a whole second.
const T0: i64 = 1_700_000_000_000_000;
/// 36 s: x = i/p = 0.01 at p = 1h.
const GAP: i64 = 36_000_000;

/// A memory store on the test's clock, so that every decay is exact and known.
struct FixedStore {
    inner: MemoryStore,
    clock: Arc<AtomicI64>,
}

impl Store for FixedStore {
    fn decide<'a>(&'a self, d: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        let r = d
            .validate()
            .map(|()| self.inner.decide_at(self.clock.load(Ordering::SeqCst), d));
        Box::pin(std::future::ready(r))
    }
    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        Box::pin(std::future::ready(Ok(self.inner.inspect_key(key))))
    }
    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        Box::pin(std::future::ready(Ok::<_, StoreError>(
            self.inner.reset_key(key),
        )))
    }
}

/// A Redis store on the test's clock.
struct FixedRedis {
    inner: RedisStore,
    clock: Arc<AtomicI64>,
}

impl Store for FixedRedis {
    fn decide<'a>(&'a self, d: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        Box::pin(
            self.inner
                .decide_at(Some(self.clock.load(Ordering::SeqCst)), d),
        )
    }
    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        self.inner.inspect(key)
    }
    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        self.inner.reset(key)
    }
}

struct Rig {
    policy: RatePolicy,
    store: Arc<FixedStore>,
    clock: Arc<AtomicI64>,
}

impl Rig {
    fn new(limits: &str) -> Rig {
        let cfg = Generation::parse(
            Path::new("/etc/floodgate/t.toml"),
            &format!("{HEAD}{limits}"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let clock = Arc::new(AtomicI64::new(T0));
        let store = Arc::new(FixedStore {
            inner: MemoryStore::default(),
            clock: clock.clone(),
        });
        let tick = clock.clone();
        let policy = RatePolicy::with_clock(
            cfg.policy,
            store.clone(),
            Arc::new(move || tick.load(Ordering::SeqCst)),
        );
        Rig {
            policy,
            store,
            clock,
        }
    }

    fn advance(&self, us: i64) {
        self.clock.fetch_add(us, Ordering::SeqCst);
    }

    fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// The stored EWMA record of `key`: (time, rate).
    fn ewma(&self, key: &str) -> Option<(i64, f64)> {
        self.store
            .inner
            .inspect_key(key)
            .into_iter()
            .find_map(|r| match r {
                Record::Ewma(s) => Some((s.time_us, s.rate)),
                Record::Unique(u) => Some((u.state.time_us, u.state.rate)),
                _ => None,
            })
    }
}

/// The reply text of a refusal, "" when the command goes on.
fn text(v: &Verdict) -> String {
    match v {
        Verdict::Reply(r) | Verdict::Disconnect(r) => format!("{} {}", r.code, r.text()),
        Verdict::Continue => String::new(),
        other => format!("{other:?}"),
    }
}

/// The X-Floodgate-Rate header of limit `name`, "" if none.
fn header(s: &mut Box<dyn SessionPolicy>, name: &str) -> String {
    s.message_headers()
        .into_iter()
        .find(|h| h.starts_with(&format!("X-Floodgate-Rate: {name};")))
        .unwrap_or_default()
}

/// `$sender_rate`'s rounding.
fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// One EWMA step at p = 1h after `gap` µs from `prev` (Exim §4 step 4).
fn step(prev: Option<(i64, f64)>, now: i64, count: f64) -> f64 {
    let st = prev.map(|(t, r)| floodgate::limit::ewma::EwmaState {
        time_us: t,
        rate: r,
    });
    next_rate(st.as_ref(), now, count, 3600)
}

/// A warn at 2 and a defer at 4 on the same per_mail strict key count each message once.
///
/// One MAIL every 36 s at p = 1h: x = 0.01, a = e^-0.01 = 0.990050, (1 - a)/x = 0.995017,
/// so rate(n+1) = 0.995017 + 0.990050 · rate(n):
///   MAIL 1: 1 (new key)             warn no,  defer no
///   MAIL 2: 1.985066                warn no,  defer no
///   MAIL 3: 2.960331                warn yes, defer no
///   MAIL 4: 3.925892                warn yes, defer no
///   MAIL 5: 4.881846                warn yes, defer yes (strict: stored anyway)
/// With every MAIL counted twice the defer would already answer at MAIL 3 (about 5.9).
#[tokio::test]
async fn per_mail_warn_and_defer_count_each_message_once() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "warn"
ratelimit = "2 / 1h / per_mail / strict"
stage = "mail"
action = "header"
[[limit]]
name = "defer"
ratelimit = "4 / 1h / per_mail / strict"
stage = "mail"
message = "4.7.1 rate ${sender_rate} limit ${sender_rate_limit}"
"#,
    );
    let f = facts("192.0.2.1");
    let key = "1h/per_mail/192.0.2.1";
    let mut prev: Option<(i64, f64)> = None;
    let expected = [1.0, 1.985066, 2.960331, 3.925892, 4.881846];
    for (n, want) in expected.into_iter().enumerate() {
        if n > 0 {
            rig.advance(GAP);
        }
        let mut s = rig.policy.session();
        let v = s.check(Stage::Mail, &f).await;
        let rate = step(prev, rig.now(), 1.0);
        assert!((rate - want).abs() < 1e-6, "MAIL {}: formula {rate}", n + 1);
        // Stored once, exactly the formula's rate at this instant.
        assert_eq!(rig.ewma(key), Some((rig.now(), rate)), "MAIL {}", n + 1);
        prev = Some((rig.now(), rate));
        let warn_over = if rate >= 2.0 { "yes" } else { "no" };
        assert_eq!(
            header(&mut s, "warn"),
            format!(
                "X-Floodgate-Rate: warn; rate={}; limit=2; period=1h; over={warn_over}",
                round1(rate)
            ),
            "MAIL {}",
            n + 1
        );
        if rate >= 4.0 {
            assert_eq!(
                text(&v),
                format!("450 4.7.1 rate {} limit 4", round1(rate)),
                "MAIL {}",
                n + 1
            );
        } else {
            assert_eq!(text(&v), "", "MAIL {}", n + 1);
            s.after_upstream(Stage::Mail, &f, &ok()).await;
        }
    }
}

/// Exim's rates for one event every 36 s at p = 1h starting on a new key (see above).
const SEQ: [f64; 6] = [
    1.0,
    1.985066458832357,
    2.960331342631215,
    3.925892178697676,
    4.881845523919982,
    5.828286974429289,
];

/// RCPT (per-command cache): a strict per_rcpt pair counts each recipient once; the fifth
/// recipient is at 4.88 >= 4 and deferred (and, strict, still counted once).
#[tokio::test]
async fn per_rcpt_pair_in_rcpt_counts_each_recipient_once() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "warn"
ratelimit = "2 / 1h / per_rcpt / strict"
action = "warn"
[[limit]]
name = "defer"
ratelimit = "4 / 1h / per_rcpt / strict"
message = "4.7.1 rate ${sender_rate}"
"#,
    );
    let f = facts("192.0.2.2");
    let key = "1h/per_rcpt/192.0.2.2";
    let mut s = rig.policy.session();
    assert_eq!(text(&s.check(Stage::Mail, &f).await), "");
    for (n, want) in SEQ[..5].iter().enumerate() {
        if n > 0 {
            rig.advance(GAP);
        }
        let v = s.check(Stage::Rcpt, &f).await;
        let (_, rate) = rig.ewma(key).expect("stored");
        assert!((rate - want).abs() < 1e-12, "RCPT {}: {rate}", n + 1);
        if n < 4 {
            assert_eq!(text(&v), "", "RCPT {}", n + 1);
            s.after_upstream(Stage::Rcpt, &f, &ok()).await;
        } else {
            assert_eq!(text(&v), "450 4.7.1 rate 4.9");
        }
    }
}

/// Leaky per_rcpt pair: the first is replayed over the pending recipients, the second is
/// answered from its rate; on acceptance each recipient is charged once (not twice).
/// (The defer comes first: a leaky limit that is over does not store the event, so a
/// leaky warn at 2 first would, as in Exim, stop counting from the third recipient.)
#[tokio::test]
async fn leaky_per_rcpt_pair_is_charged_once() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "defer"
ratelimit = "4 / 1h / per_rcpt / leaky"
message = "4.7.1 rate ${sender_rate}"
[[limit]]
name = "warn"
ratelimit = "2 / 1h / per_rcpt / leaky"
action = "header"
"#,
    );
    let f = facts("192.0.2.3");
    let key = "1h/per_rcpt/192.0.2.3";
    let mut s = rig.policy.session();
    assert_eq!(text(&s.check(Stage::Mail, &f).await), "");
    // Replayed at the check times: 1, 1.99, 2.96, 3.93 pass; the fifth is 4.88 >= 4. The
    // warn header is answered from the defer limit's replayed rate with its own m.
    for (n, want) in SEQ[..5].iter().enumerate() {
        if n > 0 {
            rig.advance(GAP);
        }
        let v = s.check(Stage::Rcpt, &f).await;
        let warn_over = if *want >= 2.0 { "yes" } else { "no" };
        assert_eq!(
            header(&mut s, "warn"),
            format!(
                "X-Floodgate-Rate: warn; rate={}; limit=2; period=1h; over={warn_over}",
                round1(*want)
            ),
            "RCPT {}",
            n + 1
        );
        if n < 4 {
            assert_eq!(text(&v), "", "RCPT {}", n + 1);
            s.after_upstream(Stage::Rcpt, &f, &ok()).await;
        } else {
            assert_eq!(text(&v), "450 4.7.1 rate 4.9");
        }
    }
    assert_eq!(rig.ewma(key), None, "nothing charged before acceptance");
    s.after_upstream(Stage::Message, &f, &ok()).await;
    // The four accepted recipients, charged one by one at commit time (one instant: Exim's
    // 1e-9 s interval, whose rounding moves each by ~1e-7), so about 4; twice would be 8.
    let (_, rate) = rig.ewma(key).expect("charged");
    assert!((3.999..4.001).contains(&rate), "charged once each: {rate}");
}

/// per_conn (connection cache): counted once per connection by the pair; the fifth
/// connection is at 4.88 >= 4.
#[tokio::test]
async fn per_conn_pair_counts_each_connection_once() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "warn"
ratelimit = "2 / 1h / per_conn / strict"
stage = "connect"
action = "warn"
[[limit]]
name = "defer"
ratelimit = "4 / 1h / per_conn / strict"
stage = "connect"
message = "4.7.1 rate ${sender_rate}"
"#,
    );
    let f = facts("192.0.2.4");
    let key = "1h/per_conn/192.0.2.4";
    for (n, want) in SEQ[..5].iter().enumerate() {
        if n > 0 {
            rig.advance(GAP);
        }
        let mut s = rig.policy.session();
        let v = s.check(Stage::Connect, &f).await;
        let (_, rate) = rig.ewma(key).expect("stored");
        assert!((rate - want).abs() < 1e-12, "connection {}: {rate}", n + 1);
        if n < 4 {
            assert_eq!(text(&v), "", "connection {}", n + 1);
        } else {
            assert_eq!(text(&v), "421 4.7.1 rate 4.9");
        }
    }
}

/// Exim test 0038: a readonly check followed in the same command by a strict per_rcpt
/// check of the same key: the second is answered from the readonly result (the decayed
/// stored rate) and nothing is counted, ever.
#[tokio::test]
async fn readonly_then_strict_in_rcpt_counts_nothing() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "look"
ratelimit = "2 / 1h / per_rcpt / readonly"
action = "header"
[[limit]]
name = "defer"
ratelimit = "4 / 1h / per_rcpt / strict"
message = "4.7.1 rate ${sender_rate}"
"#,
    );
    let f = facts("192.0.2.5");
    let key = "1h/per_rcpt/192.0.2.5";
    let seeded = floodgate::limit::ewma::EwmaState {
        time_us: T0,
        rate: 4.5,
    };
    rig.store.inner.insert_record(key, Record::Ewma(seeded));
    let mut s = rig.policy.session();
    assert_eq!(text(&s.check(Stage::Mail, &f).await), "");
    // 36 s later: 4.5 · e^-0.01 = 4.455223 >= 4: deferred, not counted.
    rig.advance(GAP);
    let v = s.check(Stage::Rcpt, &f).await;
    let decayed = 4.5 * (-0.01f64).exp();
    assert_eq!(text(&v), format!("450 4.7.1 rate {}", round1(decayed)));
    assert_eq!(rig.ewma(key), Some((T0, 4.5)), "nothing counted");
    // 432 s after the seed: 4.5 · e^-0.12 = 3.991 < 4: passes, still nothing counted.
    rig.advance(11 * GAP);
    for _ in 0..3 {
        let v = s.check(Stage::Rcpt, &f).await;
        assert_eq!(text(&v), "");
        assert_eq!(
            header(&mut s, "look"),
            "X-Floodgate-Rate: look; rate=4; limit=2; period=1h; over=yes"
        );
        s.after_upstream(Stage::Rcpt, &f, &ok()).await;
    }
    assert_eq!(rig.ewma(key), Some((T0, 4.5)), "nothing counted");
}

/// The reverse order: strict first, then readonly in the same command: the readonly check
/// (per-command cache) is answered from the fresh rate itself. On a new key with m = 1 the
/// fresh rate is exactly 1, so it is over; reading the record back 1e-9 s later would give
/// 0.99999999999972 and not be over.
#[tokio::test]
async fn strict_then_readonly_in_rcpt_sees_the_fresh_rate() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "count"
ratelimit = "10 / 1h / per_rcpt / strict"
action = "header"
[[limit]]
name = "look"
ratelimit = "1 / 1h / per_rcpt / readonly"
action = "header"
"#,
    );
    let f = facts("192.0.2.6");
    let mut s = rig.policy.session();
    assert_eq!(text(&s.check(Stage::Mail, &f).await), "");
    assert_eq!(text(&s.check(Stage::Rcpt, &f).await), "");
    assert_eq!(
        header(&mut s, "look"),
        "X-Floodgate-Rate: look; rate=1; limit=1; period=1h; over=yes"
    );
    assert_eq!(rig.ewma("1h/per_rcpt/192.0.2.6"), Some((T0, 1.0)));
}

/// The alias is over and blocking while the first is not: the decision is refused as a
/// whole, so a leaky limit on another key in it is not charged; the strict first one is
/// (Exim charges strict attempts).
#[tokio::test]
async fn alias_refusal_is_all_or_nothing() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "count"
ratelimit = "10 / 1h / per_mail / strict"
stage = "mail"
action = "header"
[[limit]]
name = "other"
ratelimit = "5 / 1h / per_mail / leaky / other-${client_ip}"
stage = "mail"
action = "header"
[[limit]]
name = "defer"
ratelimit = "1 / 1h / per_mail / strict"
stage = "mail"
message = "4.7.1 rate ${sender_rate} over ${sender_rate_limit}"
"#,
    );
    let f = facts("192.0.2.7");
    let mut s = rig.policy.session();
    let v = s.check(Stage::Mail, &f).await;
    assert_eq!(text(&v), "450 4.7.1 rate 1 over 1");
    assert_eq!(rig.ewma("1h/per_mail/192.0.2.7"), Some((T0, 1.0)));
    assert_eq!(
        rig.ewma("1h/per_mail/other-192.0.2.7"),
        None,
        "leaky not charged"
    );
    assert_eq!(
        header(&mut s, "count"),
        "X-Floodgate-Rate: count; rate=1; limit=10; period=1h; over=no"
    );
}

/// Different period texts give different keys: no aliasing, both are charged.
#[tokio::test]
async fn different_keys_are_both_charged() {
    let rig = Rig::new(
        r#"
[[limit]]
name = "hour"
ratelimit = "2 / 1h / per_mail / strict"
stage = "mail"
action = "header"
[[limit]]
name = "sixty"
ratelimit = "4 / 60m / per_mail / strict"
stage = "mail"
action = "header"
"#,
    );
    let f = facts("192.0.2.8");
    for (n, want) in SEQ[..3].iter().enumerate() {
        if n > 0 {
            rig.advance(GAP);
        }
        let mut s = rig.policy.session();
        assert_eq!(text(&s.check(Stage::Mail, &f).await), "");
        for key in ["1h/per_mail/192.0.2.8", "60m/per_mail/192.0.2.8"] {
            let (_, rate) = rig.ewma(key).expect("stored");
            assert!((rate - want).abs() < 1e-12, "MAIL {} {key}: {rate}", n + 1);
        }
    }
}

/// The same through the Redis store (the decision script answers the alias): a strict
/// per_mail pair counts each message once, and the alias refusing the fifth MAIL leaves a
/// leaky limit on another key of the same decision uncharged.
#[test]
fn redis_store_counts_once_and_refuses_all_or_nothing() {
    let server = redis_server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let cfg = Generation::parse(
        Path::new("/etc/floodgate/t.toml"),
        &format!(
            r#"{HEAD}
[[limit]]
name = "warn"
ratelimit = "2 / 1h / per_mail / strict"
stage = "mail"
action = "header"
[[limit]]
name = "other"
ratelimit = "100 / 1h / per_mail / leaky / other-${{client_ip}}"
stage = "mail"
action = "header"
[[limit]]
name = "defer"
ratelimit = "4 / 1h / per_mail / strict"
stage = "mail"
message = "4.7.1 rate ${{sender_rate}}"
"#
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let redis = RedisStore::new(RedisOptions {
        connect: ConnectOptions {
            url: Some(server.url()),
            connect_timeout: std::time::Duration::from_secs(5),
            ..Default::default()
        },
        timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    })
    .unwrap();
    let clock = Arc::new(AtomicI64::new(T0));
    let store = Arc::new(FixedRedis {
        inner: redis,
        clock: clock.clone(),
    });
    let tick = clock.clone();
    let policy = RatePolicy::with_clock(
        cfg.policy,
        store.clone(),
        Arc::new(move || tick.load(Ordering::SeqCst)),
    );
    let f = facts("192.0.2.9");
    let rate_of = |key: &'static str| {
        let store = store.clone();
        async move {
            store
                .inspect(key)
                .await
                .unwrap()
                .into_iter()
                .find_map(|r| match r {
                    Record::Ewma(s) => Some(s.rate),
                    _ => None,
                })
        }
    };
    rt.block_on(async {
        for (n, want) in SEQ[..5].iter().enumerate() {
            if n > 0 {
                clock.fetch_add(GAP, Ordering::SeqCst);
            }
            let mut s = policy.session();
            let v = s.check(Stage::Mail, &f).await;
            let rate = rate_of("1h/per_mail/192.0.2.9").await.expect("stored");
            assert!((rate - want).abs() < 1e-12, "MAIL {}: {rate}", n + 1);
            let other = rate_of("1h/per_mail/other-192.0.2.9")
                .await
                .expect("stored");
            // The leaky limit on the other key saw the first four MAILs only.
            assert!(
                (other - SEQ[n.min(3)]).abs() < 1e-12,
                "MAIL {}: {other}",
                n + 1
            );
            if n < 4 {
                assert_eq!(text(&v), "", "MAIL {}", n + 1);
            } else {
                assert_eq!(text(&v), "450 4.7.1 rate 4.9");
            }
        }
    });
}
