//! `smtpd_milters = floodgate`: a compromised SASL account is limited recipient by
//! recipient (`450 4.7.1`), restricted, and its later mail held in Postfix's hold queue;
//! another account's mail flows; a floodgate that is down gets `milter_default_action`.

use crate::common;
use crate::support::{free_port, start_milter, verb, wait_queue};

use common::postfix::{b64, token, PfListener, Postfix, PostfixConfig};
use common::*;

const SECOND: (&str, &str) = ("bob", "hunter22");

/// Three recipients an hour per account; more are deferred one by one.
const PER_RECIPIENT: &str = r#"
[[limit]]
name = "per-user-rcpt"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "3 / 1h"
burst = "3"
action = "defer"
"#;

/// Three recipients an hour per account, then restricted, and a restricted account's mail
/// held (the message that crosses the limit too).
const LIMITS: &str = r#"
[[limit]]
name = "per-user-rcpt"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "3 / 1h"
burst = "3"
action = "restrict"
while_restricted = "hold"
"#;

fn postfix(milter: &str, default_action: &str) -> Postfix {
    let mut cfg = PostfixConfig::default()
        .sasl()
        .milters(milter, "", default_action);
    cfg.users.push((SECOND.0.into(), SECOND.1.into()));
    Postfix::start(&cfg)
}

/// An authenticated session on Postfix's plain listener.
fn login(pf: &Postfix, user: &str, password: &str) -> RawClient {
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    c.ehlo("client.example");
    let r = c.cmd(&format!(
        "AUTH PLAIN {}",
        b64(&format!("\0{user}\0{password}"))
    ));
    assert_eq!(r.code, 235, "{r:?}");
    c
}

/// MAIL, the RCPTs and, when one was taken, the message: every reply code in order.
fn send(c: &mut RawClient, from: &str, rcpts: &[String], subject: &str) -> Vec<u16> {
    let mut codes = vec![c.cmd(&format!("MAIL FROM:<{from}>")).code];
    for r in rcpts {
        codes.push(c.cmd(&format!("RCPT TO:<{r}>")).code);
    }
    if codes[1..].contains(&250) {
        let r = c.cmd("DATA");
        codes.push(r.code);
        if r.code == 354 {
            c.send(
                format!("From: <{from}>\r\nSubject: {subject}\r\n\r\nhello {subject}\r\n.\r\n")
                    .as_bytes(),
            );
            codes.push(c.reply().code);
        }
    } else {
        c.cmd("RSET");
    }
    codes
}

#[test]
fn recipients_over_the_limit_get_their_own_450() {
    let port = free_port();
    let pf = postfix(&format!("inet:127.0.0.1:{port}"), "tempfail");
    let _log = pf.log_on_panic();
    let fg = start_milter(&pf, port, PER_RECIPIENT);
    let tok = token("milter-rcpt");
    let rcpts: Vec<String> = (0..5).map(|i| format!("r{i}-{tok}@dest.test")).collect();
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(&mut c, "alice@client.test", &rcpts, &tok);
    assert_eq!(
        codes,
        [250, 250, 250, 250, 450, 450, 354, 250],
        "{}",
        fg.stderr()
    );
    let line = pf.wait_log("with floodgate's 450", |l| {
        l.contains("milter-reject: RCPT")
    });
    assert!(line.contains("450 4.7.1"), "{line}");
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 3);
    // The limit is used up: the next message's recipient is deferred, and no DATA follows.
    let codes = send(&mut c, "alice@client.test", &rcpts[..1], &tok);
    assert_eq!(codes, [250, 450]);
}

#[test]
fn a_compromised_account_is_restricted_and_held_while_another_flows() {
    let port = free_port();
    let pf = postfix(&format!("inet:127.0.0.1:{port}"), "tempfail");
    let _log = pf.log_on_panic();
    let fg = start_milter(&pf, port, LIMITS);
    let tok = token("milter-smtpd");
    let rcpts: Vec<String> = (0..5).map(|i| format!("r{i}-{tok}@dest.test")).collect();

    // Five recipients: the fourth crosses the limit and restricts the account, whose
    // message is then taken and held in Postfix's hold queue, not delivered.
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(&mut c, "alice@client.test", &rcpts, &format!("{tok}-first"));
    assert_eq!(
        codes,
        [250, 250, 250, 250, 250, 250, 354, 250],
        "{}",
        fg.stderr()
    );
    // A later message of the restricted account: taken, and held in Postfix's hold queue.
    let codes = send(
        &mut c,
        "alice@client.test",
        &rcpts[..1],
        &format!("{tok}-later"),
    );
    assert_eq!(codes, [250, 250, 354, 250], "{}", fg.stderr());
    assert_eq!(c.cmd("QUIT").code, 221);

    // The other account's mail flows.
    let mut b = login(&pf, SECOND.0, SECOND.1);
    let other: Vec<String> = (0..2).map(|i| format!("b{i}-{tok}@dest.test")).collect();
    let codes = send(&mut b, "bob@client.test", &other, &format!("{tok}-bob"));
    assert_eq!(codes, [250, 250, 250, 354, 250], "{}", fg.stderr());
    assert_eq!(pf.wait_messages(&format!("{tok}-bob"), 2).len(), 2);

    let held = wait_queue(&pf, "held alice's two messages", |q| {
        q.iter().filter(|m| m.queue_name == "hold").count() == 2
    });
    assert!(
        held.iter()
            .filter(|m| m.queue_name == "hold")
            .all(|m| m.sender == "alice@client.test"),
        "{held:?}"
    );
    assert!(pf.messages_with(&format!("{tok}-first")).is_empty());
    assert!(pf.messages_with(&format!("{tok}-later")).is_empty());
    pf.wait_log("holding on floodgate's word", |l| {
        l.contains("milter-hold: END-OF-MESSAGE") && l.contains("milter triggers HOLD action")
    });
    let fgerr = fg.stderr();
    assert!(
        fgerr.contains("message held in Postfix's hold queue"),
        "{fgerr}"
    );

    // Both are in floodgate's ledger under alice; a release delivers each once, and a
    // second release is refused.
    let list = verb(&fg, &["held", "list", "--key", "alice", "--json"]);
    assert!(list.ok(), "{list}");
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let rows = v["held"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert!(rows.iter().all(|r| r["where"] == "postfix"), "{v}");
    for m in held.iter().filter(|m| m.queue_name == "hold") {
        let out = verb(
            &fg,
            &["held", "release", &m.id, "--reason", "checked", "--confirm"],
        );
        assert!(out.ok(), "{out}");
        let again = verb(
            &fg,
            &["held", "release", &m.id, "--reason", "twice", "--confirm"],
        );
        assert!(!again.ok(), "{again}");
    }
    // Bob's two, the first message's five recipients and the later one's: each once.
    pf.wait_messages(&tok, 8);
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 8);
    assert_eq!(pf.messages_with(&format!("{tok}-first")).len(), 5);
    assert_eq!(pf.messages_with(&format!("{tok}-later")).len(), 1);
}

/// Floodgate down: Postfix applies `milter_default_action = tempfail` from the connect
/// on, so the client is told to try again (4xx) and nothing is accepted unfiltered; once
/// floodgate runs, the retry goes through: nothing lost.
#[test]
fn floodgate_down_is_tempfail_and_nothing_is_lost() {
    let port = free_port();
    let pf = postfix(&format!("inet:127.0.0.1:{port}"), "tempfail");
    let _log = pf.log_on_panic();
    let tok = token("milter-down");
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    c.ehlo("client.example");
    let auth = c.cmd(&format!(
        "AUTH PLAIN {}",
        b64(&format!("\0{USER}\0{PASSWORD}"))
    ));
    assert_eq!(auth.class(), 4, "{auth:?}");
    let mail = c.cmd("MAIL FROM:<alice@client.test>");
    assert_eq!(mail.code, 451, "{mail:?}");
    assert!(mail.text().contains("4.7.1"), "{mail:?}");
    drop(c);
    pf.wait_log("with the milter's default action", |l| {
        l.contains("milter-reject: CONNECT") && l.contains("451 4.7.1")
    });
    assert_eq!(pf.queued(), 0);

    let fg = start_milter(&pf, port, LIMITS);
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(
        &mut c,
        "alice@client.test",
        &[format!("r-{tok}@dest.test")],
        &tok,
    );
    assert_eq!(codes, [250, 250, 354, 250], "{}", fg.stderr());
    assert_eq!(pf.wait_messages(&tok, 1).len(), 1);
}

/// `${fingerprint}` works in milter mode: copies of one phishing template from two
/// accounts share a key, and the third copy is refused at the end of data; a `header`
/// limit's field reaches the delivered message through add-header.
#[test]
fn message_keys_and_headers_work_in_milter_mode() {
    use common::campaign::{phishing, Rng};
    let port = free_port();
    let pf = postfix(&format!("inet:127.0.0.1:{port}"), "tempfail");
    let _log = pf.log_on_panic();
    let fg = start_milter(
        &pf,
        port,
        r#"
[[limit]]
name = "per-user-header"
when = "authenticated"
count = "messages"
key = "${authenticated_id}"
rate = "1 / 1h"
burst = "1"
action = "header"

[[limit]]
name = "same-text"
count = "messages"
key = "${fingerprint}"
rate = "2 / 1h"
burst = "2"
action = "defer"
"#,
    );
    let tok = token("milter-keys");
    let mut rng = Rng(11);
    let mut finals = Vec::new();
    for (n, (user, password)) in [(USER, PASSWORD), (SECOND.0, SECOND.1), (USER, PASSWORD)]
        .into_iter()
        .enumerate()
    {
        let (subject, body) = phishing(&mut rng, n);
        let mut c = login(&pf, user, password);
        assert_eq!(c.cmd(&format!("MAIL FROM:<{user}@client.test>")).code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<r{n}-{tok}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("Subject: {subject}\r\nX-Token: {tok}\r\n\r\n{body}.\r\n").as_bytes());
        finals.push(c.reply());
    }
    assert_eq!(finals[0].code, 250, "{}", fg.stderr());
    assert_eq!(finals[1].code, 250, "{}", fg.stderr());
    assert_eq!(finals[2].code, 451, "{:?}\n{}", finals[2], fg.stderr());
    assert!(finals[2].text().contains("4.7.1"), "{:?}", finals[2]);
    pf.settle();
    let got = pf.messages_with(&tok);
    assert_eq!(got.len(), 2);
    // The header limit's field is on every message, over or not, one space after its
    // colon as Postfix writes its own.
    for m in &got {
        let text = String::from_utf8_lossy(&m.raw);
        assert!(
            text.contains(
                "\nX-Floodgate-Rate: per-user-header; rate=1; limit=1; period=1h; over=no\n"
            ),
            "{text}"
        );
    }
    // Alice's second message crossed it but was refused; her next one is over it.
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(
        &mut c,
        "alice@client.test",
        &[format!("h-{tok}@dest.test")],
        &format!("{tok}-header"),
    );
    assert_eq!(codes, [250, 250, 354, 250]);
    let m = &pf.wait_messages(&format!("{tok}-header"), 1)[0];
    let text = String::from_utf8_lossy(&m.raw);
    assert!(
        text.contains("X-Floodgate-Rate: per-user-header; rate=2;"),
        "{text}"
    );
    assert!(text.contains("over=yes"), "{text}");
}

/// The milter on a unix socket (mode 0666: Postfix's smtpd connects as `postfix`): mail
/// flows through it, and a recipient over the limit gets its 450.
#[test]
fn a_unix_socket_milter_serves_postfix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("milter.sock");
    let pf = postfix(&format!("unix:{}", socket.display()), "tempfail");
    let _log = pf.log_on_panic();
    let cfg = pf
        .floodgate_config(PfListener::Plain)
        .listeners(Vec::new())
        .extra(&format!(
            "[[milter]]\nname = \"pf\"\nlisten = \"unix:{}\"\nmode = \"0666\"\n\n{PER_RECIPIENT}",
            socket.display()
        ));
    let fg = Floodgate::start(&cfg);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "{}", fg.stderr());
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666);
    let tok = token("milter-unix");
    let rcpts: Vec<String> = (0..4).map(|i| format!("u{i}-{tok}@dest.test")).collect();
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(&mut c, "alice@client.test", &rcpts, &tok);
    assert_eq!(
        codes,
        [250, 250, 250, 250, 450, 354, 250],
        "{}",
        fg.stderr()
    );
    assert_eq!(pf.wait_messages(&tok, 3).len(), 3);
}

/// Limits that only count (a header limit per recipient, a warning per client): Postfix
/// is asked to wait for no answer but MAIL's and the end of the message's, and sends no
/// DATA, header fields or body. Every recipient is counted all the same: the header field
/// added at the end tells the recipients counted, and the message arrives whole.
#[test]
fn limits_that_only_count_are_not_waited_for() {
    let port = free_port();
    let pf = postfix(&format!("inet:127.0.0.1:{port}"), "tempfail");
    let _log = pf.log_on_panic();
    let fg = start_milter(
        &pf,
        port,
        r#"
[[limit]]
name = "rcpt-header"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "2 / 1h"
burst = "2"
action = "header"

[[limit]]
name = "per-ip"
ratelimit = "100 / 1h / per_rcpt / strict"
action = "warn"
"#,
    );
    let tok = token("milter-count");
    let rcpts: Vec<String> = (0..3).map(|i| format!("c{i}-{tok}@dest.test")).collect();
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(&mut c, "alice@client.test", &rcpts, &tok);
    assert_eq!(codes, [250, 250, 250, 250, 354, 250], "{}", fg.stderr());
    let got = pf.wait_messages(&tok, 3);
    for m in &got {
        let text = String::from_utf8_lossy(&m.raw);
        // The third recipient crossed the limit of two: counted at RCPT without Postfix
        // waiting for the answer.
        assert!(text.contains("\nX-Floodgate-Rate: rcpt-header;"), "{text}");
        assert!(text.contains("over=yes"), "{text}");
        assert!(text.contains(&format!("hello {tok}")), "{text}");
    }
}

/// With limits that only count, Postfix waits for no answer before the end of the
/// message, not even at MAIL: an account an admin restricts is refused there (its MAIL and
/// RCPT went on unanswered), nothing of its message is delivered, and another account's
/// mail flows.
#[test]
fn a_restricted_account_is_refused_at_the_end_when_mail_is_not_waited_for() {
    let port = free_port();
    let pf = postfix(&format!("inet:127.0.0.1:{port}"), "tempfail");
    let _log = pf.log_on_panic();
    let fg = start_milter(
        &pf,
        port,
        r#"
[[limit]]
name = "per-ip"
ratelimit = "100 / 1h / per_rcpt / strict"
action = "warn"
"#,
    );
    let out = verb(
        &fg,
        &["restrict", USER, "--for", "1h", "--reason", "phished"],
    );
    assert!(out.ok(), "{out}");
    let tok = token("milter-owed");
    let mut c = login(&pf, USER, PASSWORD);
    let codes = send(
        &mut c,
        "alice@client.test",
        &[format!("a-{tok}@dest.test")],
        &tok,
    );
    assert_eq!(&codes[..3], [250, 250, 354], "{}", fg.stderr());
    assert_eq!(codes[3] / 100, 4, "{codes:?}\n{}", fg.stderr());
    pf.wait_log("the refusal at the end of the message", |l| {
        l.contains("milter-reject: END-OF-MESSAGE") && l.contains("4.7.1")
    });
    let mut b = login(&pf, SECOND.0, SECOND.1);
    let codes = send(
        &mut b,
        "bob@client.test",
        &[format!("b-{tok}@dest.test")],
        &tok,
    );
    assert_eq!(codes, [250, 250, 354, 250], "{}", fg.stderr());
    pf.wait_messages(&tok, 1);
    pf.settle();
    let got = pf.messages_with(&tok);
    assert_eq!(got.len(), 1);
    assert!(String::from_utf8_lossy(&got[0].raw).contains("bob@client.test"));
}
