//! floodgate in front of a real Postfix 3.7 with Dovecot SASL (tests/common/postfix.rs):
//! the client's identity (XCLIENT on every listener, PROXY v2), AUTH, and TLS towards
//! Postfix. The mail itself (ESMTP extensions, size, limits, smuggling) is in
//! tests/smarthost_postfix_mail.rs.
//!
//! One Postfix (with Dovecot) serves every test of this file; each test starts its own
//! floodgate and tells its messages apart by a unique token in the subject.

use crate::common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use common::postfix::{b64, send_small_message, token, PfListener, Postfix, PostfixConfig};
use common::*;

/// The Postfix every test here shares: Dovecot SASL, XCLIENT authorised for loopback.
fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || PostfixConfig::default().sasl())
}

/// floodgate in front of Postfix listener `l` (see [`Postfix::floodgate_config`]).
fn floodgate(pf: &Postfix, l: PfListener) -> Floodgate {
    Floodgate::start(&pf.floodgate_config(l))
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

#[test]
fn delivered_headers_are_unfolded_and_matched_without_case() {
    let m = common::postfix::Delivered {
        path: "x".into(),
        raw: b"Return-Path: <a@b>\nReceived: from x (unknown [IPv6:::1])\n\tby smarthost.test \
               (Postfix)\nreceived: second\nSubject: s\n\nReceived: in the body\n"
            .to_vec(),
    };
    assert_eq!(
        m.headers("RECEIVED"),
        [
            "from x (unknown [IPv6:::1]) by smarthost.test (Postfix)",
            "second"
        ]
    );
    assert_eq!(m.header("subject").as_deref(), Some("s"));
    assert_eq!(m.header("X-Missing"), None);
    assert_eq!(m.body(), b"Received: in the body\n");
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
    let fg = floodgate(pf, PfListener::Plain);
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
        assert_eq!(
            send_small_message(&mut c, &tok),
            [250, 250, 354, 250],
            "{name}"
        );
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
    assert_eq!(send_small_message(&mut c, &tok), [250, 250, 354, 250]);
    let m = &pf.wait_messages(&tok, 1)[0];
    assert!(
        !m.postfix_received().contains("Authenticated sender"),
        "{m:?}"
    );
}

#[test]
fn python_smtplib_starttls_auth_plain_and_cram_md5_through_floodgate() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let fg = floodgate(pf, PfListener::Plain);
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
# CRAM-MD5: Dovecot checks the digest of the challenge Postfix relayed through floodgate.
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.ehlo("client.example")
s.user, s.password = USER, PASSWORD
code, resp = s.auth("CRAM-MD5", s.auth_cram_md5)
out("cram", code)
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
    assert_eq!(out.field("cram").as_deref(), Some("235"), "{out}");
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
        let fg = floodgate(pf, l);
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
        let fg = floodgate(pf, l);
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
        let service = format!("postfix/{}/smtpd", l.name());
        pf.wait_log(&format!("of {service} about the failed handshake"), |x| {
            x.contains(&service) && x.contains("SSL_accept error")
        });
    }
}

#[test]
fn postfix_takes_xclient_right_after_its_greeting() {
    // floodgate's later connections send XCLIENT before any EHLO of their own, on what the
    // first connection's EHLO offered: Postfix must take it there, and want EHLO after.
    let pf = postfix();
    let _log = pf.log_on_panic();
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    let r = c.cmd("XCLIENT ADDR=192.0.2.7 NAME=[UNAVAILABLE]");
    assert_eq!(r.code, 220, "{r:?}");
    assert_eq!(c.cmd("EHLO client.example").code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
}
