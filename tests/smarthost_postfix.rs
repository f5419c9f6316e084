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

use common::postfix::{PfListener, Postfix, PostfixConfig};
use common::*;

/// The Postfix every test here shares: Dovecot SASL, XCLIENT authorised for loopback.
fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || PostfixConfig::default().sasl())
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

/// floodgate with XCLIENT in front of Postfix listener `l`, `upstream_tls` towards it.
fn floodgate_xclient(pf: &Postfix, l: PfListener, upstream_tls: &str) -> Floodgate {
    let cfg = FloodgateConfig::new(pf.addr(l))
        .identity("xclient")
        .upstream_tls(upstream_tls);
    Floodgate::start(&cfg)
}

/// swaks from `from_addr`'s family to `server` with subject `tok`, plus `extra` arguments.
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
fn xclient_on_the_plain_listener_names_the_real_client() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("note: ::1 is not available here; skipping");
        return;
    }
    let fg = Floodgate::start(
        &FloodgateConfig::new(pf.addr(PfListener::Plain))
            .identity("xclient")
            .listeners(vec![ListenerSpec::new("plain", "none").at("[::1]:0")]),
    );
    let tok = token("xclient-plain");
    let out = send_swaks(fg.addr("plain"), &tok, &[]);
    assert!(out.ok(), "swaks through floodgate failed:\n{out}");
    let m = &pf.wait_messages(&tok, 1)[0];
    let received = m.postfix_received();
    // floodgate reaches Postfix from 127.0.0.1; the client came from ::1.
    assert!(
        received.starts_with("from client.example (") && received.contains("[IPv6:::1]"),
        "Postfix's Received header should name the client, not floodgate: {received}"
    );
}
