//! The rate policy without network: decisions taken together, reservations and refunds,
//! dynamic multipliers, concurrency and global limits, headers, reload.

use crate::support::{facts, ok};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use floodgate::generation::Generation;
use floodgate::policy::{Facts, Policy, RatePolicy, SessionPolicy, Stage, Verdict};
use floodgate::smtp::reply::Reply;
use floodgate::store::{MemoryStore, Record, Store};

const HEAD: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
"#;

fn config(limits: &str) -> Generation {
    Generation::parse(
        Path::new("/etc/floodgate/t.toml"),
        &format!("{HEAD}{limits}"),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn policy(limits: &str) -> (RatePolicy, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::default());
    (RatePolicy::new(config(limits).policy, store.clone()), store)
}

async fn rcpt(s: &mut Box<dyn SessionPolicy>, f: &Facts, upstream: u16) -> Verdict {
    let v = s.check(Stage::Rcpt, f).await;
    if v == Verdict::Continue {
        s.after_upstream(Stage::Rcpt, f, &Reply::new(upstream, "x"))
            .await;
    }
    v
}

fn code(v: &Verdict) -> u16 {
    match v {
        Verdict::Reply(r) | Verdict::Disconnect(r) => r.code,
        _ => 0,
    }
}

fn ewma_rate(store: &MemoryStore, key: &str) -> Option<f64> {
    store.inspect_key(key).into_iter().find_map(|r| match r {
        Record::Ewma(s) => Some(s.rate),
        _ => None,
    })
}

#[tokio::test]
async fn one_refusal_charges_no_other_limit() {
    let (p, store) = policy(
        r#"
[[limit]]
name = "minute"
ratelimit = "2 / 1m / per_cmd / leaky / k"
stage = "mail"
[[limit]]
name = "day"
ratelimit = "100 / 1d / per_cmd / leaky / k"
stage = "mail"
"#,
    );
    let mut s = p.session();
    let f = facts("192.0.2.1");
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(code(&s.check(Stage::Mail, &f).await));
    }
    assert_eq!(codes, vec![0, 0, 450, 450, 450, 450]);
    // The day window counted only the two events that passed both.
    let day = ewma_rate(&store, "1d/per_cmd/k").unwrap();
    assert!((1.9..2.01).contains(&day), "{day}");
}

#[tokio::test]
async fn bucket_reservations_are_refunded_when_not_accepted() {
    let (p, _store) = policy(
        r#"
[[limit]]
name = "rcpts"
count = "recipients"
algorithm = "bucket"
rate = "3 / 1h"
burst = "3"
"#,
    );
    let f = facts("192.0.2.2");
    let mut s = p.session();
    // Upstream refuses two recipients: they are not charged.
    assert_eq!(rcpt(&mut s, &f, 550).await, Verdict::Continue);
    assert_eq!(rcpt(&mut s, &f, 450).await, Verdict::Continue);
    // Two accepted, then the transaction is abandoned: refunded.
    assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    s.transaction_abandoned();
    tokio::task::yield_now().await;
    // Now a whole message of three, accepted by upstream, is charged.
    for _ in 0..3 {
        assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    }
    assert_eq!(code(&rcpt(&mut s, &f, 250).await), 450);
    s.after_upstream(Stage::Message, &f, &ok()).await;
    assert_eq!(code(&rcpt(&mut s, &f, 250).await), 450);
}

#[tokio::test]
async fn leaky_ewma_recipients_are_charged_on_upstream_accept() {
    let (p, store) = policy(
        r#"
[[limit]]
name = "rcpts"
ratelimit = "10 / 1h / per_rcpt / k"
"#,
    );
    let f = facts("192.0.2.3");
    let mut s = p.session();
    for _ in 0..3 {
        assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    }
    s.transaction_abandoned();
    tokio::task::yield_now().await;
    assert_eq!(
        ewma_rate(&store, "1h/per_rcpt/k"),
        None,
        "abandoned: nothing charged"
    );
    for _ in 0..3 {
        assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    }
    s.after_upstream(Stage::Message, &f, &Reply::new(554, "5.7.1 no"))
        .await;
    assert_eq!(
        ewma_rate(&store, "1h/per_rcpt/k"),
        None,
        "refused: nothing charged"
    );
    for _ in 0..3 {
        assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    }
    s.after_upstream(Stage::Message, &f, &ok()).await;
    // Charged one by one, as Exim stores them: 1, then ~2, then ~3 (quick events decay the
    // stored rate by a hair; same-instant intervals round by at most a few 1e-4).
    let rate = ewma_rate(&store, "1h/per_rcpt/k").expect("charged");
    assert!((2.99..3.01).contains(&rate), "{rate}");
}

/// Microseconds as the `t` of a `floodgate simulate` event, exactly.
fn sim_time(us: i64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// `floodgate simulate` on `spec` with one event per time, key `key`: (rate, over) each.
fn simulate(spec: &str, key: &str, times: &[i64]) -> Vec<(f64, bool)> {
    let input: String = times
        .iter()
        .map(|&t| format!("{{\"t\": {}, \"key\": \"{key}\"}}\n", sim_time(t)))
        .collect();
    let mut out = Vec::new();
    floodgate::simulate::run(spec, input.as_bytes(), &mut out).expect("simulate");
    String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            (
                v["rate"].as_f64().expect("rate"),
                v["over"].as_bool().expect("over"),
            )
        })
        .collect()
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Issue 4: a leaky Exim limit on recipients, in a burst within one transaction, answers
/// exactly as Exim (`floodgate simulate` with the same events one by one) although nothing
/// is charged before upstream accepts the message.
#[tokio::test]
async fn leaky_exim_burst_matches_simulate() {
    const SPEC: &str = "3 / 1h / per_rcpt / leaky / k";
    const T0: i64 = 1_700_000_000_000_000;
    const GAP_US: i64 = 300;
    for n in 1..=8usize {
        // "refuse" decides; "measure" (same sequence on its own key) shows every rate.
        let limits = format!(
            r#"
[[limit]]
name = "refuse"
ratelimit = "{SPEC}"
message = "4.7.1 rate ${{sender_rate}}"
[[limit]]
name = "measure"
ratelimit = "3 / 1h / per_rcpt / leaky / h"
action = "header"
"#
        );
        let store = Arc::new(MemoryStore::default());
        let clock = Arc::new(AtomicI64::new(T0));
        let tick = clock.clone();
        let p = RatePolicy::with_clock(
            config(&limits).policy,
            store.clone(),
            Arc::new(move || tick.fetch_add(GAP_US, Ordering::SeqCst)),
        );
        let times: Vec<i64> = (0..n as i64).map(|k| T0 + k * GAP_US).collect();
        let expected = simulate(SPEC, "k", &times);
        let f = facts("192.0.2.9");
        let mut s = p.session();
        for (k, &(rate, over)) in expected.iter().enumerate() {
            let v = rcpt(&mut s, &f, 250).await;
            assert_eq!(
                code(&v) == 450,
                over,
                "n={n} event {k}: {v:?} vs rate {rate}"
            );
            if let Verdict::Reply(r) = &v {
                assert_eq!(
                    r.text(),
                    format!("4.7.1 rate {}", round1(rate)),
                    "n={n} {k}"
                );
            }
            let header = s.message_headers().join("\n");
            let yes = if over { "yes" } else { "no" };
            let want = format!("rate={}; limit=3; period=1h; over={yes}", round1(rate));
            assert!(
                header.contains(&want),
                "n={n} event {k}: {header} vs {want}"
            );
        }
        // Exim lets exactly m = 3 through in a burst.
        let passed = expected.iter().filter(|(_, o)| !o).count();
        assert_eq!(passed, n.min(3), "n={n}");
        assert_eq!(
            ewma_rate(&store, "1h/per_rcpt/k"),
            None,
            "n={n}: nothing charged yet"
        );
        // Upstream accepts: the events that passed are charged, one by one.
        s.after_upstream(Stage::Message, &f, &ok()).await;
        let stored = ewma_rate(&store, "1h/per_rcpt/k").expect("charged");
        assert!(
            (stored - passed as f64).abs() < 0.01,
            "n={n}: stored {stored}, passed {passed}"
        );
    }
}

/// Exim remembers a computed rate in the check's cache even when it is leaky and replayed
/// (reference step 7): a per_rcpt limit checked at DATA and again, same key and period, at
/// the end of the message is answered the second time from the first answer (with its own
/// m), not replayed again with the first check's pending charge counted twice.
#[tokio::test]
async fn a_replayed_rate_answers_the_same_key_later_in_the_message() {
    let (p, store) = policy(
        r#"
[[limit]]
name = "at-data"
ratelimit = "10 / 1h / per_rcpt / leaky / ${client_ip}"
stage = "data"
action = "header"
[[limit]]
name = "at-end"
ratelimit = "3 / 1h / per_rcpt / leaky / ${client_ip}"
stage = "message"
action = "header"
"#,
    );
    let mut f = facts("192.0.2.12");
    f.recipients_count = 2;
    let mut s = p.session();
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
    assert_eq!(s.check(Stage::Data, &f).await, Verdict::Continue);
    assert_eq!(s.check(Stage::Message, &f).await, Verdict::Continue);
    let headers = s.message_headers().join("\n");
    // Both see the rate of the two recipients counted once: 2, under 10 and under 3.
    assert!(
        headers.contains("at-data; rate=2; limit=10; period=1h; over=no"),
        "{headers}"
    );
    assert!(
        headers.contains("at-end; rate=2; limit=3; period=1h; over=no"),
        "{headers}"
    );
    s.after_upstream(Stage::Message, &f, &ok()).await;
    let stored = ewma_rate(&store, "1h/per_rcpt/192.0.2.12").expect("charged");
    assert!((stored - 2.0).abs() < 0.01, "stored {stored}");
}

fn dyn_rate(store: &MemoryStore, key: &str) -> u32 {
    store
        .inspect_key(key)
        .into_iter()
        .find_map(|r| match r {
            Record::Bucket(b) => Some(b.dyn_rate),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn dynamic_multipliers_follow_upstream() {
    let (p, store) = policy(
        r#"
[[limit]]
name = "dyn"
count = "messages"
stage = "message"
algorithm = "bucket"
rate = "100 / 1h"
burst = "100"
dynamic = true
"#,
    );
    let f = facts("192.0.2.4");
    let key = "bucket/dyn/192.0.2.4";
    let mut s = p.session();
    assert_eq!(s.check(Stage::Message, &f).await, Verdict::Continue);
    s.after_upstream(Stage::Message, &f, &ok()).await;
    let ham = dyn_rate(&store, key);
    assert!(ham > 10000, "{ham}");
    // Spam verdicts (upstream's 5xx at end of data) shrink it.
    for _ in 0..5 {
        assert_eq!(s.check(Stage::Message, &f).await, Verdict::Continue);
        s.after_upstream(Stage::Message, &f, &Reply::new(550, "5.7.1 spam"))
            .await;
    }
    let spam = dyn_rate(&store, key);
    assert!(spam < ham, "{spam} {ham}");
    // A 4xx is neither: nothing moves, the reservation is released.
    assert_eq!(s.check(Stage::Message, &f).await, Verdict::Continue);
    s.after_upstream(Stage::Message, &f, &Reply::new(451, "4.3.0 later"))
        .await;
    assert_eq!(dyn_rate(&store, key), spam);
    let pending = store.inspect_key(key).into_iter().find_map(|r| match r {
        Record::Bucket(b) => Some(b.pending),
        _ => None,
    });
    assert_eq!(pending, Some(0.0));
}

#[tokio::test]
async fn sessions_at_once_per_ip() {
    let (p, _store) = policy(
        r#"
[[limit]]
name = "conc"
max = 1
key = "${client_ip/24}"
"#,
    );
    let f = facts("192.0.2.5");
    let mut a = p.session();
    assert_eq!(a.check(Stage::Connect, &f).await, Verdict::Continue);
    let mut b = p.session();
    let v = b.check(Stage::Connect, &facts("192.0.2.77")).await;
    assert!(
        matches!(&v, Verdict::Disconnect(r) if r.code == 421),
        "{v:?}"
    );
    assert_eq!(
        b.check(Stage::Connect, &facts("198.51.100.1")).await,
        Verdict::Continue
    );
    drop(a);
    let mut c = p.session();
    assert_eq!(c.check(Stage::Connect, &f).await, Verdict::Continue);
}

#[tokio::test]
async fn global_limit_over_all_clients() {
    let (p, _store) = policy(
        r#"
[[limit]]
name = "per-user"
count = "messages"
key = "${client_ip}"
rate = "5 / 1m"
burst = "5"
[[limit]]
name = "everyone"
count = "messages"
key = "all"
rate = "3 / 1m"
burst = "3"
"#,
    );
    let mut codes = Vec::new();
    for i in 1..=4 {
        let mut s = p.session();
        codes.push(code(
            &s.check(Stage::Mail, &facts(&format!("192.0.2.{i}"))).await,
        ));
    }
    assert_eq!(codes, vec![0, 0, 0, 450]);
}

#[tokio::test]
async fn header_countermeasure_and_reload() {
    let (p, _store) = policy(
        r#"
[[limit]]
name = "score"
ratelimit = "1 / 1h / per_mail / strict"
stage = "mail"
action = "header"
"#,
    );
    let f = facts("192.0.2.9");
    let mut s = p.session();
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
    let h = s.message_headers();
    assert_eq!(h.len(), 1);
    assert!(
        h[0].starts_with("X-Floodgate-Rate: score; rate=1; limit=1"),
        "{}",
        h[0]
    );
    assert!(h[0].ends_with("over=yes"), "{}", h[0]);
    // A reload turns it into a deferral, for the running session too.
    p.install(
        config(
            r#"
[[limit]]
name = "score"
ratelimit = "1 / 1h / per_mail / strict"
stage = "mail"
message = "4.7.1 slow down, ${sender_rate} per ${sender_rate_period}"
"#,
        )
        .policy,
    );
    let v = s.check(Stage::Mail, &f).await;
    assert!(
        matches!(&v, Verdict::Reply(r) if r.code == 450 && r.lines[0] == "4.7.1 slow down, 2 per 1h"),
        "{v:?}"
    );
}

/// A session that read a generation without a limit at RCPT answers RCPT without waiting;
/// after a reload that adds one, the same session must wait for the check instead, and the
/// check counts against the new limit.
#[tokio::test]
async fn reload_reaches_the_quick_answer_of_a_running_session() {
    let (p, _store) = policy(
        r#"
[[limit]]
name = "senders"
ratelimit = "100 / 1h / per_mail"
stage = "mail"
"#,
    );
    let f = facts("192.0.2.11");
    let mut s = p.session();
    assert_eq!(s.check_now(Stage::Rcpt, &f), Some(Verdict::Continue));
    assert_eq!(s.check_now(Stage::Mail, &f), None);
    p.install(
        config(
            r#"
[[limit]]
name = "recipients"
ratelimit = "0 / 1h / per_rcpt / strict"
stage = "rcpt"
"#,
        )
        .policy,
    );
    assert_eq!(s.check_now(Stage::Rcpt, &f), None);
    assert_eq!(s.check_now(Stage::Mail, &f), Some(Verdict::Continue));
    let v = s.check(Stage::Rcpt, &f).await;
    assert!(matches!(&v, Verdict::Reply(r) if r.code == 450), "{v:?}");
}

#[tokio::test]
async fn auth_failure_limit_defers_further_attempts() {
    let (p, store) = policy(
        r#"
[auth_failures]
enabled = false
[[limit]]
name = "auth"
count = "auth_failures"
key = "${client_ip}"
rate = "2 / 1h"
burst = "2"
action = "disconnect"
"#,
    );
    let mut f = facts("192.0.2.10");
    f.auth_attempt = Some("mallory".into());
    let mut s = p.session();
    let no = Reply::new(535, "5.7.8 no");
    for _ in 0..2 {
        assert_eq!(s.check(Stage::Auth, &f).await, Verdict::Continue);
        assert_eq!(
            s.after_upstream(Stage::Auth, &f, &no).await,
            Verdict::Continue
        );
    }
    let v = s.check(Stage::Auth, &f).await;
    assert!(
        matches!(&v, Verdict::Disconnect(r) if r.code == 421),
        "{v:?}"
    );
    assert!(store.inspect("gcra/auth/192.0.2.10").await.unwrap().len() == 1);
}

/// Exim's leaky mode stores only events that are not over: a warn-only leaky limit lets
/// every recipient through but charges only those that were under when checked.
#[tokio::test]
async fn leaky_warn_limit_charges_only_events_under_it() {
    let (p, store) = policy(
        r#"
[[limit]]
name = "measure"
ratelimit = "2 / 1h / per_rcpt / leaky / w"
action = "warn"
"#,
    );
    let f = facts("192.0.2.10");
    let mut s = p.session();
    for _ in 0..5 {
        assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    }
    s.after_upstream(Stage::Message, &f, &ok()).await;
    let rate = ewma_rate(&store, "1h/per_rcpt/w").expect("charged");
    assert!((1.99..2.01).contains(&rate), "{rate}");
}

/// The policy says whether it reads the header From (the session parses the header only
/// then, or for its log line), wherever a limit may name it; a reload changes the answer.
#[test]
fn reads_header_from_wherever_a_limit_names_it() {
    let with = |field: &str| {
        format!(
            "[lists]\nfroms = {{ entries = [\"a@b.example\"] }}\n[[limit]]\nname = \"l\"\ncount = \"messages\"\nrate = \"1 / 1h\"\nburst = \"1\"\n{field}\n"
        )
    };
    let reads = |limits: &str| policy(limits).0.reads_header_from();
    assert!(!reads(""));
    assert!(!reads(&with("key = \"${sender_address}\"")));
    assert!(!reads(&with(
        "when = \"sender == \\\"x\\\" || authenticated\""
    )));
    assert!(reads(&with("key = \"${header_from}\"")));
    assert!(reads(&with("key = \"d-${header_from_domain}\"")));
    assert!(reads(&with(
        "when = \"authenticated && !(header_from in froms)\""
    )));
    assert!(reads(&with("message = \"slow down ${header_from}\"")));
    assert!(reads(&with(
        "limit_list = \"froms\"\nlimit_by = \"header_from\""
    )));
    assert!(!reads(&with(
        "limit_list = \"froms\"\nlimit_by = \"sender\""
    )));
    assert!(reads(
        "[[limit]]\nratelimit = \"1 / 1h / per_mail / unique=${header_from} / ${client_ip}\"\n"
    ));
    let (p, _) = policy(&with("key = \"${header_from}\""));
    p.reload(config("").policy);
    assert!(!p.reads_header_from());
    p.reload(config(&with("when = \"header_from == \\\"a@b\\\"\"")).policy);
    assert!(p.reads_header_from());
}

#[tokio::test]
async fn hold_gives_its_limit_and_key_and_a_refusal_is_stronger() {
    let hold = r#"
[[limit]]
name = "hold-rcpt"
count = "recipients"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "hold"
[hold]
dir = "/var/lib/floodgate/hold"
"#;
    let (p, _) = policy(hold);
    let mut s = p.session();
    let f = facts("192.0.2.7");
    assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    assert_eq!(
        rcpt(&mut s, &f, 250).await,
        Verdict::Take(floodgate::policy::TakeOrder {
            limit: "hold-rcpt".into(),
            key: "192.0.2.7".into(),
            answer: floodgate::policy::TakenAnswer::Hold,
        })
    );
    // A defer over at the same time wins: the message is refused, not held.
    let both = format!(
        "{hold}
[[limit]]
name = \"defer-rcpt\"
count = \"recipients\"
algorithm = \"bucket\"
rate = \"1 / 1h\"
burst = \"1\"
action = \"defer\"
"
    );
    let (p, _) = policy(&both);
    let mut s = p.session();
    assert_eq!(rcpt(&mut s, &f, 250).await, Verdict::Continue);
    assert_eq!(code(&rcpt(&mut s, &f, 250).await), 450);
}
