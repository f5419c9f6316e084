//! `action = "reroute"` with a real Postfix 3.7 (tests/common/postfix.rs) as the second
//! smart host and the recording upstream as the main one: the message over the limit
//! arrives in Postfix's maildir with the body it was sent with (one trace header added),
//! from the original client named through XCLIENT, and never at the main smart host.

use crate::common;

use std::sync::OnceLock;

use common::postfix::{token, PfListener, Postfix, PostfixConfig};
use common::*;

fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, PostfixConfig::default)
}

fn message(tok: &str, n: usize) -> String {
    format!(
        "Date: Wed, 25 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{tok}-{n}@client.test>\r\n\
         From: <sender@client.test>\r\nTo: <rcpt-{tok}@dest.test>\r\nSubject: {tok} {n}\r\n\r\n\
         first line\r\n..a line starting with a dot\r\n\tindented\r\n"
    )
}

#[test]
fn a_rerouted_message_reaches_postfix_intact_from_the_original_client() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let main = Recorder::start(RecorderOptions::default());
    // One recipient per hour per client address: the second message is rerouted.
    let limits = format!(
        "[upstream.high_risk]\naddress = \"{}\"\nclient_identity = \"xclient\"\n\n\
         [[limit]]\nname = \"per-client\"\ncount = \"recipients\"\nalgorithm = \"bucket\"\n\
         rate = \"1 / 1h\"\nburst = \"1\"\naction = \"reroute\"\n",
        pf.addr(PfListener::Plain)
    );
    let fg = Floodgate::start(
        &FloodgateConfig::new(main.addr())
            .identity("xclient")
            .extra(&limits),
    );
    let tok = token("reroute");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.example").code, 250);
    let mut codes = Vec::new();
    for n in 0..2 {
        assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<rcpt-{tok}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(message(&tok, n).as_bytes());
        c.send(b".\r\n");
        let r = c.reply();
        codes.push((r.code, r.text()));
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    assert!(codes.iter().all(|(c, _)| *c == 250), "{codes:?}");
    // Postfix's own queue id reached the client.
    assert!(codes[1].1.contains("queued as"), "{codes:?}");
    main.wait_events("message", 1);
    let msgs = pf.wait_messages(&tok, 1);
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 1, "only the rerouted one");
    assert_eq!(main.messages().len(), 1, "the main host got only the first");
    let text = msgs[0].text();
    assert!(text.contains(&format!("Subject: {tok} 1")), "{text}");
    let at = text
        .find("X-Floodgate-Rerouted: ")
        .unwrap_or_else(|| panic!("no trace header: {text}"));
    let after = &text[at..];
    let trace_end = after.find('\n').unwrap() + 1;
    assert!(
        after[..trace_end].contains("limit=\"per-client\""),
        "{after}"
    );
    let sent = message(&tok, 1)
        .replace("\r\n", "\n")
        .replace("\n..", "\n.");
    assert_eq!(
        &after[trace_end..],
        sent,
        "identical body after the trace header"
    );
    // The original client through XCLIENT: its HELO and address, not floodgate's.
    let received = msgs[0].postfix_received();
    assert!(
        received.starts_with("from client.example (") && received.contains("[127.0.0.1]"),
        "{received}"
    );
}
