//! `[alerts] mail_to` through a real Postfix into its maildir: a restriction's alert mail
//! arrives from the null sender with its headers, evidence and console link; alert mail is
//! capped by `max_per_minute` like every alert; the daily digest is sent on request.

use crate::common;

use std::sync::OnceLock;

use common::postfix::{b64, token, PfListener, Postfix, PostfixConfig};
use common::*;

fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || PostfixConfig::default().sasl())
}

/// floodgate in front of the shared Postfix: alert mail to `postmaster@alerts-TOK.test`,
/// at most two alerts a minute; `per-sender` alerts once for every new envelope sender
/// (warn only: a rate of at least 0 is over); `user-rcpts` counts recipients (never over
/// here); `per-user` restricts after five messages.
fn start(pf: &Postfix, tok: &str) -> Floodgate {
    let cfg = pf.floodgate_config(PfListener::Plain).extra(&format!(
        r#"
[admin]
socket = "admin.sock"
public_url = "https://console-{tok}.test/"
[alerts]
max_per_minute = 2
mail_to = ["postmaster@alerts-{tok}.test"]
mail_digest = "08:00"
[[limit]]
name = "per-sender"
stage = "mail"
ratelimit = "0 / 1h / per_mail / ${{sender_address}}"
action = "warn"
[[limit]]
name = "user-rcpts"
stage = "rcpt"
ratelimit = "100 / 1h / per_rcpt / ${{authenticated_id}}"
action = "warn"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "5 / 1h"
burst = "5"
action = "restrict"
"#
    ));
    Floodgate::start(&cfg)
}

fn session(fg: &Floodgate) -> RawClient {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.example");
    let r = c.cmd(&format!(
        "AUTH PLAIN {}",
        b64(&format!("\0{USER}\0{PASSWORD}"))
    ));
    assert_eq!(r.code, 235, "{r:?}");
    c
}

#[test]
fn a_restriction_is_mailed_to_the_postmaster_through_postfix_and_alerts_are_capped() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let tok = token("alertmail");
    let fg = start(pf, &tok);
    // Six messages from six senders: six per-sender crossings, of which max_per_minute
    // (2) become alerts; the sixth message restricts the user.
    for i in 0..6 {
        let mut c = session(&fg);
        c.send(
            format!(
                "MAIL FROM:<s{i}-{tok}@client.test>\r\nRCPT TO:<r-{tok}@dest.test>\r\nDATA\r\n"
            )
            .as_bytes(),
        );
        let codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
        if codes[2] == 354 {
            c.send(format!("Subject: Invoice {i}\r\n\r\nhello\r\n.\r\n").as_bytes());
            c.reply();
        }
        assert_eq!(c.cmd("QUIT").code, 221);
    }
    // Alert mail is sent in order by one task: once the restriction's mail (queued last)
    // is in the maildir, every earlier one was sent, and Postfix delivers them all.
    let subject = format!("floodgate: {USER} restricted (per-user)");
    let rcpt = format!("postmaster@alerts-{tok}.test");
    let restricted = wait_until(
        common::postfix::DELIVERY_TIMEOUT,
        "the restriction's alert mail in the maildir",
        || {
            pf.messages_with(&rcpt)
                .into_iter()
                .find(|m| m.header("Subject").as_deref() == Some(subject.as_str()))
        },
    );
    pf.settle();
    let mail = pf.messages_with(&rcpt);
    let over: Vec<_> = mail
        .iter()
        .filter(|m| {
            m.header("Subject")
                .is_some_and(|s| s.ends_with(" over per-sender"))
        })
        .collect();
    assert_eq!(over.len(), 2, "max_per_minute caps alert mail: {mail:?}");
    assert!(fg.stderr().contains("alerts suppressed"), "{}", fg.stderr());

    let text = restricted.text();
    let head = restricted.head();
    for want in [
        "Return-Path: <>\n".to_string(),
        format!("Delivered-To: {rcpt}\n"),
        format!("To: <{rcpt}>\n"),
        "Auto-Submitted: auto-generated\n".into(),
        "MIME-Version: 1.0\n".into(),
        "Content-Type: text/plain; charset=utf-8\n".into(),
        "Message-ID: <floodgate.alert.".into(),
        "Date: ".into(),
    ] {
        assert!(head.contains(&want), "{want:?} not in\n{head}");
    }
    let from = restricted.header("From").unwrap_or_default();
    assert!(from.starts_with("floodgate <MAILER-DAEMON@"), "{from}");
    // Postfix saw floodgate's own connection, not a client's (no XCLIENT for alert mail).
    assert!(
        restricted.postfix_received().contains("[127.0.0.1]"),
        "{text}"
    );
    for want in [
        format!("restricted the key {USER}:"),
        "Limit:   per-user\n".into(),
        "Ends:    when released\n".into(),
        format!("Console: https://console-{tok}.test/console/key?k={USER}\n"),
        "  Messages:   ".into(),
        "  Client addresses (messages offered):\n    127.0.0.1  ".into(),
        "  Refusals:   ".into(),
        "  Subjects:\n".into(),
        "    Invoice 4\n".into(),
    ] {
        assert!(text.contains(&want), "{want:?} not in\n{text}");
    }
    let metrics = admin_get(&fg.admin_socket(), "/metrics");
    assert!(
        metrics.contains("floodgate_alert_mail_total{result=\"failed\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("floodgate_alert_mail_total{result=\"dropped\"} 0"),
        "{metrics}"
    );

    // The daily digest, asked for now: the restriction in force and the top keys.
    let answer = admin_request(&fg.admin_socket(), "POST", "/v1/alerts/digest");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let digest_subject = "floodgate: daily digest of ";
    let digest = wait_until(
        common::postfix::DELIVERY_TIMEOUT,
        "the digest in the maildir",
        || {
            pf.messages_with(&rcpt).into_iter().find(|m| {
                m.header("Subject")
                    .is_some_and(|s| s.starts_with(digest_subject))
            })
        },
    );
    let text = digest.text();
    assert!(
        digest
            .header("Subject")
            .is_some_and(|s| s.ends_with("(1 restricted, 0 held)")),
        "{text}"
    );
    for want in [
        "Restrictions in force: 1 (1 made in the last 24 hours)\n".to_string(),
        format!("  {USER}  limit per-user  since "),
        format!("    https://console-{tok}.test/console/key?k={USER}\n"),
        "Released in the last 24 hours: 0\n".into(),
        "Held mail waiting: 0 messages\n".into(),
        "Keys nearest their limits (nearest first):\n".into(),
        format!("%  1h/per_rcpt/{USER}  user-rcpts  "),
    ] {
        assert!(
            text.contains(&want),
            "{want:?} not in\n{text}\n{}",
            admin_get(&fg.admin_socket(), "/v1/top?n=10")
        );
    }
}
