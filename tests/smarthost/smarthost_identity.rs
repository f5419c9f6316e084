//! floodgate's client identity in front of a real Postfix 3.7 (tests/common/postfix.rs):
//! a Postfix that does not authorise XCLIENT or has no IPv6, and a Postfix port that does
//! not expect a PROXY header, give the client 421 4.3.5 and get no message; the client's
//! verified name reaches Postfix's Received header through XCLIENT NAME, and a HELO client's
//! name through XCLIENT HELO in floodgate's EHLO session; floodgate's own Received line
//! arrives in the delivered message.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use common::postfix::{PfListener, Postfix, PostfixConfig};
use common::*;

const REFUSED_LOG: &str = "upstream did not take the client's identity: refusing the client";

/// The Postfix shared by the tests that need XCLIENT authorised for loopback.
fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, PostfixConfig::default)
}

/// A token unique in this test process.
fn token(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn assert_refused(r: &Reply) {
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (421, Some("4.3.5")),
        "want 421 4.3.5, got {r:?}"
    );
}

/// MAIL, RCPT, DATA and a message with subject `tok`; the codes of the four replies.
fn message(c: &mut RawClient, tok: &str) -> Vec<u16> {
    c.send(b"MAIL FROM:<sender@client.test>\r\nRCPT TO:<rcpt@dest.test>\r\nDATA\r\n");
    let mut codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    if codes[2] == 354 {
        c.send(format!("Subject: {tok}\r\n\r\nhello\r\n.\r\n").as_bytes());
        codes.push(c.reply().code);
    }
    codes
}

/// What Postfix delivered or still holds (nothing, when floodgate refused).
fn nothing_reached(pf: &Postfix, tok: &str) {
    pf.settle();
    assert!(pf.messages_with(tok).is_empty(), "{tok} was delivered");
    assert_eq!(pf.queued(), 0, "Postfix queued something");
}

#[test]
fn postfix_without_xclient_authorisation_gets_no_client() {
    let pf = Postfix::start(&PostfixConfig::default().xclient_hosts(""));
    let _log = pf.log_on_panic();
    let fg =
        Floodgate::start(&FloodgateConfig::new(pf.addr(PfListener::Plain)).identity("xclient"));
    // Postfix lists no XCLIENT for a host it does not authorise: refused at the greeting.
    let mut c = RawClient::connect(fg.addr("plain"));
    assert_refused(&c.reply());
    assert!(c.is_closed());
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    assert!(
        fg.stderr().contains("does not offer XCLIENT"),
        "{}",
        fg.stderr()
    );
    // Even a client that pipelines its message after the greeting gets nothing through.
    let tok = token("unauthorised");
    let mut c = RawClient::connect(fg.addr("plain"));
    c.send(
        format!(
            "EHLO client.example\r\nMAIL FROM:<s@client.test>\r\nRCPT TO:<r@dest.test>\r\n\
             DATA\r\nSubject: {tok}\r\n\r\nx\r\n.\r\n"
        )
        .as_bytes(),
    );
    assert_refused(&c.reply());
    nothing_reached(&pf, &tok);
}

#[test]
fn ipv6_client_in_front_of_an_ipv4_only_postfix_is_refused() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    }
    let pf = Postfix::start(
        &PostfixConfig::default()
            .inet_protocols("ipv4")
            .xclient_hosts("127.0.0.0/8"),
    );
    let _log = pf.log_on_panic();
    let fg = Floodgate::start(
        &FloodgateConfig::new(pf.addr(PfListener::Plain))
            .identity("xclient")
            .listeners(vec![ListenerSpec::new("six", "none").at("[::1]:0")]),
    );
    let tok = token("ipv6");
    let mut c = RawClient::connect_greeted(fg.addr("six"));
    assert_refused(&c.cmd("EHLO client.example"));
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
    // Postfix checks DESTADDR (the [::1] listener) before ADDR: either is refused.
    assert!(
        line.contains("501 5.5.4 Bad") && line.contains("syntax: IPV6:::1"),
        "Postfix's answer missing: {line}"
    );
    assert!(line.contains("client=::1"), "{line}");
    nothing_reached(&pf, &tok);
}

#[test]
fn proxy_header_to_a_postfix_port_without_proxy_protocol_is_refused_not_off_by_one() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg =
        Floodgate::start(&FloodgateConfig::new(pf.addr(PfListener::Plain)).identity("proxy-v2"));
    let mut c = RawClient::connect(fg.addr("plain"));
    assert_refused(&c.reply());
    assert!(c.is_closed());
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
    // Postfix reads the header's first line as a command: 500 5.5.2 Error: bad syntax.
    assert!(
        line.contains("answered the PROXY v2 header as SMTP commands")
            && line.contains("500 5.5.2"),
        "{line}"
    );
}

#[test]
fn postfix_port_expecting_a_proxy_header_never_greets_a_client_with_2xx() {
    let pf = Postfix::start(&PostfixConfig::default().main_cf("smtpd_upstream_proxy_timeout = 1s"));
    let _log = pf.log_on_panic();
    let fg =
        Floodgate::start(&FloodgateConfig::new(pf.addr(PfListener::Proxy)).identity("xclient"));
    let tok = token("noheader");
    let mut c = RawClient::connect(fg.addr("plain"));
    // Postfix gives up waiting for the header: "421 4.3.0 <host> Server local error".
    let r = c.reply();
    assert_eq!(r.code, 421, "{r:?}");
    nothing_reached(&pf, &tok);
}

#[test]
fn postfix_received_names_the_client_through_xclient_name() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    for (resolve, want) in [
        ("true", "from client.example (localhost [127.0.0.1])"),
        ("false", "from client.example (unknown [127.0.0.1])"),
    ] {
        let fg = Floodgate::start(
            &FloodgateConfig::new(pf.addr(PfListener::Plain))
                .identity("xclient")
                .server("resolve_client_names", resolve),
        );
        let tok = token(&format!("name-{resolve}"));
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        assert_eq!(c.ehlo("client.example").code, 250);
        assert_eq!(message(&mut c, &tok), [250, 250, 354, 250]);
        let m = &pf.wait_messages(&tok, 1)[0];
        let received = m.postfix_received();
        assert!(
            received.starts_with(want),
            "resolve_client_names = {resolve}: {received}"
        );
    }
}

#[test]
fn a_helo_client_reaches_postfix_under_its_own_name_in_floodgates_ehlo_session() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg =
        Floodgate::start(&FloodgateConfig::new(pf.addr(PfListener::Plain)).identity("xclient"));
    let tok = token("helo");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let r = c.cmd("HELO old.client.example");
    assert_eq!((r.code, r.lines.len()), (250, 1), "{r:?}");
    // One command at a time, as a HELO client sends them.
    assert_eq!(c.cmd("MAIL FROM:<sender@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<rcpt@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: {tok}\r\n\r\nhello\r\n.\r\n").as_bytes());
    assert_eq!(c.reply().code, 250);
    c.cmd("QUIT");
    let m = &pf.wait_messages(&tok, 1)[0];
    let received = m.postfix_received();
    assert!(
        received.starts_with("from old.client.example (localhost [127.0.0.1])"),
        "XCLIENT HELO names the client: {received}"
    );
    // Postfix names the protocol of its own hop: its EHLO overrides XCLIENT's PROTO=SMTP.
    assert!(received.contains(") with ESMTP id "), "{received}");
}

#[test]
fn floodgate_received_line_arrives_below_postfix_own() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = Floodgate::start(
        &FloodgateConfig::new(pf.addr(PfListener::Plain))
            .identity("xclient")
            .extra("[smtp]\nadd_received = true\n"),
    );
    let tok = token("received");
    let ca = ca_file().to_string_lossy().into_owned();
    let addr = fg.addr("submission").to_string();
    let subject = format!("Subject: {tok}");
    let out = swaks(&[
        "--server",
        &addr,
        "--from",
        "sender@client.test",
        "--to",
        "rcpt@dest.test",
        "--helo",
        "client.example",
        "--header",
        &subject,
        "--tls",
        "--tls-verify",
        "--tls-ca-path",
        &ca,
    ]);
    assert!(out.ok(), "{out}");
    let m = &pf.wait_messages(&tok, 1)[0];
    let all = m.headers("Received");
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[0].contains("by smarthost.test (Postfix)"), "{all:?}");
    let ours = &all[1];
    assert!(
        ours.starts_with("from client.example (localhost [127.0.0.1])"),
        "{ours}"
    );
    assert!(ours.contains("(using TLSv1.3 with cipher TLS_"), "{ours}");
    assert!(
        ours.contains("by floodgate.test (floodgate) with ESMTPS;"),
        "{ours}"
    );
}
