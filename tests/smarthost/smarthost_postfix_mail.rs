//! floodgate in front of a real Postfix 3.7 with Dovecot SASL (tests/common/postfix.rs):
//! the mail itself. SIZE, DSN, SMTPUTF8 and 8BITMIME, 200 pipelined recipients, a 5 MB
//! message, a per-user limit where Postfix sees only what floodgate accepted, and SMTP
//! smuggling payloads against a Postfix that takes a bare LF for a line end.
//!
//! One Postfix (with Dovecot) serves every test of this file; each test starts its own
//! floodgate and tells its messages apart by a unique token in the subject.

use crate::common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use common::postfix::{b64, send_small_message, token, PfListener, Postfix, PostfixConfig};
use common::*;

/// The Postfix every test here shares: Dovecot SASL, XCLIENT authorised for loopback, and
/// a bare LF taken for a line end (`smtpd_forbid_bare_newline = no`, Postfix 3.7.11's
/// default written out): the smuggling comparison needs it.
fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || {
        PostfixConfig::default().sasl().forbid_bare_newline("no")
    })
}

/// floodgate with XCLIENT in front of Postfix's plain listener, `extra` TOML appended.
fn floodgate(pf: &Postfix, extra: &str) -> Floodgate {
    let mut cfg = pf.floodgate_config(PfListener::Plain);
    if !extra.is_empty() {
        cfg = cfg.extra(extra);
    }
    Floodgate::start(&cfg)
}

// ---------------------------------------------------------------------------------------
// ESMTP extensions, many recipients, a large message
// ---------------------------------------------------------------------------------------

#[test]
fn size_is_advertised_and_a_declared_size_over_postfix_limit_is_refused() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.example");
    assert!(ehlo.keywords().contains(&"SIZE".to_string()), "{ehlo:?}");
    // Postfix's message_size_limit is 10240000 here; floodgate's own limit is larger.
    let r = c.cmd("MAIL FROM:<big@client.test> SIZE=20000000");
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (552, Some("5.3.4")),
        "{r:?}"
    );
    let tok = token("size");
    let r = c.cmd("MAIL FROM:<small@client.test> SIZE=2000");
    assert_eq!(r.code, 250, "{r:?}");
    assert_eq!(c.cmd(&format!("RCPT TO:<size-{tok}@dest.test>")).code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: {tok}\r\n\r\nsmall\r\n.\r\n").as_bytes());
    assert_eq!(c.reply().code, 250);
    pf.wait_messages(&tok, 1);
}

#[test]
fn size_advertised_is_floodgates_own_limit_when_smaller_than_postfixs() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    // Postfix advertises SIZE 10240000; floodgate takes at most 1 MiB.
    let fg = floodgate(pf, "[smtp]\nmax_message_size = 1048576\n");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.example");
    let size: Vec<&String> = ehlo
        .lines
        .iter()
        .filter(|l| l.to_ascii_uppercase().starts_with("SIZE"))
        .collect();
    assert_eq!(size, ["SIZE 1048576"], "{ehlo:?}");
    // A declared size between the two limits is refused by floodgate itself.
    let r = c.cmd("MAIL FROM:<between@client.test> SIZE=2000000");
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (552, Some("5.3.4")),
        "{r:?}"
    );
    assert_eq!(c.cmd("QUIT").code, 221);
}

#[test]
fn dsn_parameters_reach_postfix_which_reports_the_delivery() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("dsn");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.example");
    assert!(ehlo.keywords().contains(&"DSN".to_string()), "{ehlo:?}");
    let r = c.cmd(&format!(
        "MAIL FROM:<dsn-sender-{tok}@client.test> RET=HDRS ENVID=env-{tok}"
    ));
    assert_eq!(r.code, 250, "{r:?}");
    let r = c.cmd(&format!(
        "RCPT TO:<dsn-{tok}@dest.test> NOTIFY=SUCCESS ORCPT=rfc822;dsn-{tok}@dest.test"
    ));
    assert_eq!(r.code, 250, "{r:?}");
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: {tok}\r\n\r\nplease confirm\r\n.\r\n").as_bytes());
    assert_eq!(c.reply().code, 250);
    // The message, and Postfix's success report to the sender (also delivered here).
    let msgs = pf.wait_messages(&tok, 2);
    let report = msgs
        .iter()
        .find(|m| {
            m.header("Delivered-To").as_deref() == Some(&format!("dsn-sender-{tok}@client.test"))
        })
        .unwrap_or_else(|| panic!("no delivery report to the sender: {msgs:?}"));
    let text = report.text();
    assert!(
        text.contains(&format!("Original-Envelope-Id: env-{tok}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("Original-Recipient: rfc822;dsn-{tok}@dest.test")),
        "{text}"
    );
    assert!(text.contains("Action: delivered"), "{text}");
}

#[test]
fn smtputf8_addresses_and_headers_are_delivered() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("utf8");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.example");
    assert!(
        ehlo.keywords().contains(&"SMTPUTF8".to_string()),
        "{ehlo:?}"
    );
    let r = c.cmd(&format!("MAIL FROM:<sendér-{tok}@client.test> SMTPUTF8"));
    assert_eq!(r.code, 250, "{r:?}");
    let r = c.cmd(&format!("RCPT TO:<grüße-{tok}@dest.test>"));
    assert_eq!(r.code, 250, "{r:?}");
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(
        format!("Subject: Grüße {tok}\r\nFrom: <sendér-{tok}@client.test>\r\n\r\nÜber\r\n.\r\n")
            .as_bytes(),
    );
    assert_eq!(c.reply().code, 250);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert_eq!(
        m.header("Delivered-To"),
        Some(format!("grüße-{tok}@dest.test")),
        "{m:?}"
    );
    assert_eq!(m.header("Subject"), Some(format!("Grüße {tok}")));
    assert!(m.postfix_received().contains("with UTF8SMTP"), "{m:?}");
}

#[test]
fn eight_bit_mime_body_arrives_byte_for_byte() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("8bit");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.example");
    assert!(
        ehlo.keywords().contains(&"8BITMIME".to_string()),
        "{ehlo:?}"
    );
    assert_eq!(c.cmd("MAIL FROM:<a@client.test> BODY=8BITMIME").code, 250);
    assert_eq!(c.cmd(&format!("RCPT TO:<eight-{tok}@dest.test>")).code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    let body: &[u8] = b"caf\xe9 \xff\xfe latin-1 and \xc3\xa9 utf-8\r\n";
    let mut msg = format!(
        "Subject: {tok}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\
         Content-Transfer-Encoding: 8bit\r\n\r\n"
    )
    .into_bytes();
    msg.extend_from_slice(body);
    msg.extend_from_slice(b".\r\n");
    c.send(&msg);
    assert_eq!(c.reply().code, 250);
    let m = &pf.wait_messages(&tok, 1)[0];
    // The maildir stores LF line ends.
    assert_eq!(
        m.body(),
        b"caf\xe9 \xff\xfe latin-1 and \xc3\xa9 utf-8\n",
        "{m:?}"
    );
    assert!(m.postfix_received().contains("with ESMTP"), "{m:?}");
}

#[test]
fn two_hundred_pipelined_recipients_are_all_delivered() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("rcpt200");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.example");
    assert!(
        ehlo.keywords().contains(&"PIPELINING".to_string()),
        "{ehlo:?}"
    );
    let mut batch = String::from("MAIL FROM:<many@client.test>\r\n");
    for i in 0..200 {
        batch.push_str(&format!("RCPT TO:<r{i}-{tok}@dest.test>\r\n"));
    }
    batch.push_str("DATA\r\n");
    c.send(batch.as_bytes());
    let codes: Vec<u16> = c.replies(202).iter().map(|r| r.code).collect();
    assert!(codes[..201].iter().all(|&c| c == 250), "{codes:?}");
    assert_eq!(codes[201], 354);
    c.send(format!("Subject: {tok}\r\n\r\nto two hundred\r\n.\r\nQUIT\r\n").as_bytes());
    let end: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(end, [250, 221]);
    let msgs = pf.wait_messages(&tok, 200);
    let mut to: Vec<String> = msgs
        .iter()
        .filter_map(|m| m.header("Delivered-To"))
        .collect();
    to.sort();
    to.dedup();
    assert_eq!(to.len(), 200, "{to:?}");
}

#[test]
fn a_five_megabyte_message_arrives_whole() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("5mb");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.example");
    assert_eq!(c.cmd("MAIL FROM:<big@client.test> SIZE=5300000").code, 250);
    assert_eq!(c.cmd(&format!("RCPT TO:<big-{tok}@dest.test>")).code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    let mut body = Vec::with_capacity(5_300_000);
    let mut n = 0usize;
    while body.len() < 5 * 1024 * 1024 {
        // Some lines start with a dot: they travel dot-stuffed both hops.
        let lead = if n % 97 == 0 { "." } else { "" };
        body.extend_from_slice(format!("{lead}line {n:07} {}\r\n", "x".repeat(60)).as_bytes());
        n += 1;
    }
    let mut wire = format!("Subject: {tok}\r\n\r\n").into_bytes();
    for line in body.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b".") {
            wire.push(b'.');
        }
        wire.extend_from_slice(line);
    }
    wire.extend_from_slice(b".\r\n");
    c.send(&wire);
    assert_eq!(c.reply().code, 250);
    let m = &pf.wait_messages(&tok, 1)[0];
    let want: Vec<u8> = body.iter().copied().filter(|&b| b != b'\r').collect();
    assert_eq!(m.body().len(), want.len(), "{} lines sent", n);
    assert!(
        m.body() == want.as_slice(),
        "the delivered body differs from the one sent"
    );
}

// ---------------------------------------------------------------------------------------
// A per-user limit: Postfix sees only what floodgate accepted
// ---------------------------------------------------------------------------------------

#[test]
fn a_per_user_limit_lets_postfix_see_only_the_accepted_messages() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(
        pf,
        r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${authenticated_id}"
algorithm = "bucket"
rate = "3 / 1h"
burst = "3"
action = "defer"
"#,
    );
    let tok = token("per-user");
    let mut codes = Vec::new();
    for i in 0..5 {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        c.ehlo("client.example");
        let r = c.cmd(&format!(
            "AUTH PLAIN {}",
            b64(&format!("\0{USER}\0{PASSWORD}"))
        ));
        assert_eq!(r.code, 235, "{r:?}");
        let m = send_small_message(&mut c, &format!("{tok}-{i}"));
        assert_eq!(c.cmd("QUIT").code, 221);
        codes.push(m);
    }
    let accepted = codes
        .iter()
        .filter(|c| c.last() == Some(&250) && c.len() == 4)
        .count();
    assert_eq!(accepted, 3, "{codes:?}");
    for c in &codes[3..] {
        assert!(c.contains(&450), "the excess is deferred: {codes:?}");
    }
    // Every 250 the client saw is in Postfix's queue or maildir by now; once the queue
    // is empty the maildir holds all of them, and nothing more.
    pf.settle();
    let delivered = pf.messages_with(&tok);
    assert_eq!(delivered.len(), 3, "{delivered:?}");
}

// ---------------------------------------------------------------------------------------
// SMTP smuggling against a Postfix that takes a bare LF for a line end
// ---------------------------------------------------------------------------------------

/// End-of-data look-alikes (SEC Consult 2023 and variants), each put between a message
/// body and a second, hidden envelope.
const SMUGGLING: [&[u8]; 11] = [
    b"\n.\n",
    b"\n.\r\n",
    b"\r\n.\n",
    b"\r.\r",
    b"\r\n.\r",
    b"\r.\r\n",
    b"\n.\r",
    b"\r.\n",
    b".\r\r\n",
    b"\r\n.\r\r\n",
    b"\r\n\x00.\r\n",
];

/// One session to `addr` sending a message whose body holds `payload` and then a hidden
/// MAIL/RCPT/DATA for `victim-TOK`; returns the replies up to the close.
fn smuggle(addr: SocketAddr, tok: &str, payload: &[u8]) -> Vec<Reply> {
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo("client.example");
    c.send(
        format!("MAIL FROM:<honest@client.test>\r\nRCPT TO:<one-{tok}@dest.test>\r\nDATA\r\n")
            .as_bytes(),
    );
    let codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 354]);
    let mut msg = format!("Subject: honest {tok}\r\n\r\nbody").into_bytes();
    msg.extend_from_slice(payload);
    msg.extend_from_slice(
        format!(
            "MAIL FROM:<evil@client.test>\r\nRCPT TO:<victim-{tok}@dest.test>\r\nDATA\r\n\
             Subject: smuggled {tok}\r\n\r\nsmuggled\r\n.\r\nQUIT\r\n"
        )
        .as_bytes(),
    );
    c.send(&msg);
    c.replies_until_close()
}

/// The payloads (by index) whose hidden message Postfix delivered as a message of its own.
fn smuggled_through(pf: &Postfix, toks: &[String]) -> Vec<usize> {
    pf.settle();
    toks.iter()
        .enumerate()
        .filter(|(_, tok)| {
            pf.messages_with(tok).iter().any(|m| {
                m.header("Delivered-To")
                    .is_some_and(|d| d.starts_with("victim-"))
            })
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn smuggling_payloads_get_through_to_postfix_alone_but_none_through_floodgate() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    assert_eq!(
        pf.config().forbid_bare_newline.as_deref(),
        Some("no"),
        "this comparison needs a Postfix that accepts bare LF line ends"
    );
    // Straight to Postfix.
    let direct: Vec<String> = (0..SMUGGLING.len())
        .map(|i| token(&format!("smuggle-direct-{i}")))
        .collect();
    for (p, tok) in SMUGGLING.iter().zip(&direct) {
        smuggle(pf.addr(PfListener::Plain), tok, p);
    }
    let through = smuggled_through(pf, &direct);
    let shown: Vec<String> = through.iter().map(|&i| show(SMUGGLING[i])).collect();
    eprintln!(
        "straight to Postfix (smtpd_forbid_bare_newline = no), {} of {} payloads smuggled a \
         message: {shown:?}",
        through.len(),
        SMUGGLING.len()
    );
    // The bare-LF forms at least: what makes this Postfix a fair target.
    for want in [0, 1, 2] {
        assert!(
            through.contains(&want),
            "payload {} should get through to a lax Postfix alone (got {shown:?})",
            show(SMUGGLING[want])
        );
    }

    // Through floodgate, in both of its modes for bare line ends.
    for mode in ["reject", "normalize"] {
        let fg = floodgate(pf, &format!("[smtp]\nbare_line_endings = \"{mode}\""));
        let toks: Vec<String> = (0..SMUGGLING.len())
            .map(|i| token(&format!("smuggle-{mode}-{i}")))
            .collect();
        let mut acked = Vec::new();
        for (p, tok) in SMUGGLING.iter().zip(&toks) {
            let replies = smuggle(fg.addr("plain"), tok, p);
            let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
            // One reply for the one message floodgate saw, then QUIT's.
            assert_eq!(codes.len(), 2, "{mode}, payload {}: {replies:?}", show(p));
            assert_eq!(codes[1], 221, "{mode}, payload {}: {replies:?}", show(p));
            if codes[0] == 250 {
                acked.push(tok.clone());
            }
        }
        let smuggled = smuggled_through(pf, &toks);
        assert!(
            smuggled.is_empty(),
            "{mode}: smuggled through floodgate: {:?}",
            smuggled
                .iter()
                .map(|&i| show(SMUGGLING[i]))
                .collect::<Vec<_>>()
        );
        // Postfix holds exactly the messages floodgate acknowledged, each once, for the
        // honest recipient only.
        for tok in &toks {
            let got = pf.messages_with(tok);
            let want = usize::from(acked.contains(tok));
            assert_eq!(got.len(), want, "{mode} {tok}: {got:?}");
            for m in got {
                assert_eq!(
                    m.header("Delivered-To"),
                    Some(format!("one-{tok}@dest.test"))
                );
            }
        }
    }
}
