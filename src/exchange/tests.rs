//! The choreography driven against the real rate-limit policy on an in-process store.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::policy::{Policy, RatePolicy};
use crate::store::{MemoryConfig, MemoryStore};

/// A policy with `limits` on a fresh memory store.
fn policy(limits: &str) -> RatePolicy {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n\
         [hold]\ndir = \"/var/lib/floodgate/hold\"\n{limits}"
    );
    let c = crate::config::Config::parse(std::path::Path::new("/etc/floodgate/t.toml"), &text)
        .unwrap_or_else(|e| panic!("{e}"));
    let model = crate::policy::compile(&c).unwrap_or_else(|e| panic!("{e}"));
    RatePolicy::new(
        Arc::new(model),
        Arc::new(MemoryStore::new(MemoryConfig::default())),
    )
}

const PER_RCPT: &str = r#"
[[limit]]
name = "rcpts"
stage = "rcpt"
ratelimit = "5 / 1h / per_rcpt / leaky / ${authenticated_id}"
action = "defer"
"#;

fn exchange(p: &RatePolicy) -> Exchange {
    let facts = Facts {
        client_ip: Some("192.0.2.7".parse().unwrap()),
        user: Some("alice@example.org".into()),
        ..Facts::default()
    };
    Exchange::new(p.session(), facts)
}

/// One transaction of `n` recipients through the policy service's choreography (asked at
/// RCPT only, Postfix going on); the acts of the recipients.
async fn recipients(x: &mut Exchange, n: usize) -> Vec<Act> {
    x.facts_mut().sender = Some("alice@example.org".into());
    let mut acts = Vec::new();
    for i in 0..n {
        x.facts_mut().recipient = Some(format!("r{i}@example.com"));
        let act = x.ask_through(Stage::Rcpt).await;
        if act.goes_on() {
            x.hear(Stage::Rcpt, &continued(Stage::Rcpt, None)).await;
        }
        acts.push(act);
    }
    acts
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn abandoned_transactions_are_not_charged() {
    rt().block_on(async {
        let p = policy(PER_RCPT);
        let mut x = exchange(&p);
        for _ in 0..10 {
            let acts = recipients(&mut x, 2).await;
            assert!(acts.iter().all(|a| *a == Act::Go), "{acts:?}");
            x.abandon();
        }
        // Two messages of two recipients accepted: of the next two recipients, the one at
        // the limit of 5 or the one past it is refused (which one is on the rate's last bits:
        // two checks within one microsecond make Exim's rate a hair under the count).
        for _ in 0..2 {
            recipients(&mut x, 2).await;
            assert_eq!(x.ask_through(Stage::Message).await, Act::Go);
            x.hear(Stage::Message, &continued(Stage::Message, Some("4AbC")))
                .await;
            assert!(!x.in_transaction());
        }
        let acts = recipients(&mut x, 2).await;
        assert!(
            acts.iter()
                .any(|a| matches!(a, Act::Refuse(r) if r.code / 100 == 4)),
            "{acts:?}"
        );
    });
}

#[test]
fn asking_through_asks_each_earlier_stage_once() {
    rt().block_on(async {
        let p = policy(PER_RCPT);
        let mut x = exchange(&p);
        assert!(!x.was_asked(Stage::Connect));
        recipients(&mut x, 1).await;
        assert!(x.was_asked(Stage::Connect) && x.was_asked(Stage::Helo));
        assert!(x.was_asked(Stage::Mail) && x.in_transaction());
        assert_eq!(x.facts().recipients_count, 1);
        x.ask_through(Stage::Message).await;
        assert!(x.was_asked(Stage::Data));
        x.hear(Stage::Message, &continued(Stage::Message, None))
            .await;
        // The session's stages stay asked; the transaction's are asked again.
        assert!(x.was_asked(Stage::Connect) && !x.was_asked(Stage::Mail));
        assert_eq!(x.facts().recipients_count, 0);
        assert!(x.facts().sender.is_none());
    });
}

#[test]
fn a_refused_message_ends_its_transaction() {
    rt().block_on(async {
        let p = policy(
            "[[limit]]\nname = \"msgs\"\nstage = \"message\"\n\
             ratelimit = \"0 / 1h / per_mail / strict / ${authenticated_id}\"\naction = \"deny\"\n",
        );
        let mut x = exchange(&p);
        recipients(&mut x, 1).await;
        let act = x.ask_through(Stage::Message).await;
        assert!(
            matches!(&act, Act::Refuse(r) if r.code / 100 == 5),
            "{act:?}"
        );
        assert!(!x.in_transaction());
    });
}

#[test]
fn continued_names_the_queue_id_of_a_message() {
    let r = continued(Stage::Message, Some("4XyZ12"));
    assert_eq!(crate::outcomes::queue_id::parse(&r.lines), Some("4XyZ12"));
    assert_eq!(continued(Stage::Message, Some("")).lines, ["2.0.0 Ok"]);
    assert!(continued(Stage::Rcpt, Some("4XyZ12")).is_completion());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever mix of abandoned and accepted transactions, the limit refuses exactly when
    /// the recipients of accepted messages reach it.
    #[test]
    fn only_accepted_messages_count(plan in proptest::collection::vec((1usize..3, any::<bool>()), 0..8)) {
        rt().block_on(async {
            let p = policy(PER_RCPT);
            let mut x = exchange(&p);
            let mut charged = 0usize;
            for (n, accept) in plan {
                if charged + n >= 5 {
                    break;
                }
                let acts = recipients(&mut x, n).await;
                prop_assert!(acts.iter().all(|a| *a == Act::Go), "{:?} after {}", acts, charged);
                if accept {
                    x.ask_through(Stage::Message).await;
                    x.hear(Stage::Message, &continued(Stage::Message, None)).await;
                    charged += n;
                } else {
                    x.abandon();
                }
            }
            // Recipients up to and past the limit within one more transaction: those below it
            // go on, one at or past it is refused (which one is on the rate's last bits).
            let acts = recipients(&mut x, 6 - charged).await;
            prop_assert!(acts.iter().any(|a| matches!(a, Act::Refuse(_))), "{:?} after {}", acts, charged);
            prop_assert!(acts[..4 - charged].iter().all(|a| *a == Act::Go), "{:?}", acts);
            Ok(())
        })?;
    }
}

fn order(answer: TakenAnswer) -> TakeOrder {
    TakeOrder {
        limit: "l".into(),
        key: "k".into(),
        answer,
    }
}

#[test]
fn a_stronger_order_replaces_a_milder_one() {
    let pace = TakenAnswer::Pace(crate::hold::pace::PaceRate::parse("10/3600s messages").unwrap());
    let mut x = Exchange::new(Box::new(crate::policy::AllowAll), Facts::default());
    x.keep_order(&order(pace.clone()));
    x.keep_order(&order(TakenAnswer::Hold));
    x.keep_order(&order(TakenAnswer::Reroute));
    x.keep_order(&order(pace));
    assert_eq!(x.taken().map(|o| &o.answer), Some(&TakenAnswer::Hold));
}

#[test]
fn an_order_the_front_end_cannot_carry_out_is_not_kept() {
    let takes = Takes {
        hold: true,
        pace: true,
        reroute: false,
    };
    let mut x = Exchange::new(Box::new(crate::policy::AllowAll), Facts::default()).taking(takes);
    x.keep_order(&order(TakenAnswer::Reroute));
    assert!(x.taken().is_none());
    x.keep_order(&order(TakenAnswer::Hold));
    assert_eq!(x.taken().map(|o| &o.answer), Some(&TakenAnswer::Hold));
}

#[test]
fn facts_strings_are_set_and_forgotten() {
    let mut x = Exchange::new(Box::new(crate::policy::AllowAll), Facts::default());
    x.set_sender("a@example.org");
    x.set_recipient("B@Example.org", |n| n.push_str("b@example.org"));
    x.set_recipient("C@Example.org", |n| n.push_str("c@example.org"));
    assert_eq!(x.facts().recipient.as_deref(), Some("C@Example.org"));
    assert_eq!(
        x.facts().recipient_normalized.as_deref(),
        Some("c@example.org")
    );
    x.ended(true);
    assert!(x.facts().sender.is_none() && x.facts().recipient_normalized.is_none());
}

#[test]
fn pool_is_bounded_and_keeps_only_empty_small_strings() {
    let mut pool = Vec::new();
    pool_string(&mut pool, None);
    assert!(pool.is_empty());
    pool_string(&mut pool, Some("x".repeat(2000)));
    assert!(pool.is_empty(), "large strings are dropped");
    for _ in 0..20 {
        pool_string(&mut pool, Some(String::from("abc")));
    }
    assert_eq!(pool.len(), 8);
    assert!(pool.iter().all(|s| s.is_empty() && s.capacity() >= 3));
}
