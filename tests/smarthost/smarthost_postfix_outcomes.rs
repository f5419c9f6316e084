//! floodgate in front of a real Postfix 3.7 with Dovecot SASL (tests/common/postfix.rs):
//! recipients Postfix refuses (550 5.1.1 from a recipient access map) trip a ratio of
//! refused recipients and restrict the user; Postfix's queue ids are read from its answers
//! and the bounces Postfix logs in its own log file, followed by floodgate, trip a bounce
//! ratio.

use crate::common;

use std::time::{Duration, Instant};

use common::postfix::{b64, token, PfListener, Postfix, PostfixConfig};
use common::*;

fn login(c: &mut RawClient) {
    c.ehlo("client.example");
    let r = c.cmd(&format!(
        "AUTH PLAIN {}",
        b64(&format!("\0{USER}\0{PASSWORD}"))
    ));
    assert_eq!(r.code, 235, "{r:?}");
}

/// One message to `rcpts`; the RCPT codes and the end-of-data reply (0 when no DATA).
fn message(c: &mut RawClient, rcpts: &[String], tok: &str) -> (Vec<u16>, u16) {
    assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
    let codes: Vec<u16> = rcpts
        .iter()
        .map(|r| c.cmd(&format!("RCPT TO:<{r}>")).code)
        .collect();
    if !codes.contains(&250) {
        assert_eq!(c.cmd("RSET").code, 250);
        return (codes, 0);
    }
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: {tok}\r\n\r\nhello {tok}\r\n.\r\n").as_bytes());
    (codes, c.reply().code)
}

#[test]
fn recipients_postfix_refuses_trip_a_ratio_and_restrict_the_user() {
    let pf = Postfix::start(
        &PostfixConfig::default()
            .sasl()
            .main_cf("smtpd_recipient_restrictions = check_recipient_access regexp:{{/^nobody/ 550 5.1.1 User unknown}}, permit"),
    );
    let _log = pf.log_on_panic();
    let fg = Floodgate::start(&pf.floodgate_config(PfListener::Plain).extra(
        r#"
[[limit]]
name = "refused-share"
when = "authenticated"
key = "${authenticated_id}"
ratio = "refused_recipients / recipients"
above = 0.5
min_events = 10
period = "1h"
action = "restrict"
"#,
    ));
    let tok = token("refused");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    login(&mut c);
    let rcpts: Vec<String> = (0..20)
        .map(|i| {
            if i < 12 {
                format!("nobody{i}@dest.test")
            } else {
                format!("user{i}-{tok}@dest.test")
            }
        })
        .collect();
    let (codes, end) = message(&mut c, &rcpts, &tok);
    assert_eq!(codes.iter().filter(|c| **c == 550).count(), 12, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 250).count(), 8, "{codes:?}");
    assert_eq!(end, 250);
    // 12 of 20 refused (0.6 > 0.5, 20 >= 10): the next MAIL FROM restricts the user.
    let r = c.cmd("MAIL FROM:<sender@client.test>");
    assert_eq!(r.code, 450, "{r:?}");
    assert_eq!(c.cmd("QUIT").code, 221);
    // And a new session of the user is refused by the restriction.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    login(&mut c);
    let r = c.cmd("MAIL FROM:<sender@client.test>");
    assert_eq!(r.code, 450, "{r:?}");
    let out = admin_json(&fg.admin_socket(), &["restricted"]);
    assert_eq!(out["restricted"][0]["key"], USER, "{out}");
    assert_eq!(out["restricted"][0]["limit"], "refused-share", "{out}");
    // Postfix got the 8 good recipients of the one message.
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 8);
}

#[test]
fn bounces_postfix_logs_trip_a_bounce_ratio() {
    let pf = Postfix::start(
        &PostfixConfig::default()
            .sasl()
            .main_cf("transport_maps = inline:{bounce.test=error:mailbox.unavailable}")
            // Accepted at RCPT TO, bounced by the error transport after queueing.
            .main_cf("smtpd_reject_unlisted_recipient = no"),
    );
    let _log = pf.log_on_panic();
    let maillog = pf.dir().join("maillog");
    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let fg = Floodgate::start(&pf.floodgate_config(PfListener::Plain).extra(&format!(
        r#"
[metrics]
address = "{metrics}"

[[limit]]
name = "bounce-ratio"
when = "authenticated"
key = "${{authenticated_id}}"
ratio = "bounced_recipients / recipients"
above = 0.3
min_events = 10
period = "1h"
action = "deny"

[outcomes]
follow = "{}"
format = "postfix"
poll = "50ms"
"#,
        maillog.display()
    )));
    let tok = token("bounce");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    login(&mut c);
    // 4 delivered, 6 bounced by the error transport after queueing.
    for i in 0..10 {
        let domain = if i < 6 { "bounce.test" } else { "dest.test" };
        let (codes, end) = message(
            &mut c,
            &[format!("r{i}-{tok}@{domain}")],
            &format!("{tok}-{i}"),
        );
        assert_eq!((codes, end), (vec![250], 250));
    }
    // Postfix logs the bounces; floodgate follows the log: the ratio goes to 0.6.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = c.cmd("MAIL FROM:<sender@client.test>");
        if r.code == 550 {
            break;
        }
        assert_eq!(r.code, 250, "{r:?}");
        assert_eq!(c.cmd("RSET").code, 250);
        assert!(
            Instant::now() < deadline,
            "never refused; Postfix log:\n{}",
            pf.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Refused once more than 3 of the 10 recipients bounced (0.4 > 0.3), as logged.
    let log = pf.log();
    assert!(log.matches("status=bounced").count() >= 4, "{log}");
    assert!(log.matches("status=bounced").count() <= 6, "{log}");
    // The counters: Postfix's other lines skipped, the bounces charged.
    let body = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(metrics).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let sample = |name: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("{name} missing:\n{body}"))
    };
    assert!(
        sample("floodgate_outcomes_total{what=\"charged\"}") >= 4,
        "{body}"
    );
    assert!(
        sample("floodgate_outcomes_total{what=\"other_lines\"}") > 0,
        "{body}"
    );
    assert_eq!(sample("floodgate_outcomes_queued"), 10, "{body}");
}

#[test]
fn outcomes_reported_by_hand_count_once() {
    static PF: std::sync::OnceLock<Postfix> = std::sync::OnceLock::new();
    let pf = Postfix::shared(&PF, || PostfixConfig::default().sasl());
    let _log = pf.log_on_panic();
    let fg = Floodgate::start(
        &pf.floodgate_config(PfListener::Plain)
            .log_level("info")
            .extra(
                r#"
[[limit]]
name = "bounce-ratio"
key = "${authenticated_id}"
ratio = "bounced_recipients / recipients"
above = 0.3
min_events = 10
period = "1h"
action = "deny"
"#,
            ),
    );
    let tok = token("by-hand");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    login(&mut c);
    let mut ids = Vec::new();
    for i in 0..10 {
        assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}-{tok}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("Subject: {tok}\r\n\r\nhi\r\n.\r\n").as_bytes());
        let r = c.reply();
        assert_eq!(r.code, 250);
        let text = r.text();
        let id = text.trim().rsplit(' ').next().unwrap().to_string();
        assert!(text.contains("queued as"), "{text}");
        ids.push((id, format!("r{i}-{tok}@dest.test")));
    }
    let sock = fg.admin_socket();
    let outcome = |id: &str, rcpt: &str, result: &str| {
        admin_json(&sock, &["outcome", id, rcpt, result])["counted"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        outcome(&ids[0].0, &ids[0].1, "bounced"),
        "charged",
        "{ids:?}\n{}",
        fg.stderr()
    );
    assert_eq!(outcome(&ids[0].0, &ids[0].1, "bounced"), "duplicate");
    assert_eq!(outcome(&ids[1].0, &ids[1].1, "sent"), "not_charged");
    assert_eq!(
        outcome("NOSUCHID", &ids[1].1, "bounced"),
        "unknown_queue_id"
    );
    for (id, rcpt) in &ids[1..3] {
        assert_eq!(outcome(id, rcpt, "deferred"), "charged");
        assert_eq!(outcome(id, rcpt, "bounced"), "charged");
    }
    // 3 bounced of 10: not above 0.3 yet.
    assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
    assert_eq!(c.cmd("RSET").code, 250);
    assert_eq!(outcome(&ids[3].0, &ids[3].1, "bounced"), "charged");
    let r = c.cmd("MAIL FROM:<sender@client.test>");
    assert_eq!(r.code, 550, "{r:?}");
    // inspect shows the ratio: 4 bounced of 10.
    let v = admin_json(&sock, &["inspect", USER]);
    let l = &v["limits"][0];
    assert_eq!(l["algorithm"], "ratio", "{v}");
    assert_eq!(l["value"], 0.4, "{v}");
    assert_eq!(l["over"], true, "{v}");
    // Bad input.
    let out = admin_verb(&sock, &["outcome", &ids[4].0, &ids[4].1, "exploded"]);
    assert!(!out.ok(), "{out}");
    assert!(out.stderr.contains("bounced"), "{out}");
}

#[test]
fn the_queued_messages_outlive_a_restart_through_the_event_log() {
    static PF: std::sync::OnceLock<Postfix> = std::sync::OnceLock::new();
    let pf = Postfix::shared(&PF, || PostfixConfig::default().sasl());
    let _log = pf.log_on_panic();
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let cfg = pf.floodgate_config(PfListener::Plain).extra(&format!(
        r#"
[report]
events = "{}"

[[limit]]
name = "bounces"
key = "${{authenticated_id}}"
count = "bounced_recipients"
rate = "100 / 1h"
burst = "100"
"#,
        events.display()
    ));
    let mut fg = Floodgate::start(&cfg);
    let tok = token("restart");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    login(&mut c);
    let mut ids = Vec::new();
    for i in 0..2 {
        assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}-{tok}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("Subject: {tok}\r\n\r\nhi\r\n.\r\n").as_bytes());
        let r = c.reply();
        let text = r.text();
        ids.push((
            text.trim().rsplit(' ').next().unwrap().to_string(),
            format!("r{i}-{tok}@dest.test"),
        ));
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    let outcome = |sock: &std::path::Path, id: &str, rcpt: &str| {
        admin_json(sock, &["outcome", id, rcpt, "bounced"])["counted"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(outcome(&fg.admin_socket(), &ids[0].0, &ids[0].1), "charged");
    assert!(fg.terminate().success());
    let text = std::fs::read_to_string(&events).unwrap();
    assert_eq!(text.matches("{\"event\":\"queued\"").count(), 2, "{text}");
    assert_eq!(text.matches("{\"event\":\"outcome\"").count(), 1, "{text}");
    // A new floodgate reads them back: the counted bounce stays counted, the other is new.
    let fg = Floodgate::start(&cfg);
    assert_eq!(
        outcome(&fg.admin_socket(), &ids[0].0, &ids[0].1),
        "duplicate"
    );
    assert_eq!(outcome(&fg.admin_socket(), &ids[1].0, &ids[1].1), "charged");
    // `floodgate report` reads the same log, skipping the queued and outcome lines.
    let out = run_with_timeout(
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("report")
            .arg("--config")
            .arg(fg.config_path())
            .arg("--events")
            .arg(&events),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{out}");
}
