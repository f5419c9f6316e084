//! The restricted-set check costs no store call of its own at a MAIL FROM whose stage has a
//! storing limit: it rides in that decision (`decide_unless_restricted`; with Redis one
//! script call). Without one, or before a replayed or dry-run limit, it is one call of its
//! own. A restricted key's MAIL FROM is refused without charging its limits, and no
//! evaluation of it is told.

use crate::common::redis as redis_server;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::generation::Generation;
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::policy::alert::{Crossed, Evaluated, Observer};
use floodgate::policy::engine::Serving;
use floodgate::policy::notice::{Notifier, UserNotice};
use floodgate::policy::{Facts, Policy, RatePolicy, Stage, Verdict};
use floodgate::store::redis::{ConnectOptions, RedisOptions, RedisStore};
use floodgate::store::{
    Algorithm, Decision, DecisionResult, Guarded, LimitRequest, MemoryStore, Record, Restriction,
    Store, StoreFuture,
};

/// A memory store that counts the calls the policy makes.
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    decide: AtomicUsize,
    restricted: AtomicUsize,
    guarded: AtomicUsize,
}

impl Counting {
    fn calls(&self) -> (usize, usize, usize) {
        (
            self.decide.load(Ordering::SeqCst),
            self.restricted.load(Ordering::SeqCst),
            self.guarded.load(Ordering::SeqCst),
        )
    }
}

impl Store for Counting {
    fn decide<'a>(&'a self, d: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        self.decide.fetch_add(1, Ordering::SeqCst);
        self.inner.decide(d)
    }
    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        self.inner.inspect(key)
    }
    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        self.inner.reset(key)
    }
    fn may_restrict(&self) -> bool {
        self.inner.may_restrict()
    }
    fn restricted<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, Option<Restriction>> {
        self.restricted.fetch_add(1, Ordering::SeqCst);
        self.inner.restricted(keys)
    }
    fn restrict<'a>(&'a self, r: Restriction, dur: Option<i64>) -> StoreFuture<'a, Restriction> {
        self.inner.restrict(r, dur)
    }
    fn restrict_once<'a>(
        &'a self,
        r: Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (Restriction, bool)> {
        self.inner.restrict_once(r, dur)
    }
    fn decide_unless_restricted<'a>(
        &'a self,
        keys: &'a [String],
        d: &'a Decision,
    ) -> StoreFuture<'a, Guarded> {
        self.guarded.fetch_add(1, Ordering::SeqCst);
        self.inner.decide_unless_restricted(keys, d)
    }
}

#[derive(Default)]
struct Evaluations(Mutex<Vec<String>>);

impl Observer for Evaluations {
    fn evaluated(&self, e: &Evaluated<'_>) {
        self.0.lock().unwrap().push(e.def.name.clone());
    }
    fn crossed(&self, _: &Crossed<'_>) {}
}

/// Sends nothing.
struct Mute;

impl Notifier for Mute {
    fn notify(&self, _: UserNotice) {}
}

fn policy(limits: &str) -> (RatePolicy, Arc<Counting>, Arc<Evaluations>) {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n{limits}"
    );
    let config = Generation::parse(Path::new("/etc/floodgate/t.toml"), &text).unwrap();
    let store = Arc::new(Counting::default());
    let seen = Arc::new(Evaluations::default());
    let parts = Serving {
        observer: seen.clone(),
        paced: Arc::default(),
        notifier: Arc::new(Mute),
        held: Arc::new(|| None),
    };
    let p = RatePolicy::serving(config.policy, store.clone(), Arc::default(), parts);
    (p, store, seen)
}

fn alice() -> Facts {
    Facts {
        client_ip: Some("192.0.2.7".parse().unwrap()),
        user: Some("alice".into()),
        listener: "submission".into(),
        sender: Some("alice@example.org".into()),
        ..Facts::default()
    }
}

const RESTRICTING: &str = r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
stage = "mail"
key = "${authenticated_id}"
rate = "2 / 1h"
burst = "2"
action = "restrict"
"#;

fn restriction(key: &str) -> Restriction {
    Restriction {
        key: key.into(),
        limit: "admin".into(),
        since_us: 0,
        until_us: None,
        rate: None,
        limit_text: String::new(),
        by: "admin".into(),
        reason: "test".into(),
        evidence: serde_json::Value::Null,
    }
}

#[tokio::test]
async fn the_check_rides_in_the_mail_decision() {
    let (p, store, seen) = policy(RESTRICTING);
    let mut s = p.session();
    let v = s.check(Stage::Mail, &alice()).await;
    assert_eq!(v, Verdict::Continue);
    // One store call for the MAIL FROM: the guarded decision; no check of its own.
    assert_eq!(store.calls(), (0, 0, 1));
    assert_eq!(*seen.0.lock().unwrap(), ["per-user"]);

    // Restricted by hand: the next MAIL FROM is refused by that same one call, its limit
    // is not charged, and no evaluation is told.
    store
        .inner
        .restricted_set()
        .insert(restriction("alice"), None, 0);
    let records = store.inner.len();
    let mut s = p.session();
    let v = s.check(Stage::Mail, &alice()).await;
    match &v {
        Verdict::Reply(r) => assert_eq!(r.code, 450, "{r:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.calls(), (0, 0, 2));
    assert_eq!(seen.0.lock().unwrap().len(), 1);
    assert_eq!(store.inner.len(), records);
}

#[tokio::test]
async fn without_a_mail_limit_the_check_is_its_own_call() {
    // The limit counts at RCPT: the MAIL stage has nothing to decide.
    let (p, store, _) = policy(&RESTRICTING.replace("stage = \"mail\"", "stage = \"rcpt\""));
    let mut s = p.session();
    assert_eq!(s.check(Stage::Mail, &alice()).await, Verdict::Continue);
    assert_eq!(store.calls(), (0, 1, 0));
    store
        .inner
        .restricted_set()
        .insert(restriction("alice"), None, 0);
    let v = s.check(Stage::Mail, &alice()).await;
    assert!(matches!(v, Verdict::Reply(ref r) if r.code == 450), "{v:?}");
    assert_eq!(store.calls(), (0, 2, 0));
}

#[tokio::test]
async fn a_restricted_key_is_not_charged() {
    let (p, store, _) = policy(RESTRICTING);
    store
        .inner
        .restricted_set()
        .insert(restriction("alice"), None, 0);
    for _ in 0..5 {
        let mut s = p.session();
        let v = s.check(Stage::Mail, &alice()).await;
        assert!(matches!(v, Verdict::Reply(ref r) if r.code == 450), "{v:?}");
    }
    // Nothing was stored for alice's limit while she was restricted.
    assert_eq!(store.inner.len(), 0);
}

fn redis_store(url: &str) -> RedisStore {
    RedisStore::new(RedisOptions {
        connect: ConnectOptions {
            url: Some(url.to_string()),
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        },
        timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap()
}

fn quota(key: &str) -> Decision {
    Decision {
        limits: vec![LimitRequest {
            key: key.into(),
            algorithm: Algorithm::Gcra(
                GcraSpec::new(5.0, Rate::new(5.0, 3600.0).unwrap()).unwrap(),
            ),
            count: 1.0,
            unique: None,
            blocking: true,
        }],
    }
}

/// Redis: the guarded script applies the decision only when no candidate is restricted; an
/// expired restriction no longer restricts and is swept once, whichever node sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_guarded_decision_and_sweep() {
    let server = redis_server::RedisServer::start();
    let a = redis_store(&server.url());
    let b = redis_store(&server.url());
    let keys = vec!["alice".to_string(), "192.0.2.7".to_string()];
    match a.decide_guarded(&keys, &quota("q/alice")).await.unwrap() {
        Guarded::Decided(r) => assert!(!r.refused && r.limits[0].stored),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.inspect_key("q/alice").await.unwrap().len(), 1);
    // Restricted (by the client address) on node b: node a's next MAIL FROM is refused and
    // nothing is charged.
    b.restrict_key(&restriction("192.0.2.7"), Some(1_500_000))
        .await
        .unwrap();
    a.reset_key("q/alice").await.unwrap();
    match a.decide_guarded(&keys, &quota("q/alice")).await.unwrap() {
        Guarded::Restricted(r) => {
            assert_eq!(r.key, "192.0.2.7");
            assert!(r.until_us.is_some());
        }
        other => panic!("{other:?}"),
    }
    assert!(a.inspect_key("q/alice").await.unwrap().is_empty());
    // Made only once: a second restrict_once keeps it.
    let (kept, made) = a
        .restrict_key_once(&restriction("192.0.2.7"), None)
        .await
        .unwrap();
    assert!(!made);
    assert!(kept.until_us.is_some());
    // Nothing to sweep yet.
    assert!(a.sweep_restrictions().await.unwrap().is_empty());
    // Once over, it no longer restricts, and exactly one sweeper gets it.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert!(matches!(
        a.decide_guarded(&keys, &quota("q/alice")).await.unwrap(),
        Guarded::Decided(_)
    ));
    // An expired restriction is not released by the verb (the sweep tells of it).
    assert!(b.release_key("192.0.2.7").await.unwrap().is_none());
    let (x, y) = tokio::join!(a.sweep_restrictions(), b.sweep_restrictions());
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.len() + y.len(), 1, "{x:?} {y:?}");
    assert_eq!(x.iter().chain(&y).next().unwrap().key, "192.0.2.7");
    assert!(a.sweep_restrictions().await.unwrap().is_empty());
    assert!(a.restriction_list().await.unwrap().is_empty());
}
