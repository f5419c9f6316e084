//! floodgate when the upstream misbehaves: unreachable, dying in DATA, resetting after
//! DATA, refusing service, answering garbage. The client must get a 4xx (never a 250 for
//! a message upstream did not accept), must not hang, and upstream must hold no message.

use crate::common;

use common::*;

/// Reads replies until one that is not 220 (the greeting floodgate may send before it
/// knows upstream is gone); if a 220 greeting came, sends EHLO first.
fn first_non_greeting(c: &mut RawClient) -> Reply {
    let r = c.reply();
    if r.code != 220 {
        return r;
    }
    c.send(b"EHLO raw.client.test\r\n");
    c.reply()
}

#[test]
fn upstream_unreachable_gets_421_with_an_enhanced_code() {
    let fg = Floodgate::start(&FloodgateConfig::new(closed_port()));
    for name in ["plain", "submission"] {
        let mut c = RawClient::connect(fg.addr(name));
        let r = first_non_greeting(&mut c);
        assert_eq!(r.code, 421, "{name}: {}", r.text());
        let e = r.enhanced();
        assert!(
            matches!(e.as_deref(), Some("4.4.1") | Some("4.3.2")),
            "{name}: want 421 4.4.1 or 4.3.2, got {}",
            r.text()
        );
        // A 421 from floodgate is followed by closing the connection.
        let rest = c.replies_until_close();
        assert!(rest.is_empty(), "{name}: replies after 421: {rest:?}");
    }
}

/// Sends one message of `size` body octets over a fresh session and returns the reply
/// to the end of data (or the first 4xx/5xx before it).
fn send_message(fg: &Floodgate, size: usize) -> Reply {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    c.send(b"MAIL FROM:<a@client.test>\r\nRCPT TO:<b@dest.test>\r\nDATA\r\n");
    for _ in 0..3 {
        let r = c.reply();
        if r.class() >= 4 {
            return r;
        }
        if r.code == 354 {
            break;
        }
    }
    let line = b"0123456789012345678901234567890123456789012345678901234567890123456789012\r\n";
    let mut body = b"Subject: dying\r\n\r\n".to_vec();
    while body.len() < size {
        body.extend_from_slice(line);
    }
    body.extend_from_slice(b".\r\n");
    c.send(&body);
    c.reply()
}

#[test]
fn upstream_dying_mid_data_gives_the_client_a_4xx() {
    let rec = Recorder::start(RecorderOptions {
        fault: "die-mid-data".into(),
        fault_after: 1000,
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    // 8 KB: small enough to sit in socket buffers, so the client always reads the reply.
    let r = send_message(&fg, 8 * 1024);
    assert_eq!(
        r.class(),
        4,
        "want a 4xx after upstream died, got {}",
        r.text()
    );
    rec.wait_idle();
    assert!(rec.messages().is_empty());
}

#[test]
fn upstream_resetting_after_data_command_gives_a_4xx() {
    let rec = Recorder::start(RecorderOptions {
        fault: "reset-after-data-cmd".into(),
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let r = send_message(&fg, 1024);
    assert_eq!(r.class(), 4, "want a 4xx, got {}", r.text());
    rec.wait_idle();
    assert!(rec.messages().is_empty());
}

#[test]
fn upstream_refusing_service_or_talking_garbage_never_yields_a_250_for_mail() {
    for fault in ["refuse", "garbage"] {
        let rec = Recorder::start(RecorderOptions {
            fault: fault.into(),
            ..RecorderOptions::default()
        });
        let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
        let mut c = RawClient::connect(fg.addr("plain"));
        let first = first_non_greeting(&mut c);
        assert!(
            first.class() >= 4,
            "{fault}: upstream unusable but client got {}",
            first.text()
        );
        // Whatever floodgate does next (close, or 503/421 to everything), MAIL is never
        // accepted and nothing reaches upstream.
        if c.try_send(b"MAIL FROM:<a@client.test>\r\n").is_err() {
            assert!(rec.messages().is_empty());
            continue; // floodgate closed the connection: fine
        }
        match c.try_reply() {
            Ok(r) => assert!(r.class() >= 4, "{fault}: MAIL got {}", r.text()),
            Err(e) => assert!(
                !e.starts_with("no complete reply"),
                "{fault}: floodgate hung: {e}"
            ),
        }
        assert!(rec.messages().is_empty());
    }
}

#[test]
fn slow_upstream_still_relays() {
    let rec = Recorder::start(RecorderOptions {
        fault: "slow".into(),
        delay: 0.05,
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let r = send_message(&fg, 2048);
    assert_eq!(r.code, 250, "{}", r.text());
    assert_eq!(rec.messages().len(), 1);
}
