//! The hold spool in front of a real Postfix 3.7 (tests/common/postfix.rs): a held message,
//! released, arrives in Postfix's maildir with the body it was sent with (one trace header
//! added) and the original client named through XCLIENT.

use crate::common;

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::postfix::{token, PfListener, Postfix, PostfixConfig};
use common::*;
use serde_json::Value;
use tempfile::TempDir;

fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, PostfixConfig::default)
}

/// A whole message (Postfix adds no header to it: Date, Message-ID, From and To are there).
fn message(tok: &str, n: usize) -> String {
    format!(
        "Date: Wed, 25 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{tok}-{n}@client.test>\r\n\
         From: <sender@client.test>\r\nTo: <rcpt-{tok}@dest.test>\r\nSubject: {tok} {n}\r\n\r\n\
         first line\r\n..a line starting with a dot\r\n\tindented\r\n"
    )
}

#[test]
fn a_held_message_released_to_postfix_arrives_intact_from_the_original_client() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let spool = TempDir::new().unwrap();
    // One recipient per hour per client address: the second message is held.
    let limits = format!(
        "[[limit]]\nname = \"per-client\"\ncount = \"recipients\"\nalgorithm = \"bucket\"\n\
         rate = \"1 / 1h\"\nburst = \"1\"\naction = \"hold\"\n\n[hold]\ndir = \"{}\"\n",
        spool.path().display()
    );
    let fg = Floodgate::start(&pf.floodgate_config(PfListener::Plain).extra(&limits));
    let tok = token("hold");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.example").code, 250);
    for n in 0..2 {
        assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<rcpt-{tok}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(message(&tok, n).as_bytes());
        c.send(b".\r\n");
        assert_eq!(c.reply().code, 250);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    pf.wait_messages(&tok, 1);
    let sock = fg.admin_socket();
    let verb = |args: &[&str]| {
        run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(args)
                .arg("--socket")
                .arg(&sock),
            Duration::from_secs(30),
        )
    };
    let list = verb(&["held", "list", "--json"]);
    assert!(list.ok(), "{list}");
    let v: Value = serde_json::from_str(&list.stdout).unwrap();
    let held = v["held"].as_array().unwrap();
    assert_eq!(held.len(), 1, "{v}");
    assert_eq!(held[0]["subject"], format!("{tok} 1"));
    pf.settle();
    assert_eq!(
        pf.messages_with(&tok).len(),
        1,
        "Postfix got only the first"
    );

    let id = held[0]["id"].as_str().unwrap();
    let out = verb(&["held", "release", id, "--reason", "postfix test"]);
    assert!(out.ok(), "{out}");
    let msgs = pf.wait_messages(&tok, 2);
    let m = msgs
        .iter()
        .find(|m| m.text().contains(&format!("Subject: {tok} 1")))
        .unwrap_or_else(|| panic!("released message not delivered: {msgs:?}"));
    // Postfix's own lines on top, then the trace header, then the message as sent
    // (maildir line ends are LF; dot-stuffing undone).
    let text = m.text();
    let at = text
        .find("X-Floodgate-Released: ")
        .unwrap_or_else(|| panic!("no trace header: {text}"));
    let after = &text[at..];
    let trace_end = after.find('\n').unwrap() + 1;
    assert!(after[..trace_end].contains(&format!("id={id};")), "{after}");
    let sent = message(&tok, 1)
        .replace("\r\n", "\n")
        .replace("\n..", "\n.");
    assert_eq!(
        &after[trace_end..],
        sent,
        "identical body after the trace header"
    );
    assert_eq!(text.matches("X-Floodgate-Released:").count(), 1);
    // The original client through XCLIENT: its HELO and address, not floodgate's.
    let received = m.postfix_received();
    assert!(
        received.starts_with("from client.example (") && received.contains("[127.0.0.1]"),
        "{received}"
    );
    let after_release = verb(&["held", "list", "--json"]);
    assert!(
        after_release.stdout.contains("\"held\":[]"),
        "{after_release}"
    );
}

#[test]
fn a_released_message_of_an_authenticated_user_reaches_postfix_as_that_user() {
    let pf = Postfix::start(&PostfixConfig::default().sasl());
    let _log = pf.log_on_panic();
    let spool = TempDir::new().unwrap();
    let limits = format!(
        "[[limit]]\nname = \"per-user\"\nwhen = \"authenticated\"\ncount = \"recipients\"\n\
         key = \"${{authenticated_id}}\"\nalgorithm = \"bucket\"\nrate = \"1 / 1h\"\n\
         burst = \"1\"\naction = \"hold\"\n\n[hold]\ndir = \"{}\"\n",
        spool.path().display()
    );
    let fg = Floodgate::start(&pf.floodgate_config(PfListener::Plain).extra(&limits));
    let tok = token("holdauth");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.example").code, 250);
    let plain = common::postfix::b64(&format!("\0{USER}\0{PASSWORD}"));
    assert_eq!(c.cmd(&format!("AUTH PLAIN {plain}")).code, 235);
    for n in 0..2 {
        assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<rcpt-{tok}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(message(&tok, n).as_bytes());
        c.send(b".\r\n");
        assert_eq!(c.reply().code, 250);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    pf.wait_messages(&tok, 1);
    let sock = fg.admin_socket();
    let verb = |args: &[&str]| {
        run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(args)
                .arg("--socket")
                .arg(&sock),
            Duration::from_secs(30),
        )
    };
    let out = verb(&["held", "release", "--key", USER, "--reason", "checked"]);
    assert!(out.ok(), "{out}");
    let msgs = pf.wait_messages(&tok, 2);
    let released = msgs
        .iter()
        .find(|m| m.text().contains("X-Floodgate-Released: "))
        .unwrap_or_else(|| panic!("{msgs:?}"));
    let original = msgs
        .iter()
        .find(|m| !m.text().contains("X-Floodgate-Released: "))
        .unwrap();
    // Both as the authenticated user: the release through XCLIENT LOGIN.
    let (r1, r2) = (original.postfix_received(), released.postfix_received());
    assert!(r1.contains("with ESMTPA"), "{r1}");
    assert!(
        r2.contains("with ESMTPA") && r2.starts_with("from client.example ("),
        "{r2}"
    );
}
