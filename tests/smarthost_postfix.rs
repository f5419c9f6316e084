//! floodgate in front of a real Postfix 3.7 with Dovecot SASL (tests/common/postfix.rs):
//! XCLIENT on every listener, PROXY v2, AUTH, upstream TLS checks, ESMTP extensions, many
//! recipients, a large message, a per-user limit, and the smuggling payloads.
//!
//! One Postfix (with Dovecot) serves every test of this file; each test starts its own
//! floodgate and tells its messages apart by a unique token in the subject.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use base64::Engine;

use common::postfix::{PfListener, Postfix, PostfixConfig};
use common::*;

/// The Postfix every test here shares: Dovecot SASL, XCLIENT authorised for loopback.
fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    // Bare LF taken for a line end (Postfix 3.7.11's default, written out): the
    // smuggling comparison needs it.
    Postfix::shared(&PF, || {
        PostfixConfig::default().sasl().forbid_bare_newline("no")
    })
}

/// A token unique in this test process (tests run in parallel against one Postfix).
fn token(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// floodgate with XCLIENT in front of Postfix listener `l`, `upstream_tls` towards it,
/// AUTH allowed on its plain listener, `extra` TOML appended.
fn floodgate(pf: &Postfix, l: PfListener, upstream_tls: &str, extra: &str) -> Floodgate {
    let mut cfg = FloodgateConfig::new(pf.addr(l))
        .identity("xclient")
        .upstream_tls(upstream_tls)
        .auth_without_tls(true);
    if !extra.is_empty() {
        cfg = cfg.extra(extra);
    }
    Floodgate::start(&cfg)
}

/// swaks to `server` with subject `tok` and HELO `client.example`, plus `extra` arguments.
fn send_swaks(server: SocketAddr, tok: &str, extra: &[&str]) -> Output {
    let server = server.to_string();
    let subject = format!("Subject: {tok}");
    let mut args = vec![
        "--server",
        &server,
        "--from",
        "sender@client.test",
        "--to",
        "rcpt@dest.test",
        "--helo",
        "client.example",
        "--header",
        &subject,
    ];
    args.extend_from_slice(extra);
    swaks(&args)
}

fn ipv6_available() -> bool {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("note: ::1 is not available here; skipping (the client must differ from floodgate's 127.0.0.1)");
        return false;
    }
    true
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// Sends a small message with subject `tok` on an open session (after EHLO/AUTH) and
/// returns the replies to MAIL, RCPT, DATA and the end of data.
fn message(c: &mut RawClient, tok: &str) -> Vec<u16> {
    c.send(
        format!("MAIL FROM:<sender@client.test>\r\nRCPT TO:<rcpt-{tok}@dest.test>\r\nDATA\r\n")
            .as_bytes(),
    );
    let mut codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    if codes[2] == 354 {
        c.send(format!("Subject: {tok}\r\n\r\nhello from {tok}\r\n.\r\n").as_bytes());
        codes.push(c.reply().code);
    }
    codes
}

// ---------------------------------------------------------------------------------------
// The harness itself
// ---------------------------------------------------------------------------------------

#[test]
fn straight_to_postfix_a_message_is_delivered_to_the_maildir() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let tok = token("direct");
    let out = send_swaks(pf.addr(PfListener::Plain), &tok, &[]);
    assert!(out.ok(), "swaks straight to Postfix failed:\n{out}");
    let msgs = pf.wait_messages(&tok, 1);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let m = &msgs[0];
    assert_eq!(m.header("Delivered-To").as_deref(), Some("rcpt@dest.test"));
    let received = m.postfix_received();
    assert!(
        received.contains("by smarthost.test (Postfix)") && received.contains("[127.0.0.1]"),
        "{received}"
    );
}

// ---------------------------------------------------------------------------------------
// The client's identity: XCLIENT and PROXY v2
// ---------------------------------------------------------------------------------------

#[test]
fn xclient_names_the_real_client_on_plain_starttls_and_implicit_listeners() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    if !ipv6_available() {
        return;
    }
    // The client comes from ::1, floodgate reaches Postfix from 127.0.0.1: Postfix's
    // Received header shows which one it took for the client.
    let fg = Floodgate::start(
        &FloodgateConfig::new(pf.addr(PfListener::Plain))
            .identity("xclient")
            .listeners(vec![
                ListenerSpec::new("plain", "none").at("[::1]:0"),
                ListenerSpec::new("submission", "starttls").at("[::1]:0"),
                ListenerSpec::new("submissions", "implicit").at("[::1]:0"),
            ]),
    );
    let ca = ca_file().to_string_lossy().into_owned();
    let tls: &[&str] = &["--tls", "--tls-verify", "--tls-ca-path", &ca];
    let tls_on_connect: &[&str] = &["--tls-on-connect", "--tls-verify", "--tls-ca-path", &ca];
    let cases: [(&str, &[&str]); 3] = [
        ("plain", &[]),
        ("submission", tls),
        ("submissions", tls_on_connect),
    ];
    for (listener, args) in cases {
        let tok = token(&format!("xclient-{listener}"));
        let out = send_swaks(fg.addr(listener), &tok, args);
        assert!(
            out.ok(),
            "{listener}: swaks through floodgate failed:\n{out}"
        );
        let m = &pf.wait_messages(&tok, 1)[0];
        let received = m.postfix_received();
        assert!(
            received.starts_with("from client.example (") && received.contains("[IPv6:::1]"),
            "{listener}: Postfix's Received header should name the client (HELO \
             client.example, address ::1), not floodgate: {received}"
        );
        assert!(!received.contains("[127.0.0.1]"), "{listener}: {received}");
    }
}

#[test]
fn proxy_v2_names_the_real_client() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    if !ipv6_available() {
        return;
    }
    let fg = Floodgate::start(
        &FloodgateConfig::new(pf.addr(PfListener::Proxy))
            .identity("proxy-v2")
            .listeners(vec![ListenerSpec::new("plain", "none").at("[::1]:0")]),
    );
    let tok = token("proxy-v2");
    let out = send_swaks(fg.addr("plain"), &tok, &[]);
    assert!(
        out.ok(),
        "swaks through floodgate (PROXY v2) failed:\n{out}"
    );
    let m = &pf.wait_messages(&tok, 1)[0];
    let received = m.postfix_received();
    assert!(
        received.contains("[IPv6:::1]") && !received.contains("[127.0.0.1]"),
        "Postfix should take the PROXY header's source for the client: {received}"
    );
}

// ---------------------------------------------------------------------------------------
// AUTH through floodgate to Postfix + Dovecot
// ---------------------------------------------------------------------------------------

/// Straight to Postfix, the empty continuation is `334 ` with its space: what floodgate
/// must pass on.
#[test]
fn postfix_itself_answers_auth_plain_without_initial_response_with_334_space() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    let ehlo = c.ehlo("client.example");
    assert!(ehlo.keywords().contains(&"AUTH".to_string()), "{ehlo:?}");
    let r = c.cmd("AUTH PLAIN");
    assert_eq!(r.raw, b"334 \r\n", "{r:?}");
    assert_eq!(c.cmd("*").code, 501);
}

/// One client line of an AUTH exchange, the exact reply expected (if checked) and its code.
type AuthStep = (String, Option<&'static [u8]>, u16);

#[test]
fn auth_plain_and_login_with_and_without_initial_response_reach_dovecot() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, PfListener::Plain, "none", "");
    let plain = b64(&format!("\0{USER}\0{PASSWORD}"));
    let cases: Vec<(&str, Vec<AuthStep>)> = vec![
        ("plain-ir", vec![(format!("AUTH PLAIN {plain}"), None, 235)]),
        (
            // s-nail's way: AUTH PLAIN, then wait for "334 " (space included).
            "plain-no-ir",
            vec![
                ("AUTH PLAIN".into(), Some(b"334 \r\n"), 334),
                (plain.clone(), None, 235),
            ],
        ),
        (
            "login-ir",
            vec![
                (
                    format!("AUTH LOGIN {}", b64(USER)),
                    Some(b"334 UGFzc3dvcmQ6\r\n"),
                    334,
                ),
                (b64(PASSWORD), None, 235),
            ],
        ),
        (
            "login-no-ir",
            vec![
                ("AUTH LOGIN".into(), Some(b"334 VXNlcm5hbWU6\r\n"), 334),
                (b64(USER), Some(b"334 UGFzc3dvcmQ6\r\n"), 334),
                (b64(PASSWORD), None, 235),
            ],
        ),
    ];
    for (name, steps) in cases {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        let ehlo = c.ehlo("client.example");
        assert!(
            ehlo.lines
                .iter()
                .any(|l| l.to_ascii_uppercase().starts_with("AUTH ")
                    && l.to_ascii_uppercase().contains("PLAIN")
                    && l.to_ascii_uppercase().contains("LOGIN")),
            "{name}: floodgate should offer Postfix's AUTH PLAIN LOGIN: {ehlo:?}"
        );
        for (line, exact, code) in steps {
            let r = c.cmd(&line);
            assert_eq!(r.code, code, "{name}: {line:?} -> {r:?}");
            if let Some(want) = exact {
                assert_eq!(r.raw, want, "{name}: {line:?} -> {r:?}");
            }
        }
        let tok = token(&format!("auth-{name}"));
        assert_eq!(message(&mut c, &tok), [250, 250, 354, 250], "{name}");
        assert_eq!(c.cmd("QUIT").code, 221);
        let m = &pf.wait_messages(&tok, 1)[0];
        let received = m.postfix_received();
        assert!(
            received.contains(&format!("(Authenticated sender: {USER})")),
            "{name}: Postfix should have authenticated the user itself: {received}"
        );
    }
    // A wrong password: Dovecot says no, the client hears Postfix's 535.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.example");
    let r = c.cmd(&format!("AUTH PLAIN {}", b64(&format!("\0{USER}\0wrong"))));
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (535, Some("5.7.8")),
        "{r:?}"
    );
    let tok = token("auth-refused");
    // Not authenticated and not in mynetworks: Postfix still takes mail for its own
    // domains, but the message carries no authenticated sender.
    assert_eq!(message(&mut c, &tok), [250, 250, 354, 250]);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert!(
        !m.postfix_received().contains("Authenticated sender"),
        "{m:?}"
    );
}

#[test]
fn python_smtplib_starttls_and_login_through_floodgate() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, PfListener::Plain, "none", "");
    let tok = token("smtplib");
    let out = smtplib(
        fg.addr("submission"),
        &format!(
            r#"
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.ehlo("client.example")
out("auth", s.esmtp_features.get("auth", ""))
# PLAIN without an initial response, as s-nail sends it.
code, resp = s.docmd("AUTH", "PLAIN")
out("continuation", "%d %r" % (code, resp))
code, resp = s.docmd(base64.b64encode(("\0%s\0%s" % (USER, PASSWORD)).encode()).decode())
out("plain", code)
s.sendmail("sender@client.test", ["rcpt@dest.test"], b"Subject: {tok}\r\n\r\nvia smtplib\r\n")
s.quit()
"#
        ),
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    assert_eq!(
        out.field("continuation").as_deref(),
        Some("334 b''"),
        "{out}"
    );
    assert_eq!(out.field("plain").as_deref(), Some("235"), "{out}");
    let m = &pf.wait_messages(&tok, 1)[0];
    assert!(
        m.postfix_received()
            .contains(&format!("(Authenticated sender: {USER})")),
        "{m:?}"
    );
}

// ---------------------------------------------------------------------------------------
// TLS towards Postfix
// ---------------------------------------------------------------------------------------

#[test]
fn upstream_starttls_and_implicit_tls_with_a_verified_certificate_relay() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    for (l, mode) in [
        (PfListener::StartTls, "starttls"),
        (PfListener::Implicit, "implicit"),
    ] {
        let fg = floodgate(pf, l, mode, "");
        let tok = token(&format!("upstream-{mode}"));
        let out = send_swaks(fg.addr("plain"), &tok, &[]);
        assert!(out.ok(), "{mode}: {out}");
        let received = pf.wait_messages(&tok, 1)[0].postfix_received();
        // smtpd_tls_received_header: Postfix notes the TLS session it had with floodgate.
        assert!(
            received.contains("(using TLSv1."),
            "{mode}: the hop to Postfix should be encrypted: {received}"
        );
    }
}

#[test]
fn upstream_certificate_with_a_wrong_name_or_an_unknown_ca_gives_421_4_4_1() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    for l in [PfListener::WrongName, PfListener::Untrusted] {
        let fg = floodgate(pf, l, "starttls", "");
        let mut c = RawClient::connect(fg.addr("plain"));
        let mut r = c.reply();
        if r.code == 220 {
            r = c.cmd("EHLO client.example");
        }
        assert_eq!(
            (r.code, r.enhanced().as_deref()),
            (421, Some("4.4.1")),
            "{l:?}: {r:?}\n{}",
            fg.stderr()
        );
        let rest = c.replies_until_close();
        assert!(rest.is_empty(), "{l:?}: replies after 421: {rest:?}");
        // Postfix saw the handshake fail: floodgate refused its certificate.
        let name = l.name();
        let log = pf.log();
        assert!(
            log.lines()
                .any(|x| x.contains(&format!("postfix/{name}/smtpd"))
                    && x.contains("SSL_accept error")),
            "{l:?}: Postfix should log the failed handshake:\n{log}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// ESMTP extensions, many recipients, a large message
// ---------------------------------------------------------------------------------------

#[test]
fn size_is_advertised_and_a_declared_size_over_postfix_limit_is_refused() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, PfListener::Plain, "none", "");
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
fn dsn_parameters_reach_postfix_which_reports_the_delivery() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, PfListener::Plain, "none", "");
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
    let fg = floodgate(pf, PfListener::Plain, "none", "");
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
    let fg = floodgate(pf, PfListener::Plain, "none", "");
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
    let fg = floodgate(pf, PfListener::Plain, "none", "");
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
    let fg = floodgate(pf, PfListener::Plain, "none", "");
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
        PfListener::Plain,
        "none",
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
        let m = message(&mut c, &format!("{tok}-{i}"));
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
    let log = pf.log();
    let seen_by_postfix = log
        .lines()
        .filter(|l| l.contains("postfix/plain/smtpd") && l.contains("sasl_username=alice"))
        .count();
    assert!(seen_by_postfix >= 3, "{log}");
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
        let fg = floodgate(
            pf,
            PfListener::Plain,
            "none",
            &format!("[smtp]\nbare_line_endings = \"{mode}\""),
        );
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
