//! The failure modes and the restricted set's copy with a Redis that never answers.

use super::*;
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::Rate;
use crate::store::{Algorithm, LimitRequest};

/// A failover store whose Redis refuses every connection (a closed loopback port).
fn unreachable(mode: FailureMode) -> FailoverStore {
    let redis = RedisStore::new(super::super::RedisOptions {
        connect: super::super::ConnectOptions {
            url: Some("redis://127.0.0.1:1".into()),
            connect_timeout: Duration::from_millis(200),
            ..Default::default()
        },
        timeout: Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap();
    FailoverStore::new(
        Arc::new(redis),
        FailurePolicy {
            default: mode,
            overrides: Vec::new(),
        },
        Duration::from_secs(3600),
    )
}

fn r(key: &str, until_us: Option<i64>) -> Restriction {
    Restriction {
        key: key.into(),
        limit: "per-user".into(),
        since_us: 1,
        until_us,
        rate: Some(6.0),
        limit_text: "5 / 1h".into(),
        by: "limit per-user on a".into(),
        reason: "rate".into(),
        evidence: serde_json::Value::Null,
    }
}

fn decision() -> Decision {
    Decision {
        limits: vec![LimitRequest {
            key: "1h/alice".into(),
            algorithm: Algorithm::Gcra(
                GcraSpec::new(5.0, Rate::new(5.0, 3600.0).unwrap()).unwrap(),
            ),
            count: 1.0,
            unique: None,
            blocking: true,
        }],
    }
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_copied_restriction_holds_in_every_failure_mode() {
    for mode in [FailureMode::Open, FailureMode::Closed, FailureMode::Local] {
        let f = unreachable(mode);
        let c = f.restricted_copy();
        c.refresh(c.begin_refresh(), vec![r("alice", None)], 0);
        assert!(f.may_restrict());
        let got = f.restricted(&keys(&["10.0.0.1", "alice"])).await.unwrap();
        assert_eq!(got.unwrap().key, "alice", "{mode:?}");
        // Redis is down now (the first call found out); the guarded decision too.
        assert!(f.stats().down);
        let g = f
            .decide_unless_restricted(&keys(&["alice"]), &decision())
            .await
            .unwrap();
        assert!(
            matches!(g, Guarded::Restricted(ref r) if r.key == "alice"),
            "{mode:?}"
        );
        // Another key: the failure mode decides.
        let other = f
            .decide_unless_restricted(&keys(&["bob"]), &decision())
            .await;
        match mode {
            FailureMode::Closed => assert!(matches!(other, Err(StoreError::Unavailable(_)))),
            _ => assert!(matches!(other, Ok(Guarded::Decided(_))), "{mode:?}"),
        }
        assert_eq!(
            f.restricted(&keys(&["bob"])).await.is_err(),
            mode == FailureMode::Closed
        );
    }
}

#[tokio::test]
async fn a_restriction_made_while_redis_is_away_is_kept_here() {
    let f = unreachable(FailureMode::Local);
    let (made, new) = f
        .restrict_once(r("alice", None), Some(3_600_000_000))
        .await
        .unwrap();
    assert!(new);
    assert!(made.since_us > 1, "stamped with this node's clock");
    assert_eq!(made.until_us, Some(made.since_us + 3_600_000_000));
    // Made once: a second restriction of the key answers the first.
    let (again, new) = f.restrict_once(r("alice", None), None).await.unwrap();
    assert!(!new);
    assert_eq!(again, made);
    assert_eq!(f.stats().restricted_here, 1);
    assert_eq!(f.stats().restrictions_pending, 1);
    let g = f
        .decide_unless_restricted(&keys(&["alice"]), &decision())
        .await
        .unwrap();
    assert_eq!(g, Guarded::Restricted(made.clone()));
    // Listed from the copy while Redis cannot be read.
    assert_eq!(f.restrictions().await.unwrap(), vec![made.clone()]);
    // By hand too.
    let bob = f.restrict(r("bob", None), None).await.unwrap();
    assert_eq!(bob.key, "bob");
    assert_eq!(f.stats().restricted_here, 2);
    // Only this node knew alice's: released here. A shared one needs Redis.
    assert_eq!(f.release("alice").await.unwrap(), Some(made));
    let c = f.restricted_copy();
    c.refresh(c.begin_refresh(), vec![r("carol", None)], 0);
    let err = f.release("carol").await.unwrap_err();
    assert!(
        err.to_string().contains("release it when Redis answers"),
        "{err}"
    );
    assert!(f.restricted(&keys(&["carol"])).await.unwrap().is_some());
    assert!(
        f.release("nobody").await.is_err(),
        "not known here: Redis must say"
    );
}

#[tokio::test]
async fn a_restriction_made_here_ends_at_its_time_and_is_told_by_the_sweep() {
    let f = unreachable(FailureMode::Local);
    let (made, _) = f
        .restrict_once(r("alice", None), Some(50_000))
        .await
        .unwrap();
    assert!(f.restricted(&keys(&["alice"])).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(f.restricted(&keys(&["alice"])).await.unwrap().is_none());
    let ended = f.expire_restrictions().await.unwrap();
    assert_eq!(ended, vec![made]);
    assert!(f.expire_restrictions().await.unwrap().is_empty());
    assert_eq!(f.stats().restrictions_pending, 0);
}

#[test]
fn longest_prefix_wins() {
    let p = FailurePolicy {
        default: FailureMode::Open,
        overrides: vec![
            ("1h/".into(), FailureMode::Local),
            ("1h/per_rcpt/".into(), FailureMode::Closed),
        ],
    };
    assert_eq!(p.mode_for("1d/x"), FailureMode::Open);
    assert_eq!(p.mode_for("1h/per_mail/x"), FailureMode::Local);
    assert_eq!(p.mode_for("1h/per_rcpt/x"), FailureMode::Closed);
    for w in ["open", "closed", "local"] {
        assert_eq!(FailureMode::parse(w).unwrap().as_str(), w);
    }
    assert_eq!(FailureMode::parse("x"), None);
}

#[tokio::test]
async fn campaigns_are_grouped_here_while_redis_is_away() {
    let join = |bands: &[&str], sender: &str| crate::store::CampaignJoin {
        values: keys(bands),
        link: true,
        sender: sender.into(),
        recipients: 1,
        info: "{}".into(),
        period_us: 3_600_000_000,
    };
    let f = unreachable(FailureMode::Local);
    f.campaign_join(&join(&["b1:a", "b2:a"], "s1"))
        .await
        .unwrap();
    let l = f
        .campaign_join(&join(&["b2:a", "b3:a"], "s2"))
        .await
        .unwrap();
    assert_eq!((l.id.as_str(), l.senders.len()), ("c:b1:a", 2));
    assert_eq!(
        f.campaign_mark(&l.id, "campaign", &keys(&["s1"]), 1)
            .await
            .unwrap(),
        crate::store::MarkAnswer::Found
    );
    assert_eq!(f.campaigns().await.unwrap()[0].copies, 2);
    // Failing closed, a message is not noted anywhere.
    let closed = unreachable(FailureMode::Closed);
    assert!(closed.campaign_join(&join(&["b1:a"], "s1")).await.is_err());
}
