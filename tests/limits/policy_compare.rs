//! Conditions comparing two subjects, through the proxy: a limit on the messages whose
//! envelope sender is not the login counts those messages only.

use crate::common;

use common::*;

const LOGIN: &str = "alice@example.org";

fn start() -> (Recorder, Floodgate) {
    let rec = Recorder::start(RecorderOptions {
        users: vec![(LOGIN.into(), PASSWORD.into())],
        ..RecorderOptions::default()
    });
    let cfg = FloodgateConfig::new(rec.addr())
        .auth_without_tls(true)
        .log_level("info")
        .extra(
            r#"
[[limit]]
name = "foreign-sender"
when = "authenticated && sender != user"
stage = "mail"
count = "messages"
key = "${authenticated_id}"
rate = "2 / 1h"
burst = "2"
action = "defer"
"#,
        );
    let fg = Floodgate::start(&cfg);
    (rec, fg)
}

/// Sends one message from `sender`; the MAIL reply code, and 250 after DATA when accepted.
fn send(c: &mut RawClient, sender: &str, n: usize) -> u16 {
    let code = c.cmd(&format!("MAIL FROM:<{sender}>")).code;
    if code != 250 {
        return code;
    }
    assert_eq!(c.cmd(&format!("RCPT TO:<r{n}@example.com>")).code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: m{n}\r\nFrom: {sender}\r\n\r\nhello\r\n.\r\n").as_bytes());
    c.reply().code
}

#[test]
fn sender_not_the_login_counts_only_mismatched_messages() {
    let (rec, fg) = start();
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{LOGIN}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    // Interleaved: the login's own address (in any case) is never counted; the other
    // senders are, and the third of them is over 2 per hour.
    let plan = [
        ("alice@example.org", 250),
        ("boss@example.net", 250),
        ("ALICE@Example.ORG", 250),
        ("ceo@example.com", 250),
        ("alice@example.org", 250),
        ("billing@example.net", 450),
        ("alice@example.org", 250),
        ("Alice@example.org", 250),
    ];
    for (n, (sender, want)) in plan.iter().enumerate() {
        let got = send(&mut c, sender, n);
        assert_eq!(got, *want, "message {n} from {sender}\n{}", fg.stderr());
        if got != 250 {
            assert_eq!(c.cmd("RSET").code, 250);
        }
    }
    let from: Vec<String> = rec.messages().iter().map(|m| m.mail_from.clone()).collect();
    assert_eq!(
        from,
        vec![
            "alice@example.org",
            "boss@example.net",
            "ALICE@Example.ORG",
            "ceo@example.com",
            "alice@example.org",
            "alice@example.org",
            "Alice@example.org",
        ]
    );
}

#[test]
fn unauthenticated_and_null_sender_messages_are_not_compared() {
    let (rec, fg) = start();
    // No login: nothing to compare, so the limit never counts (3 messages, limit 2).
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    for n in 0..3 {
        assert_eq!(
            send(&mut c, "someone@example.net", n),
            250,
            "{}",
            fg.stderr()
        );
    }
    // With a login, the null sender is not a mismatch either.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{LOGIN}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    for n in 3..6 {
        assert_eq!(send(&mut c, "", n), 250, "{}", fg.stderr());
    }
    assert_eq!(rec.messages().len(), 6);
}
