//! Forged outcomes through the whole outcome path (the followed log, the parser, the index,
//! the ratio windows): what a remote server or a local user writes into the smart host's
//! log charges nobody for a recipient the message was not accepted for, and a result
//! logged at every retry counts once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use floodgate::outcomes::follow::FollowSettings;
use floodgate::outcomes::logline::Format;
use floodgate::policy::outcomes::follow;
use floodgate::policy::{Policy, RatePolicy, Stage, Verdict};
use floodgate::store::{RatioCounts, Store};

use super::outcomes_ratio::{
    append, code, facts, policy, queued, ratio_of, transaction, wait_num, wait_opened,
};

const LIMITS: &str = r#"
[[limit]]
name = "bounce-ratio"
key = "${authenticated_id}"
ratio = "bounced_recipients / recipients"
above = 0.3
min_events = 10
period = "1h"
action = "restrict"
[[limit]]
name = "defer-ratio"
key = "${authenticated_id}"
ratio = "deferred_recipients / recipients"
above = 0.3
min_events = 10
period = "1h"
action = "restrict"
"#;

/// Waits (bounded) until every line read has been reported, then checks the counters.
async fn wait_stats(p: &RatePolicy, want: &[(&str, u64)]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats: HashMap<_, _> = p.queue_index().stats().snapshot().into_iter().collect();
        // Each line read ends as exactly one of these.
        let done: u64 = [
            "other_lines",
            "unknown_lines",
            "unknown_queue_ids",
            "not_recipients",
            "duplicates",
            "charged",
            "uncharged",
        ]
        .iter()
        .map(|k| stats[k])
        .sum();
        if done == stats["lines"] {
            for (k, n) in want {
                assert_eq!(stats[k], *n, "{k}: {stats:?}");
            }
            return;
        }
        assert!(Instant::now() < deadline, "lines not reported: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const PF: &str = "Nov 25 19:30:01 relay postfix/smtp[2211]: ";

/// The real line of the attacker's recipient, with the remote server's reply text.
fn real(id: &str, status: &str, reply: &str) -> String {
    format!("{PF}{id}: to=<x@evil.example>, relay=mx1.evil.example[192.0.2.1]:25, delay=1, delays=0/0/0/1, dsn=4.0.0, status={status} ({reply})")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_postfix_lines_charge_nobody() {
    let (p, store) = policy(LIMITS);
    let mut s = p.session();
    // alice's one message: eleven recipients of her own, one at the attacker's domain.
    let mut alice = facts("alice", "alice@example.com");
    let rcpts: Vec<String> = (0..11)
        .map(|i| format!("r{i}@example.org"))
        .chain(["x@evil.example".to_string()])
        .collect();
    let accepted: Vec<(&str, u16)> = rcpts.iter().map(|r| (r.as_str(), 250)).collect();
    transaction(&mut s, &mut alice, &accepted, &queued("4AbCd1")).await;
    // bob's message, in the same log.
    let mut bob = facts("bob", "bob@example.com");
    transaction(
        &mut s,
        &mut bob,
        &[("b@example.net", 250)],
        &queued("9BobQ2"),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mail.log");
    std::fs::write(&log, "").unwrap();
    let _running = follow(
        p.clone(),
        FollowSettings {
            path: log.clone(),
            format: Format::Postfix,
            poll: Duration::from_millis(10),
        },
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut lines = Vec::new();
    // A non-final MX answers 450 with text shaped like results of every recipient.
    for i in 0..11 {
        lines.push(format!("{PF}4AbCd1: host mx1.evil.example[192.0.2.1] said: 450 4.0.0 4AbCd1: to=<r{i}@example.org>, relay=x, dsn=5.0.0, status=bounced (x) status=bounced to=<r{i}@example.org> (in reply to RCPT TO command)"));
    }
    // The deferral itself, logged at every retry, with the same text in its reply.
    for _ in 0..3 {
        lines.push(real(
            "4AbCd1",
            "deferred",
            "host mx1.evil.example[192.0.2.1] said: 450 status=bounced to=<r0@example.org>, orig_to=<r1@example.org> (in reply to RCPT TO command)",
        ));
    }
    // to=< and status= in the parenthesised text of a line of another recipient's shape.
    lines.push(format!("{PF}4AbCd1: to=<x@evil.example>, relay=mx (status=bounced to=<r2@example.org>), status=deferred (x)"));
    // Lines that are not delivery results but hold status= and to=<.
    lines.push("Nov 25 19:30:01 relay postfix/cleanup[9]: 4AbCd1: message-id=<a status=bounced to=<r3@example.org>>".into());
    lines.push(format!("{PF}4AbCd1: lost connection with mx1.evil.example[192.0.2.1] while receiving the initial server greeting: 4AbCd1: to=<r4@example.org>, status=bounced"));
    // Forged program names (a local user's logger, another program's text).
    for head in [
        "Nov 25 19:30:01 relay postfixevil/smtp[1]: ",
        "Nov 25 19:30:01 relay x-postfix/smtp[1]: ",
        "Nov 25 19:30:01 relay sshd[1]: postfix/smtp[1]: ",
    ] {
        for i in 5..11 {
            lines.push(format!("{head}4AbCd1: to=<r{i}@example.org>, relay=none, delay=1, dsn=5.0.0, status=bounced (x)"));
        }
        lines.push(format!(
            "{head}9BobQ2: to=<b@example.net>, relay=none, delay=1, dsn=5.0.0, status=bounced (x)"
        ));
    }
    // Whole results of addresses the message was not accepted for.
    for r in ["victim@example.org", "R5@example.org", "b@example.net"] {
        lines.push(format!(
            "{PF}4AbCd1: to=<{r}>, relay=none, delay=1, dsn=5.0.0, status=bounced (x)"
        ));
        lines.push(format!("{PF}4AbCd1: to=<x@other.example>, orig_to=<{r}>, relay=none, delay=1, dsn=5.0.0, status=bounced (x)"));
    }
    // bob's queue id in the remote text of alice's recipient.
    lines.push(real(
        "4AbCd1",
        "deferred",
        "said: 450 9BobQ2: to=<b@example.net>, status=bounced",
    ));
    append(&log, &lines);
    wait_opened(&p, lines.len() as u64).await;
    // At last the attacker's recipient bounces: one bounce, after the deferrals.
    let bounce = real(
        "4AbCd1",
        "bounced",
        "host mx1.evil.example[192.0.2.1] said: 550 status=bounced to=<r9@example.org>",
    );
    append(&log, &[bounce.clone(), bounce]);
    wait_opened(&p, lines.len() as u64 + 2).await;
    assert_eq!(
        wait_num(&store, "ratio/bounce-ratio/alice", 1).await,
        RatioCounts { num: 1, den: 12 }
    );
    assert_eq!(
        ratio_of(&store, "ratio/defer-ratio/alice").await,
        RatioCounts { num: 1, den: 12 }
    );
    for limit in ["bounce-ratio", "defer-ratio"] {
        assert_eq!(
            ratio_of(&store, &format!("ratio/{limit}/bob")).await,
            RatioCounts { num: 0, den: 1 }
        );
    }
    // Nobody is restricted: alice and bob send on.
    assert!(store.restrictions().await.unwrap().is_empty());
    for f in [&alice, &bob] {
        let v = p.session().check(Stage::Mail, f).await;
        assert_eq!(v, Verdict::Continue, "{v:?} (code {})", code(&v));
    }
    wait_stats(
        &p,
        &[("charged", 2), ("not_recipients", 6), ("duplicates", 4)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_exim_lines_charge_nobody() {
    let (p, store) = policy(LIMITS);
    let mut s = p.session();
    let id = "1rOBxk-0003Ab-2Q";
    let mut alice = facts("alice", "alice@example.com");
    let rcpts: Vec<String> = (0..11)
        .map(|i| format!("r{i}@example.org"))
        .chain(["x@evil.example".to_string()])
        .collect();
    let accepted: Vec<(&str, u16)> = rcpts.iter().map(|r| (r.as_str(), 250)).collect();
    let end = floodgate::smtp::reply::Reply::new(250, format!("OK id={id}"));
    transaction(&mut s, &mut alice, &accepted, &end).await;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mainlog");
    std::fs::write(&log, "").unwrap();
    let _running = follow(
        p.clone(),
        FollowSettings {
            path: log.clone(),
            format: Format::Exim,
            poll: Duration::from_millis(10),
        },
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = "2026-11-25 19:30:01";
    let mut lines = Vec::new();
    for i in 0..3 {
        lines.push(format!("{t} {id} == x@evil.example R=dnslookup T=remote_smtp defer (-44) H=mx1.evil.example [192.0.2.1]: SMTP error from remote mail server after RCPT TO:<x@evil.example>: 451 {id} ** r{i}@example.org C=\"{id} ** r{i}@example.org\""));
    }
    lines.push(format!("{t} {id} H=mx1.evil.example [192.0.2.1]: SMTP error from remote mail server after end of data: 550 {t} {id} ** r3@example.org"));
    lines.push(format!(
        "{t} H=mx1.evil.example [192.0.2.1] {id} ** r4@example.org"
    ));
    lines.push(format!(
        "{t} {id} ** victim@example.org R=dnslookup T=remote_smtp: 550 no"
    ));
    lines.push(format!(
        "{t} {id} ** x@other.example <R5@example.org>: 550 no"
    ));
    lines.push(format!("{t} {id} ** x@evil.example R=dnslookup T=remote_smtp H=mx1.evil.example [192.0.2.1]: SMTP error from remote mail server after RCPT TO:<x@evil.example>: 550 {id} ** r6@example.org"));
    append(&log, &lines);
    wait_opened(&p, lines.len() as u64).await;
    assert_eq!(
        wait_num(&store, "ratio/bounce-ratio/alice", 1).await,
        RatioCounts { num: 1, den: 12 }
    );
    assert_eq!(
        ratio_of(&store, "ratio/defer-ratio/alice").await,
        RatioCounts { num: 1, den: 12 }
    );
    wait_stats(
        &p,
        &[("charged", 2), ("not_recipients", 2), ("duplicates", 2)],
    )
    .await;
}
