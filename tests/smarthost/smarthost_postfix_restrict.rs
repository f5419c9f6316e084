//! floodgate in front of a real Postfix 3.7 with Dovecot SASL (tests/common/postfix.rs): a
//! user restricted by a limit with `action = "restrict"` gets the restricted answer, and
//! Postfix receives nothing from them once restricted.

use crate::common;

use std::sync::OnceLock;

use common::postfix::{b64, send_small_message, token, PfListener, Postfix, PostfixConfig};
use common::*;

fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || PostfixConfig::default().sasl())
}

#[test]
fn postfix_receives_nothing_from_a_restricted_user() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let cfg = pf.floodgate_config(PfListener::Plain).extra(
        r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${authenticated_id}"
rate = "5 / 1h"
burst = "5"
action = "restrict"
restrict_for = "until_released"
"#,
    );
    let fg = Floodgate::start(&cfg);
    let tok = token("restricted");
    let mut codes = Vec::new();
    for i in 0..8 {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        c.ehlo("client.example");
        let r = c.cmd(&format!(
            "AUTH PLAIN {}",
            b64(&format!("\0{USER}\0{PASSWORD}"))
        ));
        assert_eq!(r.code, 235, "{r:?}");
        codes.push(send_small_message(&mut c, &format!("{tok}-{i}")));
        assert_eq!(c.cmd("QUIT").code, 221);
    }
    for c in &codes[..5] {
        assert_eq!(c, &[250, 250, 354, 250], "{codes:?}");
    }
    // From the sixth on: MAIL FROM gets 450 (RCPT and DATA then fail as without a MAIL).
    for c in &codes[5..] {
        assert_eq!(c[0], 450, "{codes:?}");
        assert!(!c.contains(&354), "{codes:?}");
    }
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 5);
    for i in 5..8 {
        assert!(pf.messages_with(&format!("{tok}-{i}")).is_empty());
    }
}

/// notify_user: Postfix receives one notice per restriction, from the null sender, for the
/// address the template gives; over XCLIENT (floodgate's own session, no XCLIENT) and over
/// a listener that expects a PROXY v2 header (floodgate's own connection named in it).
#[test]
fn postfix_receives_one_notice_per_restriction_from_the_null_sender() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    for (listener, name) in [(PfListener::Plain, "plain"), (PfListener::Proxy, "proxy")] {
        let tok = token(&format!("notice-{name}"));
        let cfg = pf.floodgate_config(listener).extra(&format!(
            r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "5 / 1h"
burst = "5"
action = "restrict"
restricted_message = "4.7.1 restricted: call the help desk, ref {tok}"
notify_user = "${{authenticated_id}}@notice-{name}.test"
"#
        ));
        let fg = Floodgate::start(&cfg);
        for i in 0..8 {
            let mut c = RawClient::connect_greeted(fg.addr("plain"));
            c.ehlo("client.example");
            let r = c.cmd(&format!(
                "AUTH PLAIN {}",
                b64(&format!("\0{USER}\0{PASSWORD}"))
            ));
            assert_eq!(r.code, 235, "{r:?}");
            send_small_message(&mut c, &format!("msg-{tok}-{i}"));
            assert_eq!(c.cmd("QUIT").code, 221);
        }
        // The notice quotes the restricted answer, which carries the token.
        let got = pf.wait_messages(&format!("ref {tok}"), 1);
        pf.settle();
        let notices = pf.messages_with(&format!("ref {tok}"));
        assert_eq!(notices.len(), 1, "{name}: {got:?}");
        let text = String::from_utf8_lossy(&notices[0].raw).into_owned();
        for want in [
            "Return-Path: <>\n".to_string(),
            format!("Delivered-To: {USER}@notice-{name}.test\n"),
            "Auto-Submitted: auto-generated\n".to_string(),
            format!("Subject: Your account {USER} is restricted from sending mail\n"),
        ] {
            assert!(text.contains(&want), "{name}: {want:?} not in\n{text}");
        }
        assert_eq!(pf.messages_with(&format!("msg-{tok}")).len(), 5, "{name}");
    }
}
