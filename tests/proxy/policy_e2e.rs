//! The policy end to end: floodgate between real or raw clients and the recording upstream.

use crate::common;

use std::time::Duration;

use common::*;

fn start(extra: &str) -> (Recorder, Floodgate) {
    let rec = Recorder::plain();
    let cfg = FloodgateConfig::new(rec.addr())
        .auth_without_tls(true)
        .log_level("info")
        .extra(extra);
    let fg = Floodgate::start(&cfg);
    (rec, fg)
}

fn session(fg: &Floodgate) -> RawClient {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    c
}

fn auth_plain(c: &mut RawClient, user: &str, password: &str) -> Reply {
    let token = b64_encode(format!("\0{user}\0{password}").as_bytes());
    c.cmd(&format!("AUTH PLAIN {token}"))
}

fn send_data(c: &mut RawClient) -> Reply {
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: t\r\nFrom: a@example.org\r\n\r\nhello\r\n.\r\n");
    c.reply()
}

/// Counts log lines holding every one of `parts`.
fn log_count(fg: &Floodgate, parts: &[&str]) -> usize {
    fg.stderr()
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .count()
}

#[test]
fn per_user_recipient_limit_defers_exactly_the_excess() {
    let (rec, fg) = start(
        r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
algorithm = "bucket"
rate = "3 / 1h"
burst = "3"
action = "defer"
"#,
    );
    // A real client: Python's smtplib, STARTTLS and AUTH on the submission listener.
    let out = smtplib(
        fg.addr("submission"),
        r#"
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.login(USER, PASSWORD)
rcpts = ["r%d@example.com" % i for i in range(1, 6)]
refused = s.sendmail("alice@example.org", rcpts, b"Subject: t\r\n\r\nhi\r\n")
for r in rcpts:
    if r in refused:
        out(r, "%d %s" % (refused[r][0], refused[r][1].decode()))
    else:
        out(r, "ok")
try:
    s.sendmail("alice@example.org", ["r6@example.com"], b"Subject: t\r\n\r\nhi\r\n")
    out("second", "ok")
except smtplib.SMTPRecipientsRefused as e:
    out("second", "%d" % e.recipients["r6@example.com"][0])
s.quit()
"#,
        Duration::from_secs(60),
    );
    assert!(out.ok(), "{out}");
    for r in ["r1", "r2", "r3"] {
        assert_eq!(
            out.field(&format!("{r}@example.com")).as_deref(),
            Some("ok"),
            "{out}"
        );
    }
    for r in ["r4", "r5"] {
        let f = out.field(&format!("{r}@example.com")).unwrap_or_default();
        assert!(f.starts_with("450 4.7.1"), "{r}: {f}\n{out}");
        // An authenticated user is told the rate and the limit.
        assert!(f.contains("the limit is 3"), "{f}");
    }
    // The accepted recipients were charged: the next message's recipient is over.
    assert_eq!(out.field("second").as_deref(), Some("450"), "{out}");
    let msgs = rec.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        msgs[0].rcpts,
        vec!["r1@example.com", "r2@example.com", "r3@example.com"]
    );
}

/// The same EWMA limit leaky and strict, under a client that keeps retrying: leaky stops
/// counting refused attempts, strict counts every one.
#[test]
fn leaky_against_strict_under_retries() {
    let (_rec, fg) = start(
        r#"
[[limit]]
name = "leaky"
when = 'listener == "plain" && helo == "leaky.test"'
ratelimit = "3 / 1h / per_rcpt / leaky / L-${client_ip}"
message = "4.7.1 rate ${sender_rate}"

[[limit]]
name = "strict"
when = 'listener == "plain" && helo == "strict.test"'
ratelimit = "3 / 1h / per_rcpt / strict / S-${client_ip}"
message = "4.7.1 rate ${sender_rate}"
"#,
    );
    let mut rates = Vec::new();
    for helo in ["leaky.test", "strict.test"] {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        assert_eq!(c.ehlo(helo).code, 250);
        assert_eq!(c.cmd("MAIL FROM:<a@example.org>").code, 250);
        let mut seen = Vec::new();
        for i in 0..6 {
            let r = c.cmd(&format!("RCPT TO:<x{i}@example.com>"));
            seen.push(if r.code == 250 {
                "ok".to_string()
            } else {
                assert_eq!(r.enhanced().as_deref(), Some("4.7.1"), "{}", r.text());
                r.text().trim().rsplit(' ').next().unwrap_or("").to_string()
            });
        }
        rates.push(seen);
    }
    // Leaky, as Exim: the check replays this transaction's own (not yet charged) recipients
    // at their own times, so the first three pass (the third at 2.99999... < 3, like
    // strict); each refused attempt is not counted, so every retry sees the same rate: three
    // stored events plus this one, 3.99999... (printed 4).
    assert_eq!(rates[0], vec!["ok", "ok", "ok", "4", "4", "4"], "leaky");
    // Strict: every attempt counts, the rate keeps climbing. (Stored rates decay by a hair
    // between quick events, so the third is at 2.99999... < 3 and passes.)
    assert_eq!(rates[1], vec!["ok", "ok", "ok", "4", "5", "6"], "strict");
}

#[test]
fn per_addr_counts_distinct_recipients_only() {
    let (_rec, fg) = start(
        r#"
[[limit]]
name = "distinct"
ratelimit = "3 / 1h / per_addr / strict"
"#,
    );
    let mut c = session(&fg);
    let mut codes = Vec::new();
    for (i, r) in ["a", "b", "A", "a", "b", "c", "d"].iter().enumerate() {
        assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
        codes.push(c.cmd(&format!("RCPT TO:<{r}@Example.com>")).code);
        assert_eq!(c.cmd("RSET").code, 250, "{i}");
    }
    // Repeats (case-insensitive local part included) add nothing; the fourth distinct
    // address brings the rate to 3.99... >= 3 (quick events decay the stored rate by a
    // hair, so the third is at 2.99... and passes).
    assert_eq!(codes, vec![250, 250, 250, 250, 250, 250, 450]);
}

#[test]
fn warn_relays_everything_and_logs() {
    let (rec, fg) = start(
        r#"
[[limit]]
name = "measure"
ratelimit = "1 / 1h / per_rcpt / strict"
action = "warn"
"#,
    );
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    for i in 0..3 {
        assert_eq!(c.cmd(&format!("RCPT TO:<w{i}@example.com>")).code, 250);
    }
    assert_eq!(send_data(&mut c).code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    assert_eq!(rec.messages()[0].rcpts.len(), 3);
    let n = wait_until(Duration::from_secs(10), "warn log lines", || {
        let n = log_count(&fg, &["rate limit over", "measure", "action=\"warn\""]);
        (n >= 3).then_some(n)
    });
    assert_eq!(n, 3);
}

#[test]
fn delay_is_the_computed_amount() {
    let (_rec, fg) = start(
        r#"
[[limit]]
name = "slow"
ratelimit = "2 / 1h / per_rcpt / strict"
action = "delay"
delay = "computed"
max_delay = "5s"
"#,
    );
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    for i in 0..4 {
        assert_eq!(c.cmd(&format!("RCPT TO:<d{i}@example.com>")).code, 250);
    }
    // Rates 1, 2, 3, 4 against m = 2: delays of rate - m seconds (0 is no delay).
    let lines: Vec<String> = fg
        .stderr()
        .lines()
        .filter(|l| l.contains("rate limit delay"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("delay_ms=1000"), "{}", lines[0]);
    assert!(lines[1].contains("delay_ms=2000"), "{}", lines[1]);
}

fn bulk_config(entries: &str) -> String {
    format!(
        r#"
[lists]
bulk_senders = {{ entries = [{entries}] }}

[[limit]]
name = "relay-per-ip"
when = "!authenticated"
ratelimit = "2 / 1h / per_rcpt / strict"
limit_list = "bulk_senders"
"#
    )
}

fn accepted_rcpts(fg: &Floodgate) -> usize {
    let mut c = session(fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    (0..6)
        .map(|i| c.cmd(&format!("RCPT TO:<b{i}@example.com>")).code)
        .take_while(|&code| code == 250)
        .count()
}

#[test]
fn bulk_senders_get_their_higher_limit() {
    let (_r1, listed) = start(&bulk_config(r#""127.0.0.0/8 5", "10.0.0.0/8 9""#));
    let (_r2, unlisted) = start(&bulk_config(r#""10.0.0.0/8 9""#));
    // Quick events: the rate after the n-th is a hair under n, so m lets m through.
    assert_eq!(accepted_rcpts(&listed), 5);
    assert_eq!(accepted_rcpts(&unlisted), 2);
}

#[test]
fn postmaster_is_exempt() {
    let (rec, fg) = start(
        r#"
[lists]
postmaster = { entries = ["postmaster@", "abuse@example.com"] }

[[limit]]
name = "tiny"
when = "!(recipient in postmaster)"
ratelimit = "1 / 1h / per_rcpt / strict"
"#,
    );
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    let r = c.cmd("RCPT TO:<user@example.com>");
    assert_eq!(r.code, 450);
    // Unauthenticated clients are not told the limit.
    assert!(!r.text().contains("limit"), "{}", r.text());
    assert_eq!(c.cmd("RCPT TO:<PostMaster@example.net>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<abuse@example.com>").code, 250);
    assert_eq!(send_data(&mut c).code, 250);
    assert_eq!(
        rec.messages()[0].rcpts,
        vec!["PostMaster@example.net", "abuse@example.com"]
    );
}

#[test]
fn bad_auth_gets_doubling_delays_and_good_auth_still_works() {
    let (rec, fg) = start(
        r#"
[auth_failures]
base_delay = "100ms"
max_delay = "2s"
decay = "10m"
"#,
    );
    let mut c = session(&fg);
    for _ in 0..3 {
        assert_eq!(auth_plain(&mut c, USER, "wrong").code, 535);
    }
    let delays: Vec<String> = fg
        .stderr()
        .lines()
        .filter(|l| l.contains("auth failure delay"))
        .filter_map(|l| l.split("delay_ms=").nth(1))
        .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(delays, vec!["100", "200", "400"]);
    assert_eq!(auth_plain(&mut c, USER, PASSWORD).code, 235);
    assert_eq!(c.cmd("MAIL FROM:<alice@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<x@example.com>").code, 250);
    assert_eq!(send_data(&mut c).code, 250);
    assert_eq!(rec.messages().len(), 1);
}

fn rewrite_config(fg: &Floodgate, rec: &Recorder, extra: &str) {
    let cfg = FloodgateConfig::new(rec.addr())
        .auth_without_tls(true)
        .log_level("info")
        .extra(extra);
    // The listeners keep their addresses on reload; port 0 is not re-bound.
    std::fs::write(fg.config_path(), cfg.toml()).expect("rewrite config");
}

const ONE_RCPT: &str = r#"
[[limit]]
name = "reloaded"
ratelimit = "1 / 1h / per_rcpt / strict"
"#;

#[test]
fn sighup_changes_behaviour_without_dropping_a_session() {
    let (rec, fg) = start("");
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<before@example.com>").code, 250);
    rewrite_config(&fg, &rec, ONE_RCPT);
    fg.sighup();
    wait_until(Duration::from_secs(10), "the reload log line", || {
        (log_count(&fg, &["configuration reloaded"]) == 1).then_some(())
    });
    // The same session goes on, under the new limit.
    assert_eq!(c.cmd("RCPT TO:<after@example.com>").code, 450);
    assert_eq!(send_data(&mut c).code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    assert_eq!(rec.messages()[0].rcpts, vec!["before@example.com"]);
}

#[test]
fn broken_config_on_reload_is_refused() {
    let (rec, fg) = start(ONE_RCPT);
    rewrite_config(
        &fg,
        &rec,
        "[[limit]]\nname = \"bad\"\nratelimit = \"10 / 1 hour\"\n",
    );
    fg.sighup();
    let line = wait_until(Duration::from_secs(10), "the refusal log line", || {
        fg.stderr()
            .lines()
            .find(|l| l.contains("new configuration refused"))
            .map(str::to_string)
    });
    assert!(line.contains("floodgate.toml:"), "{line}");
    assert!(line.contains("is not a time value"), "{line}");
    // The old limit is still in force for new sessions.
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<x@example.com>").code, 450);
}

#[test]
fn sessions_at_once_per_ip_get_421() {
    let (_rec, fg) = start(
        r#"
[[limit]]
name = "one-at-a-time"
max = 1
key = "${client_ip/24/64}"
"#,
    );
    let mut first = session(&fg);
    let mut second = RawClient::connect(fg.addr("plain"));
    let r = second.reply();
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (421, Some("4.7.0")),
        "{}",
        r.text()
    );
    assert!(second.is_closed());
    // The first session is untouched; once it ends, a new one is admitted.
    assert_eq!(first.cmd("NOOP").code, 250);
    assert_eq!(first.cmd("QUIT").code, 221);
    drop(first);
    wait_until(Duration::from_secs(10), "the slot to be freed", || {
        let mut c = RawClient::connect(fg.addr("plain"));
        (c.reply().code == 220).then_some(())
    });
}

#[test]
fn limit_state_survives_a_restart_through_the_snapshot() {
    // m = 2.5, not 2: two quick events at p = 1d leave a rate within floating-point noise of
    // 2 (Exim's arithmetic at today's epoch), so a limit of exactly 2 would be a coin flip.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let extra = format!(
        r#"
[store]
backend = "memory"
path = "{}"
snapshot_interval = "1h"

[[limit]]
name = "two"
ratelimit = "2.5 / 1d / per_rcpt / strict"
"#,
        state.display()
    );
    let rec = Recorder::plain();
    let cfg = FloodgateConfig::new(rec.addr())
        .log_level("info")
        .extra(&extra);
    let mut fg = Floodgate::start(&cfg);
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<a@example.com>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@example.com>").code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    drop(c);
    // SIGTERM: the last snapshot is written on the way out.
    assert!(fg.terminate().success());
    assert!(state.exists(), "no snapshot at {}", state.display());
    let fg = Floodgate::start(&cfg);
    let mut c = session(&fg);
    assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<c@example.com>").code, 450);
}

/// "Warn before you block" on one key through the binary: the warn and the defer limit
/// share `1h/per_mail/<ip>`, so each MAIL is counted once (Exim's cache, §4 step 1).
/// Quick MAILs at p = 1h: 1, 1.99..., 2.99...: the third reaches the defer's m = 2. Were
/// each MAIL counted by both limits, the second would already be at 3.99... and deferred.
#[test]
fn warn_and_defer_on_one_key_count_each_message_once() {
    let (_rec, fg) = start(
        r#"
[[limit]]
name = "early"
ratelimit = "1.5 / 1h / per_mail / strict"
stage = "mail"
action = "warn"
[[limit]]
name = "block"
ratelimit = "2 / 1h / per_mail / strict"
stage = "mail"
message = "4.7.1 rate ${sender_rate}"
"#,
    );
    let mut c = session(&fg);
    let mut codes = Vec::new();
    for _ in 0..3 {
        let r = c.cmd("MAIL FROM:<s@example.org>");
        codes.push(r.code);
        if r.code == 250 {
            assert_eq!(c.cmd("RSET").code, 250);
        } else {
            assert!(r.text().trim().ends_with("4.7.1 rate 3"), "{}", r.text());
        }
    }
    assert_eq!(codes, vec![250, 250, 450]);
}

/// A limit keyed by the header From works when nothing logs the message line: at log level
/// "warn" the header is parsed for the policy alone.
#[test]
fn header_from_limit_works_without_message_logs() {
    let rec = Recorder::plain();
    let cfg = FloodgateConfig::new(rec.addr()).log_level("warn").extra(
        r#"
[[limit]]
name = "per-from"
count = "messages"
stage = "message"
key = "${header_from}"
algorithm = "bucket"
rate = "2 / 1h"
burst = "2"
action = "defer"
"#,
    );
    let fg = Floodgate::start(&cfg);
    let mut c = session(&fg);
    let mut send = |from: &str| {
        assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
        assert_eq!(c.cmd("RCPT TO:<r@example.com>").code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("From: <{from}>\r\nSubject: t\r\n\r\nhello\r\n.\r\n").as_bytes());
        c.reply().code
    };
    let codes: Vec<u16> = [
        "a@example.org",
        "a@example.org",
        "a@example.org",
        "b@example.org",
    ]
    .iter()
    .map(|f| send(f))
    .collect();
    // The third message from a@ is over; b@ has its own key.
    assert_eq!(codes, [250, 250, 451, 250]);
    assert_eq!(rec.messages().len(), 3);
}
