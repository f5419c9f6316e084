//! The message path in front of a real Postfix 3.7 (tests/common/postfix.rs): a long line,
//! an LF-only message ended by LF "." LF, and BDAT (Postfix offers CHUNKING) arrive in the
//! maildir as sent; a DATA message reaches Postfix as one BDAT chunk.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use common::postfix::{PfListener, Postfix, PostfixConfig};
use common::*;

fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, PostfixConfig::default)
}

/// A token unique in this test process, ending in `z` so none is a prefix of another.
fn token(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{what}-{}-{}z",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// floodgate with XCLIENT in front of Postfix's plain listener, `extra` TOML appended.
fn floodgate(pf: &Postfix, extra: &str) -> Floodgate {
    let cfg = FloodgateConfig::new(pf.addr(PfListener::Plain)).identity("xclient");
    Floodgate::start(&if extra.is_empty() {
        cfg
    } else {
        cfg.extra(extra)
    })
}

fn open(fg: &Floodgate, tok: &str) -> RawClient {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.example");
    assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
    assert_eq!(c.cmd(&format!("RCPT TO:<rcpt-{tok}@dest.test>")).code, 250);
    c
}

/// Whether Postfix's own EHLO reply (straight to it) lists CHUNKING.
fn postfix_offers_chunking(pf: &Postfix) -> bool {
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    let offered = c
        .ehlo("probe.example")
        .keywords()
        .iter()
        .any(|k| k == "CHUNKING");
    assert_eq!(c.cmd("QUIT").code, 221);
    offered
}

#[test]
fn a_long_line_arrives_whole() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("long");
    let mut c = open(&fg, &tok);
    assert_eq!(c.cmd("DATA").code, 354);
    let line: String = (0..5000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    c.send(format!("Subject: {tok}\r\n\r\n{line}\r\nend\r\n.\r\n").as_bytes());
    assert_eq!(c.reply().code, 250);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert_eq!(m.body(), format!("{line}\nend\n").as_bytes());
}

#[test]
fn an_lf_only_message_ended_by_lf_dot_lf_is_delivered() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, "");
    let tok = token("lfonly");
    let mut c = open(&fg, &tok);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: {tok}\n\nfirst\n..dot\n.\n").as_bytes());
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert_eq!(m.body(), b"first\n.dot\n");
}

#[test]
fn bdat_chunks_are_delivered_through_postfix_chunking() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    assert!(postfix_offers_chunking(pf));
    let fg = floodgate(pf, "");
    let tok = token("bdat");
    let mut c = open(&fg, &tok);
    let chunks = [
        format!("Subject: {tok}\r\n\r\nline one\r"),
        "\n.\r\nMAIL FROM:<inside@client.test>\r\n".to_string(),
        "last line\r\n".to_string(),
    ];
    let mut wire = Vec::new();
    for (i, ch) in chunks.iter().enumerate() {
        let last = if i == chunks.len() - 1 { " LAST" } else { "" };
        wire.extend_from_slice(format!("BDAT {}{last}\r\n", ch.len()).as_bytes());
        wire.extend_from_slice(ch.as_bytes());
    }
    c.send(&wire);
    let codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 250]);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert_eq!(
        m.body(),
        b"line one\n.\nMAIL FROM:<inside@client.test>\nlast line\n"
    );
    assert!(
        !pf.log().contains("inside@client.test"),
        "a line of the message reached Postfix as a command"
    );
}

#[test]
fn a_data_message_reaches_postfix_as_one_bdat_and_arrives_whole() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    assert!(postfix_offers_chunking(pf));
    let fg = floodgate(pf, "");
    let tok = token("databdat");
    let mut c = open(&fg, &tok);
    assert_eq!(c.cmd("DATA").code, 354);
    // Lines beginning with '.' come stuffed; the chunk carries them as the message has them.
    c.send(format!("Subject: {tok}\r\n\r\n..\r\n...two\r\nplain\r\n.\r\n").as_bytes());
    let r = c.reply();
    assert_eq!(r.code, 250, "{r:?}");
    assert_eq!(c.cmd("QUIT").code, 221);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert_eq!(m.body(), b".\n..two\nplain\n");
    // Postfix's disconnect line counts the session's commands: the message came as BDAT.
    let text = r.text();
    let qid = text
        .split_whitespace()
        .last()
        .expect("Postfix's queue id in its 250");
    let client_line = pf.wait_log("the message's client line", |l| {
        l.contains(&format!(": {qid}: client="))
    });
    let smtpd = client_line
        .split(": ")
        .next()
        .and_then(|head| head.split_whitespace().last())
        .expect("postfix/smtpd[PID]")
        .to_string();
    // That smtpd's first disconnect line after the message ends this session.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let disconnect = loop {
        let log = pf.log();
        let later = log.split_once(&client_line).map_or("", |(_, rest)| rest);
        if let Some(l) = later
            .lines()
            .find(|l| l.contains(&format!("{smtpd}: disconnect from")))
        {
            break l.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no disconnect line of {smtpd}:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(disconnect.contains(" bdat=1"), "{disconnect}");
    assert!(!disconnect.contains(" data="), "{disconnect}");
}

/// A Postfix that does not offer CHUNKING (`smtpd_discard_ehlo_keywords`).
fn postfix_without_chunking() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || {
        PostfixConfig::default().main_cf("smtpd_discard_ehlo_keywords = chunking, silent-discard")
    })
}

#[test]
fn bdat_relayed_as_data_to_a_postfix_without_chunking_is_delivered_whole() {
    let pf = postfix_without_chunking();
    let _log = pf.log_on_panic();
    assert!(!postfix_offers_chunking(pf));
    let fg = floodgate(pf, "");
    let tok = token("bdatdata");
    let mut c = open(&fg, &tok);
    // "." and ".." lines are text in BDAT: dot-stuffed on the way, they arrive as sent.
    let chunk = format!("Subject: {tok}\r\n\r\n.\r\n..\r\nMAIL FROM:<inside@client.test>\r\nend");
    c.send(format!("BDAT {} LAST\r\n{chunk}", chunk.len()).as_bytes());
    assert_eq!(c.reply().code, 250);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert_eq!(m.body(), b".\n..\nMAIL FROM:<inside@client.test>\nend\n");
    assert!(!pf.log().contains("inside@client.test"));
}
