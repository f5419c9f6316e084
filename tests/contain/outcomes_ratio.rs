//! Outcomes and ratio limits through the policy, without network: refused recipients trip a
//! ratio; bounces reported in the smart host's log (Postfix and Exim lines, followed across a
//! rotation) for queue ids floodgate relayed trip a bounce ratio; a repeated bounce line
//! counts once; null-sender and auto-submitted messages count on neither side; refused
//! recipients and messages as plain rate-limit counts; bad input.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::generation::Generation;
use floodgate::outcomes::follow::FollowSettings;
use floodgate::outcomes::logline::Format;
use floodgate::policy::outcomes::follow;
use floodgate::policy::{Facts, Policy, RatePolicy, SessionPolicy, Stage, Verdict};
use floodgate::smtp::reply::Reply;
use floodgate::store::{MemoryStore, RatioCounts, RatioWindow, Store};

const HEAD: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
"#;

pub(crate) fn config(limits: &str) -> Result<Generation, String> {
    Generation::parse(
        Path::new("/etc/floodgate/t.toml"),
        &format!("{HEAD}{limits}"),
    )
    .map_err(|e| e.to_string())
}

pub(crate) fn policy(limits: &str) -> (RatePolicy, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::default());
    let cfg = config(limits).unwrap_or_else(|e| panic!("{e}"));
    (RatePolicy::new(cfg.policy, store.clone()), store)
}

pub(crate) fn facts(user: &str, sender: &str) -> Facts {
    Facts {
        client_ip: Some("192.0.2.10".parse().unwrap()),
        listener: "submission".into(),
        user: Some(user.into()),
        sender: Some(sender.into()),
        ..Facts::default()
    }
}

pub(crate) fn code(v: &Verdict) -> u16 {
    match v {
        Verdict::Reply(r) | Verdict::Disconnect(r) => r.code,
        _ => 0,
    }
}

/// One transaction: MAIL, each recipient answered by upstream with its code, and (when a
/// recipient was accepted) the end of data answered with `end`. The MAIL verdict.
pub(crate) async fn transaction(
    s: &mut Box<dyn SessionPolicy>,
    f: &mut Facts,
    rcpts: &[(&str, u16)],
    end: &Reply,
) -> Verdict {
    let v = s.check(Stage::Mail, f).await;
    if v != Verdict::Continue {
        return v;
    }
    s.after_upstream(Stage::Mail, f, &Reply::new(250, "2.1.0 Ok"))
        .await;
    let mut accepted = 0;
    for (r, c) in rcpts {
        f.recipient = Some(r.to_string());
        f.recipient_normalized = Some(r.to_ascii_lowercase());
        let v = s.check(Stage::Rcpt, f).await;
        assert_eq!(v, Verdict::Continue);
        s.after_upstream(Stage::Rcpt, f, &Reply::new(*c, "x")).await;
        if *c / 100 == 2 {
            accepted += 1;
            f.recipients_count = accepted;
        }
    }
    if accepted > 0 {
        f.message_size = 300;
        assert_eq!(s.check(Stage::Message, f).await, Verdict::Continue);
        s.after_upstream(Stage::Message, f, end).await;
    } else {
        s.transaction_abandoned();
    }
    f.recipients_count = 0;
    Verdict::Continue
}

pub(crate) fn queued(id: &str) -> Reply {
    Reply::new(250, format!("2.0.0 Ok: queued as {id}"))
}

const REFUSED_RATIO: &str = r#"
[[limit]]
name = "refused-share"
key = "${authenticated_id}"
ratio = "refused_recipients / recipients"
above = 0.5
min_events = 10
period = "1h"
"#;

#[tokio::test]
async fn twelve_refused_of_twenty_refuses_the_user() {
    let (p, _store) = policy(REFUSED_RATIO);
    let mut s = p.session();
    let mut f = facts("alice", "alice@example.com");
    let rcpts: Vec<(String, u16)> = (0..20)
        .map(|i| (format!("r{i}@example.org"), if i < 12 { 550 } else { 250 }))
        .collect();
    let rcpts: Vec<(&str, u16)> = rcpts.iter().map(|(r, c)| (r.as_str(), *c)).collect();
    assert_eq!(
        transaction(&mut s, &mut f, &rcpts, &queued("A1")).await,
        Verdict::Continue
    );
    // 12 / 20 = 0.6 > 0.5 with 20 >= 10 recipients: the next MAIL FROM is refused.
    let v = transaction(&mut s, &mut f, &[("x@example.org", 250)], &queued("A2")).await;
    assert_eq!(code(&v), 450, "{v:?}");
    // Another user is not.
    let mut other = facts("bob", "bob@example.com");
    assert_eq!(
        transaction(&mut s, &mut other, &[("x@example.org", 250)], &queued("A3")).await,
        Verdict::Continue
    );
}

#[tokio::test]
async fn the_same_share_under_min_events_or_at_the_threshold_passes() {
    let (p, _store) = policy(REFUSED_RATIO);
    let mut s = p.session();
    // 6 of 9: above 0.5 but fewer than 10 recipients.
    let mut f = facts("carol", "carol@example.com");
    let r9: Vec<(String, u16)> = (0..9)
        .map(|i| (format!("r{i}@example.org"), if i < 6 { 550 } else { 250 }))
        .collect();
    let r9: Vec<(&str, u16)> = r9.iter().map(|(r, c)| (r.as_str(), *c)).collect();
    transaction(&mut s, &mut f, &r9, &queued("C1")).await;
    assert_eq!(
        s.check(Stage::Mail, &f).await,
        Verdict::Continue,
        "9 recipients are fewer than min_events"
    );
    // 10 of 20: exactly 0.5 is not above.
    let mut f = facts("dave", "dave@example.com");
    let r20: Vec<(String, u16)> = (0..20)
        .map(|i| (format!("r{i}@example.org"), if i < 10 { 550 } else { 250 }))
        .collect();
    let r20: Vec<(&str, u16)> = r20.iter().map(|(r, c)| (r.as_str(), *c)).collect();
    transaction(&mut s, &mut f, &r20, &queued("D1")).await;
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
}

#[tokio::test]
async fn a_restricting_ratio_restricts_the_user() {
    let (p, store) = policy(&format!("{REFUSED_RATIO}action = \"restrict\"\n"));
    let mut s = p.session();
    let mut f = facts("alice", "alice@example.com");
    let rcpts: Vec<(String, u16)> = (0..20)
        .map(|i| (format!("r{i}@example.org"), if i < 12 { 550 } else { 250 }))
        .collect();
    let rcpts: Vec<(&str, u16)> = rcpts.iter().map(|(r, c)| (r.as_str(), *c)).collect();
    transaction(&mut s, &mut f, &rcpts, &queued("R1")).await;
    let v = s.check(Stage::Mail, &f).await;
    assert_eq!(code(&v), 450, "{v:?}");
    let r = store
        .restrictions()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.key == "alice")
        .expect("alice restricted");
    assert_eq!(r.limit, "refused-share");
    // A new session of the user is refused at MAIL FROM by the restriction.
    let mut s2 = p.session();
    assert_eq!(code(&s2.check(Stage::Mail, &f).await), 450);
}

const BOUNCE_RATIO: &str = r#"
[[limit]]
name = "bounce-ratio"
key = "${authenticated_id}"
ratio = "bounced_recipients / recipients"
above = 0.3
min_events = 10
period = "1h"
action = "deny"
"#;

pub(crate) fn append(p: &Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

pub(crate) async fn ratio_of(store: &MemoryStore, key: &str) -> RatioCounts {
    store
        .ratio(key, RatioWindow::from_secs(3600), RatioCounts::default())
        .await
        .unwrap()
}

/// Waits (bounded) until the window of `key` holds `num` bounced recipients.
pub(crate) async fn wait_num(store: &MemoryStore, key: &str, num: u64) -> RatioCounts {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = ratio_of(store, key).await;
        if c.num >= num {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {c:?}, waiting for {num} bounced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn wait_opened(p: &RatePolicy, lines: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.queue_index().stats().snapshot()[0].1 < lines {
        assert!(Instant::now() < deadline, "lines not read");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `n` one-recipient messages for `user`, queued as `PREFIX{i}`.
async fn send_queued(p: &RatePolicy, f: &mut Facts, prefix: &str, n: usize) -> Vec<String> {
    let mut s = p.session();
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}{i}");
        let rcpt = format!("rcpt{i}@example.org");
        let v = transaction(&mut s, f, &[(&rcpt, 250)], &queued(&id)).await;
        assert_eq!(v, Verdict::Continue);
        ids.push(id);
    }
    ids
}

async fn bounce_ratio_from_log(format: Format, line: fn(&str, usize) -> String) {
    let (p, store) = policy(BOUNCE_RATIO);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mail.log");
    append(&log, &["history before floodgate started".to_string()]);
    let mut f = facts("alice", "alice@example.com");
    let ids = send_queued(&p, &mut f, "AB12C", 12).await;
    // Messages of other users and of the null sender are in the same log.
    let mut bounce_of_null = facts("alice", "");
    let null_ids = send_queued(&p, &mut bounce_of_null, "NUL0", 2).await;
    let _running = follow(
        p.clone(),
        FollowSettings {
            path: log.clone(),
            format,
            poll: Duration::from_millis(10),
        },
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let key = "ratio/bounce-ratio/alice";
    assert_eq!(ratio_of(&store, key).await, RatioCounts { num: 0, den: 12 });
    // Two bounces, the first logged three times (retries of the bounce notice, a copy).
    let mut first: Vec<String> = (0..2).map(|i| line(&ids[i], i)).collect();
    first.push(line(&ids[0], 0));
    first.push(line(&ids[0], 0));
    first.push(line("ZZZZZZZZZZ", 0));
    first.push("a line of no known shape".into());
    first.extend(null_ids.iter().map(|id| line(id, 0)));
    append(&log, &first);
    assert_eq!(
        wait_num(&store, key, 2).await,
        RatioCounts { num: 2, den: 12 }
    );
    wait_opened(&p, first.len() as u64).await;
    // Rotation: renamed away, one more line into the old file, then a new file.
    std::fs::rename(&log, dir.path().join("mail.log.1")).unwrap();
    append(&dir.path().join("mail.log.1"), &[line(&ids[2], 2)]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    append(&log, &(3..5).map(|i| line(&ids[i], i)).collect::<Vec<_>>());
    let c = wait_num(&store, key, 5).await;
    assert_eq!(c, RatioCounts { num: 5, den: 12 });
    // 5 / 12 > 0.3 with 12 >= 10: refused.
    let mut s = p.session();
    let v = s.check(Stage::Mail, &f).await;
    assert_eq!(code(&v), 550, "{v:?}");
    let stats: std::collections::HashMap<_, _> =
        p.queue_index().stats().snapshot().into_iter().collect();
    assert_eq!(stats["duplicates"], 2);
    // The unknown queue id, and the null-sender messages (never indexed for the ratio).
    assert_eq!(stats["unknown_queue_ids"], 3);
    assert!(stats["other_lines"] + stats["unknown_lines"] >= 1);
    assert_eq!(stats["charged"], 5);
}

fn postfix_bounce(id: &str, i: usize) -> String {
    format!(
        "Nov 25 19:30:0{} relay postfix/smtp[2211]: {id}: to=<rcpt{i}@example.org>, relay=mx.example.org[192.0.2.7]:25, delay=0.5, delays=0.1/0/0.2/0.2, dsn=5.1.1, status=bounced (host mx.example.org[192.0.2.7] said: 550 5.1.1 <rcpt{i}@example.org>: Recipient address rejected: User unknown (in reply to RCPT TO command))",
        i % 10
    )
}

fn exim_bounce(id: &str, i: usize) -> String {
    format!(
        "2026-11-25 19:30:0{} {id} ** rcpt{i}@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7]: SMTP error from remote mail server after RCPT TO:<rcpt{i}@example.org>: 550 5.1.1 User unknown",
        i % 10
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postfix_bounces_in_the_log_trip_the_bounce_ratio() {
    bounce_ratio_from_log(Format::Postfix, postfix_bounce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exim_bounces_in_the_log_trip_the_bounce_ratio() {
    // Exim's ids: the test's queue ids must look like Exim's.
    let (p, store) = policy(BOUNCE_RATIO);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mainlog");
    std::fs::write(&log, "").unwrap();
    let mut f = facts("alice", "alice@example.com");
    let mut s = p.session();
    let mut ids = Vec::new();
    for i in 0..10 {
        let id = format!("1rOBx{i}-0003Ab-2Q");
        let rcpt = format!("rcpt{i}@example.org");
        let end = Reply::new(250, format!("OK id={id}"));
        transaction(&mut s, &mut f, &[(&rcpt, 250)], &end).await;
        ids.push(id);
    }
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
    let key = "ratio/bounce-ratio/alice";
    append(&log, &[exim_bounce(&ids[0], 0), exim_bounce(&ids[0], 0)]);
    append(
        &log,
        &[format!(
            "2026-11-25 19:30:01 {} == rcpt1@example.org R=dnslookup T=remote_smtp defer (-44): greylisted",
            ids[1]
        )],
    );
    wait_num(&store, key, 1).await;
    std::fs::rename(&log, dir.path().join("mainlog.1")).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    append(
        &log,
        &(1..4).map(|i| exim_bounce(&ids[i], i)).collect::<Vec<_>>(),
    );
    assert_eq!(
        wait_num(&store, key, 4).await,
        RatioCounts { num: 4, den: 10 }
    );
    let v = p.session().check(Stage::Mail, &f).await;
    assert_eq!(code(&v), 550, "{v:?}");
}

#[tokio::test]
async fn null_sender_and_auto_submitted_count_on_neither_side() {
    let (p, store) = policy(BOUNCE_RATIO);
    let mut s = p.session();
    let mut null = facts("alice", "");
    transaction(&mut s, &mut null, &[("a@example.org", 250)], &queued("N1")).await;
    let mut auto = facts("alice", "alice@example.com");
    auto.auto_submitted = true;
    transaction(&mut s, &mut auto, &[("b@example.org", 250)], &queued("N2")).await;
    let key = "ratio/bounce-ratio/alice";
    assert_eq!(ratio_of(&store, key).await, RatioCounts::default());
    // Their bounces, reported by hand, are not charged: the messages were never indexed.
    for (id, r) in [("N1", "a@example.org"), ("N2", "b@example.org")] {
        let n = floodgate::policy::outcomes::report(
            &p,
            id,
            r,
            None,
            floodgate::outcomes::logline::Kind::Bounced,
        )
        .await
        .unwrap();
        assert_eq!(n, floodgate::outcomes::index::Noted::UnknownQueueId);
    }
    assert_eq!(ratio_of(&store, key).await, RatioCounts::default());
    // A person's message counts.
    let mut person = facts("alice", "alice@example.com");
    transaction(
        &mut s,
        &mut person,
        &[("c@example.org", 250)],
        &queued("N3"),
    )
    .await;
    assert_eq!(ratio_of(&store, key).await, RatioCounts { num: 0, den: 1 });
    // With include_automatic = true they count.
    let (p2, store2) = policy(&format!("{BOUNCE_RATIO}include_automatic = true\n"));
    let mut s2 = p2.session();
    transaction(&mut s2, &mut null, &[("a@example.org", 250)], &queued("M1")).await;
    transaction(&mut s2, &mut auto, &[("b@example.org", 250)], &queued("M2")).await;
    assert_eq!(ratio_of(&store2, key).await, RatioCounts { num: 0, den: 2 });
}

#[tokio::test]
async fn refused_counts_in_plain_rate_limits() {
    let (p, store) = policy(
        r#"
[[limit]]
name = "refused-rcpts"
count = "refused_recipients"
key = "${authenticated_id}"
rate = "3 / 1h"
burst = "3"
[[limit]]
name = "refused-msgs"
count = "refused_messages"
key = "${authenticated_id}"
rate = "1 / 1h"
burst = "1"
"#,
    );
    let mut s = p.session();
    let mut f = facts("erin", "erin@example.com");
    // Accepted recipients charge nothing; two refused ones charge two.
    transaction(
        &mut s,
        &mut f,
        &[("a@x.org", 250), ("b@x.org", 550), ("c@x.org", 550)],
        &queued("E1"),
    )
    .await;
    assert_eq!(s.check(Stage::Rcpt, &f).await, Verdict::Continue);
    s.after_upstream(Stage::Rcpt, &f, &Reply::new(550, "5.1.1 unknown"))
        .await;
    // Three refused: one more would be over.
    assert_eq!(code(&s.check(Stage::Rcpt, &f).await), 450);
    s.transaction_abandoned();
    // A message refused after the data: the next MAIL FROM is over refused-msgs.
    let mut s2 = p.session();
    let mut g = facts("frank", "frank@example.com");
    transaction(
        &mut s2,
        &mut g,
        &[("a@x.org", 250)],
        &Reply::new(554, "5.7.1 spam"),
    )
    .await;
    assert_eq!(code(&s2.check(Stage::Mail, &g).await), 450);
    assert!(!store.inspect_key("gcra/refused-msgs/frank").is_empty());
}

#[test]
fn bad_ratio_config_is_explained() {
    let cases = [
        (
            "ratio = \"bounced / recipients\"\nabove = 0.3\nperiod = \"1h\"",
            "\"bounced\" cannot be part of a ratio",
        ),
        (
            "ratio = \"recipients / recipients\"\nabove = 0.3\nperiod = \"1h\"",
            "by itself",
        ),
        ("ratio = \"recipients\"\nabove = 0.3\nperiod = \"1h\"", "COUNT / COUNT"),
        (
            "ratio = \"bounced_recipients / recipients\"\nperiod = \"1h\"",
            "needs `above`",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = -1.0\nperiod = \"1h\"",
            "0 or more",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3",
            "needs `period`",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3\nperiod = \"5s\"",
            "at least 12s",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3\nperiod = \"1h\"\nmin_events = -2",
            "min_events must be 0 or more",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3\nperiod = \"1h\"\ncount = \"messages\"",
            "`count` does not go with `ratio`",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3\nperiod = \"1h\"\nrate = \"1 / 1h\"",
            "give exactly one of",
        ),
        (
            "count = \"messages\"\nrate = \"1 / 1h\"\nburst = \"1\"\nabove = 0.3",
            "`above` goes with `ratio`",
        ),
        ("count = \"bounces\"\nrate = \"1 / 1h\"\nburst = \"1\"", "unknown count"),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3\nperiod = \"1h\"\naction = \"pace\"",
            "a ratio limit has none",
        ),
        (
            "ratio = \"bounced_recipients / recipients\"\nabove = 0.3\nperiod = \"1h\"\nbaseline = \"p95 / 14d\"",
            "baseline",
        ),
    ];
    for (body, want) in cases {
        let e = config(&format!("[[limit]]\nname = \"r\"\n{body}\n")).unwrap_err();
        assert!(e.contains(want), "{body}: {e}");
        assert!(e.contains("t.toml:"), "{e}");
    }
}

#[test]
fn bad_outcomes_section_is_explained() {
    for (body, want) in [
        ("[outcomes]\nfollow = \"/var/log/mail.log\"", "needs format"),
        ("[outcomes]\nformat = \"postfix\"", "goes with follow"),
        (
            "[outcomes]\nfollow = \"/var/log/mail.log\"\nformat = \"sendmail\"",
            "use \"postfix\" or \"exim\"",
        ),
        ("[outcomes]\nremember = 0", "at least 1"),
        ("[outcomes]\npoll = \"2m\"", "between 1ms and 60s"),
        ("[outcomes]\nfolow = \"x\"", "unknown field"),
    ] {
        let e = config(body).unwrap_err();
        assert!(e.contains(want), "{body}: {e}");
    }
    let ok = config("[outcomes]\nfollow = \"mail.log\"\nformat = \"exim\"").unwrap();
    let f = ok.outcomes.follow.unwrap();
    assert_eq!(f.path, Path::new("/etc/floodgate/mail.log"));
    assert_eq!(f.format, Format::Exim);
}

#[test]
fn check_explains_ratio_limits_and_outcome_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(
        &path,
        format!(
            "{HEAD}{BOUNCE_RATIO}include_automatic = true\n[[limit]]\nname = \"refused\"\ncount = \"refused_recipients\"\nrate = \"50 / 1h\"\nburst = \"50\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("limit bounce-ratio: stage=mail key=\"${authenticated_id}\" ratio bounced_recipients / recipients over 3600s, over when above 0.3 with at least 10 recipients (counts kept per key in 300s slots: an event counts for 3600s to 3900s); null-sender and auto-submitted messages count action=deny"),
        "{text}"
    );
    assert!(
        text.contains("limit refused: stage=rcpt key=\"${sender_host_address}\" gcra rate=50/3600s burst=50 counts=refused_recipients"),
        "{text}"
    );
}

#[tokio::test]
async fn a_transaction_without_an_answered_message_still_counts_its_recipients_once() {
    let (p, store) = policy(REFUSED_RATIO);
    let mut s = p.session();
    let f = facts("gina", "gina@example.com");
    // MAIL, three recipients answered (two refused), then no message (held, say): the next
    // MAIL counts them, once.
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
    for code in [550, 550, 250] {
        assert_eq!(s.check(Stage::Rcpt, &f).await, Verdict::Continue);
        s.after_upstream(Stage::Rcpt, &f, &Reply::new(code, "x"))
            .await;
    }
    assert_eq!(s.check(Stage::Mail, &f).await, Verdict::Continue);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let key = "ratio/refused-share/gina";
    assert_eq!(
        store
            .ratio(key, RatioWindow::from_secs(3600), RatioCounts::default())
            .await
            .unwrap(),
        RatioCounts { num: 2, den: 3 }
    );
    s.transaction_abandoned();
    drop(s);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store
            .ratio(key, RatioWindow::from_secs(3600), RatioCounts::default())
            .await
            .unwrap(),
        RatioCounts { num: 2, den: 3 }
    );
}
