//! Restrictions through a Redis outage: two floodgates share one real redis-server; a
//! restriction made before Redis stops keeps refusing (or holding) the account's mail on
//! both nodes whatever the failure mode; one made while Redis is down holds on the node that
//! made it and is recorded when Redis answers again, so the other node lists and enforces
//! it; a release made meanwhile wins over a restriction made before it; the failures of an
//! outage are logged once per interval with a count.
//!
//! Every wait is bounded; nothing here binds or connects beyond 127.0.0.1.

use crate::common;
use crate::common::redis::RedisServer;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::restrict::{codes, limit, send, users};
use common::*;
use floodgate::store::redis::{
    ConnectOptions, FailoverStore, FailurePolicy, Recorded, RedisOptions, RedisStore,
};
use floodgate::store::{Restriction, Store};
use serde_json::Value;

/// The `[store]` section and the restricting limit (5 messages an hour, then restricted
/// until released), with `while_restricted = "hold"` into `hold` when given.
fn config(redis: &RedisServer, mode: &str, hold: Option<&Path>) -> String {
    let mut s = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n\
         connect_timeout = \"300ms\"\nprobe_interval = \"100ms\"\nfailure_mode = \"{mode}\"\n{}",
        redis.url(),
        limit("until_released")
    );
    if let Some(dir) = hold {
        s.push_str(&format!(
            "while_restricted = \"hold\"\n\n[hold]\ndir = \"{}\"\n",
            dir.display()
        ));
    }
    s
}

fn start(rec: &Recorder, extra: &str) -> Floodgate {
    common::restrict::start(rec, extra)
}

/// Waits until `fg`'s copy of the restricted set holds `n` restrictions (its sweep lists
/// Redis every second).
fn wait_copied(fg: &Floodgate, n: usize) {
    let want = format!("floodgate_redis_restrictions_copied {n}");
    wait_until(Duration::from_secs(10), &want, || {
        admin_get(&fg.admin_socket(), "/metrics")
            .lines()
            .any(|l| l == want)
            .then_some(())
    });
}

/// The restrictions `fg` lists (`floodgate restricted --json`).
fn listed(fg: &Floodgate) -> Vec<Value> {
    admin_json(&fg.admin_socket(), &["restricted"])["restricted"]
        .as_array()
        .unwrap()
        .clone()
}

/// The messages `fg` holds for `key`.
fn held_for(fg: &Floodgate, key: &str) -> usize {
    admin_json(&fg.admin_socket(), &["held", "list"])["held"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["key"] == key && m["limit"] == "per-user")
        .count()
}

/// Alice restricted on node a with Redis up; Redis stops; both nodes keep answering her
/// as restricted (450 or held), in each failure mode, and nothing of hers reaches upstream.
fn restriction_outlives_the_outage(hold: bool) {
    for mode in ["open", "closed", "local"] {
        let mut redis = RedisServer::start();
        let rec = Recorder::start(users());
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let [a, b] = [0, 1].map(|i| {
            let spool = dirs[i].path().join("hold");
            std::fs::create_dir(&spool).unwrap();
            start(&rec, &config(&redis, mode, hold.then_some(spool.as_path())))
        });
        let first = send(a.addr("plain"), USER, PASSWORD, 6);
        let want = if hold { 250 } else { 450 };
        assert_eq!(codes(&first), [250, 250, 250, 250, 250, want], "{mode}");
        for fg in [&a, &b] {
            wait_copied(fg, 1);
        }
        let relayed = rec.messages().len();
        assert_eq!(relayed, 5, "{mode}");

        redis.kill();
        for (name, fg) in [("a", &a), ("b", &b)] {
            for _ in 0..2 {
                let r = send(fg.addr("plain"), USER, PASSWORD, 1);
                assert_eq!(codes(&r), [want], "{mode}, node {name}: {r:?}");
                if !hold {
                    assert!(r[0].1.contains("restricted since"), "{mode}: {r:?}");
                }
            }
            // Another user: the failure mode decides.
            let bob = send(fg.addr("plain"), "bob", "b0bpass", 1);
            let want_bob = if mode == "closed" { 451 } else { 250 };
            assert_eq!(codes(&bob), [want_bob], "{mode}, node {name}: {bob:?}");
            fg.wait_stderr("Redis unavailable", Duration::from_secs(10));
            // Listed from the node's copy while Redis cannot be read.
            let l = listed(fg);
            assert_eq!(l.len(), 1, "{mode}: {l:?}");
            assert_eq!(l[0]["key"], USER);
        }
        let bobs = if mode == "closed" { 0 } else { 2 };
        assert_eq!(
            rec.messages().len(),
            relayed + bobs,
            "{mode}: alice's mail leaked"
        );
        if hold {
            // The tripping message and the two during the outage on a, two on b.
            assert_eq!(held_for(&a, USER), 3, "{mode}");
            assert_eq!(held_for(&b, USER), 2, "{mode}");
        }
    }
}

#[test]
fn a_restriction_defers_on_both_nodes_through_an_outage_in_every_failure_mode() {
    restriction_outlives_the_outage(false);
}

#[test]
fn a_restriction_holds_on_both_nodes_through_an_outage_in_every_failure_mode() {
    restriction_outlives_the_outage(true);
}

/// Redis down; node a sees alice trip the limit (local failure mode counts on each node):
/// she is restricted on a at once, and when Redis is back (empty, as after a restart without
/// persistence) a records the restriction with its time, reason and evidence, and b lists
/// and enforces it.
#[test]
fn a_restriction_made_while_redis_is_down_is_recorded_when_it_returns() {
    let mut redis = RedisServer::start();
    let rec = Recorder::start(users());
    let a = start(&rec, &config(&redis, "local", None));
    let b = start(&rec, &config(&redis, "local", None));
    assert_eq!(codes(&send(b.addr("plain"), "bob", "b0bpass", 1)), [250]);

    redis.kill();
    let sent = send(a.addr("plain"), USER, PASSWORD, 6);
    assert_eq!(codes(&sent), [250, 250, 250, 250, 250, 450], "{sent:?}");
    a.wait_stderr(
        "restrict: Redis cannot be written; restricted on this node",
        Duration::from_secs(10),
    );
    let again = send(a.addr("plain"), USER, PASSWORD, 1);
    assert_eq!(codes(&again), [450], "{again:?}");
    let on_a = listed(&a);
    assert_eq!(on_a.len(), 1, "{on_a:?}");
    assert_eq!(on_a[0]["key"], USER);
    assert_eq!(rec.messages().len(), 6);

    redis.restart();
    let on_b = wait_until(Duration::from_secs(20), "b to list alice", || {
        let l = listed(&b);
        (!l.is_empty()).then_some(l)
    });
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    for field in ["key", "limit", "since", "until", "rate", "by", "reason"] {
        assert_eq!(
            on_b[0][field], on_a[0][field],
            "{field}: {on_b:?} vs {on_a:?}"
        );
    }
    // The evidence as a recorded it at the restriction; a's own listing goes on counting
    // live what it is offered and refuses since (the message refused after it).
    let (eb, ea) = (&on_b[0]["evidence"], &on_a[0]["evidence"]);
    for field in [
        "first_over",
        "since",
        "messages",
        "recipients",
        "client_ips",
        "subjects",
        "top_recipient_domains",
    ] {
        assert_eq!(
            eb[field], ea[field],
            "evidence {field}: {on_b:?} vs {on_a:?}"
        );
    }
    // Five relayed; the sixth, offered, tripped the limit.
    assert_eq!(eb["messages"], 5, "{on_b:?}");
    assert_eq!(eb["offered"], 6, "{on_b:?}");
    assert_eq!(ea["offered"], 7, "{on_a:?}");
    let r = send(b.addr("plain"), USER, PASSWORD, 1);
    assert_eq!(codes(&r), [450], "{r:?}");
    assert!(r[0].1.contains("restricted since"), "{r:?}");
    a.wait_stderr(
        "restriction made while Redis was away recorded in Redis",
        Duration::from_secs(10),
    );
    assert_eq!(rec.messages().len(), 6);
    // Released on b: a lets her mail through again.
    let out = admin_verb(&b.admin_socket(), &["release", USER, "--reason", "checked"]);
    assert!(out.ok(), "{out}");
    wait_until(Duration::from_secs(10), "a to let alice through", || {
        (codes(&send(a.addr("plain"), USER, PASSWORD, 1)) == [250]).then_some(())
    });
}

/// Closed failure mode, Redis down, nobody restricted: every MAIL FROM is answered 451 and
/// the failure is logged at once, then once more after 10 s with the count of the others.
#[test]
fn the_failures_of_an_outage_are_logged_once_per_interval_with_a_count() {
    let mut redis = RedisServer::start();
    let rec = Recorder::start(users());
    let fg = start(&rec, &config(&redis, "closed", None));
    assert_eq!(codes(&send(fg.addr("plain"), "bob", "b0bpass", 1)), [250]);
    redis.kill();
    for _ in 0..6 {
        assert_eq!(codes(&send(fg.addr("plain"), "bob", "b0bpass", 1)), [451]);
    }
    // The store's warning and the policy's 451, each: one line at once, one with the count
    // of the five others once the interval has passed (the sweep tells it each second).
    for text in [
        "restricted set not readable; keys this node's copy holds stay restricted",
        "restricted set unavailable; failing closed",
    ] {
        fg.wait_stderr(&format!("{text} (5 times"), Duration::from_secs(20));
        let log = fg.stderr();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(text)).collect();
        assert_eq!(lines.len(), 2, "{text}: {lines:#?}");
        assert!(!lines[0].contains(" times in the last "), "{lines:#?}");
        let secs: u64 = lines[1]
            .split("times in the last ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{lines:#?}"));
        assert!((10..20).contains(&secs), "{lines:#?}");
    }
}

fn redis_store(url: &str) -> RedisStore {
    RedisStore::new(RedisOptions {
        connect: ConnectOptions {
            url: Some(url.to_string()),
            connect_timeout: Duration::from_millis(300),
            ..Default::default()
        },
        timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap()
}

fn restriction(key: &str) -> Restriction {
    Restriction {
        key: key.into(),
        limit: "per-user".into(),
        since_us: 0,
        until_us: None,
        rate: Some(6.0),
        limit_text: "5 / 1h".into(),
        by: "limit per-user on a".into(),
        reason: "rate".into(),
        evidence: serde_json::json!({"messages": 6}),
    }
}

/// The rule for a restriction made while Redis was away (node a), recorded later: a release
/// of the key made since (node b) wins; a restriction Redis holds stays; else it is recorded
/// with its own times. Driven by hand: a's sweep runs when the test calls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_later_respects_a_release_made_meanwhile() {
    let mut server = RedisServer::start();
    let a = FailoverStore::new(
        Arc::new(redis_store(&server.url())),
        FailurePolicy::default(),
        Duration::from_millis(1),
    );
    let b = redis_store(&server.url());
    server.kill();
    let mut made = Vec::new();
    for key in ["alice", "carol", "dave"] {
        let (r, new) = a.restrict_once(restriction(key), None).await.unwrap();
        assert!(new, "{key}");
        made.push(r);
    }
    assert_eq!(a.stats().restrictions_pending, 3);
    tokio::time::sleep(Duration::from_millis(5)).await;
    server.restart();
    // Meanwhile, on b: alice released (she was not restricted there: the release is
    // remembered all the same), dave restricted by hand.
    assert_eq!(b.release_key("alice").await.unwrap(), None);
    let theirs = b.restrict_key(&restriction("dave"), None).await.unwrap();
    // a's sweep reaches Redis: alice is not recorded, carol is (with a's times), dave's
    // restriction on b stays.
    let mut ended = Vec::new();
    for _ in 0..50 {
        ended.extend(a.expire_restrictions().await.unwrap());
        if a.stats().restrictions_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ended.is_empty(), "{ended:?}");
    let s = a.stats();
    assert_eq!(s.restrictions_pending, 0);
    assert_eq!(
        s.recorded,
        [1, 1, 1, 0],
        "recorded, kept, released, expired"
    );
    let list = b.restriction_list().await.unwrap();
    let keys: Vec<&str> = list.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["carol", "dave"]);
    assert_eq!(list[0].since_us, made[1].since_us);
    assert_eq!(list[0].evidence, made[1].evidence);
    assert_eq!(list[1], theirs);
    assert!(a.restricted(&["alice".into()]).await.unwrap().is_none());
    // The script's answers, directly: a later release wins, an older one does not.
    let mut old = restriction("erin");
    old.since_us = floodgate::store::now_micros() - 1_000_000;
    assert!(matches!(
        b.record_restriction(&old).await.unwrap(),
        Recorded::Recorded(_)
    ));
    b.release_key("erin").await.unwrap().unwrap();
    assert!(matches!(
        b.record_restriction(&old).await.unwrap(),
        Recorded::Released(_)
    ));
    let mut newer = restriction("erin");
    newer.since_us = floodgate::store::now_micros() + 1_000_000;
    assert!(matches!(
        b.record_restriction(&newer).await.unwrap(),
        Recorded::Recorded(_)
    ));
    let mut ended_one = restriction("frank");
    ended_one.since_us = 1;
    ended_one.until_us = Some(2);
    assert_eq!(
        b.record_restriction(&ended_one).await.unwrap(),
        Recorded::Expired
    );
}
