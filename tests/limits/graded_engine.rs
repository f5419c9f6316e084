//! The graded answers in the rate policy, without network: a reroute or pace limit over
//! gives a take order carrying what becomes of the message; a stronger countermeasure
//! over at the same time wins; while a key has paced messages waiting, its later messages
//! are paced behind them even under the limit, and only that key's.

use std::path::Path;
use std::sync::Arc;

use floodgate::generation::Generation;
use floodgate::hold::pace::{PaceBook, PaceRate, PaceUnit, Paced};
use floodgate::policy::alert::{Crossed, Evaluated, Observer};
use floodgate::policy::engine::Serving;
use floodgate::policy::notice::{Notifier, UserNotice};
use floodgate::policy::{Facts, Policy, RatePolicy, Stage, TakeOrder, TakenAnswer, Verdict};
use floodgate::store::MemoryStore;

const HEAD: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
[upstream.high_risk]
address = "127.0.0.1:2526"
[hold]
dir = "/var/lib/floodgate/hold"
"#;

fn policy(limits: &str) -> RatePolicy {
    let c = Generation::parse(Path::new("/etc/t.toml"), &format!("{HEAD}{limits}"))
        .unwrap_or_else(|e| panic!("{e}"));
    RatePolicy::new(c.policy, Arc::new(MemoryStore::default()))
}

/// Sees nothing.
struct Blind;

impl Observer for Blind {
    fn evaluated(&self, _: &Evaluated<'_>) {}
    fn crossed(&self, _: &Crossed<'_>) {}
}

/// Sends nothing.
struct Mute;

impl Notifier for Mute {
    fn notify(&self, _: UserNotice) {}
}

/// The policy of `limits` reading the paced messages of `book`.
fn pacing_policy(limits: &str, book: Arc<PaceBook>) -> RatePolicy {
    let c = Generation::parse(Path::new("/etc/t.toml"), &format!("{HEAD}{limits}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let parts = Serving {
        observer: Arc::new(Blind),
        paced: book,
        notifier: Arc::new(Mute),
        held: Arc::new(|| None),
    };
    RatePolicy::serving(
        c.policy,
        Arc::new(MemoryStore::default()),
        Arc::default(),
        parts,
    )
}

fn facts(user: &str) -> Facts {
    Facts {
        client_ip: Some("192.0.2.7".parse().unwrap()),
        listener: "relay".into(),
        user: Some(user.into()),
        sender: Some(format!("{user}@example.org")),
        ..Facts::default()
    }
}

fn limit(name: &str, action: &str) -> String {
    format!(
        "[[limit]]\nname = \"{name}\"\ncount = \"messages\"\nkey = \"${{authenticated_id}}\"\nrate = \"30 / 1m\"\nburst = \"1\"\naction = \"{action}\"\n"
    )
}

fn thirty_a_minute() -> PaceRate {
    PaceRate::new(30.0, 60.0, PaceUnit::Messages).unwrap()
}

#[tokio::test]
async fn reroute_and_pace_give_take_orders() {
    let p = policy(&limit("risky", "reroute"));
    let mut s = p.session();
    let f = facts("alice");
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
    assert_eq!(
        s.check(Stage::Mail, &f).await,
        Verdict::Take(TakeOrder {
            limit: "risky".into(),
            key: "alice".into(),
            answer: TakenAnswer::Reroute,
        })
    );
    let p = policy(&limit("run", "pace"));
    let mut s = p.session();
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
    assert_eq!(
        s.check(Stage::Mail, &f).await,
        Verdict::Take(TakeOrder {
            limit: "run".into(),
            key: "alice".into(),
            answer: TakenAnswer::Pace(thirty_a_minute()),
        })
    );
}

#[tokio::test]
async fn the_strongest_countermeasure_wins() {
    let f = facts("alice");
    // pace < reroute < hold < defer.
    for (a, b, want) in [
        ("pace", "reroute", Some(TakenAnswer::Reroute)),
        ("reroute", "hold", Some(TakenAnswer::Hold)),
        ("pace", "defer", None),
    ] {
        let p = policy(&format!("{}{}", limit("a", a), limit("b", b)));
        let mut s = p.session();
        assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
        match (s.check(Stage::Mail, &f).await, want) {
            (Verdict::Take(o), Some(w)) => assert_eq!(o.answer, w, "{a} + {b}"),
            (Verdict::Reply(r), None) => assert_eq!(r.code / 100, 4, "{a} + {b}"),
            (v, w) => panic!("{a} + {b}: {v:?}, want {w:?}"),
        }
    }
}

#[tokio::test]
async fn a_key_with_paced_messages_waiting_queues_behind_them() {
    let book = Arc::new(PaceBook::default());
    let p = pacing_policy(&limit("run", "pace"), book.clone());
    let mut s = p.session();
    let alice = facts("alice");
    let bob = facts("bob");
    book.add(
        Paced {
            id: "m1".into(),
            limit: "run".into(),
            key: "alice".into(),
            rate: thirty_a_minute(),
            weight: 1.0,
        },
        0,
    );
    // Under the limit (the first message of the minute), but alice has one waiting.
    assert_eq!(
        s.check(Stage::Mail, &alice).await,
        Verdict::Take(TakeOrder {
            limit: "run".into(),
            key: "alice".into(),
            answer: TakenAnswer::Pace(thirty_a_minute()),
        })
    );
    // bob has none: his first message goes.
    let mut s2 = p.session();
    assert_eq!(s2.check(Stage::Mail, &bob).await, Verdict::Continue);
    // Once alice's queue is empty, her messages go again while under the limit.
    let due = book.due(u64::MAX);
    book.released(&due[0], 0);
    let p = pacing_policy(&limit("run", "pace"), book);
    let mut s3 = p.session();
    assert_eq!(s3.check(Stage::Mail, &alice).await, Verdict::Continue);
}
