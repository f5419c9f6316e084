//! Fuzz target: text a remote server or a client controls, put where Postfix and Exim log
//! it, read by the real parsers and charged by the real index.
//!
//! The input picks, for each line, a place for the text (the reply after a delivery line's
//! status word, a `said:` line, a `lost connection` line, Exim's text after `:` and in
//! `C="…"`, the recipient address itself, a forged program name) and the text; the lines go
//! through `Format::line` and `Index::note` as the followed log's do. Two messages are
//! queued: alice's, accepted for her own recipients and (as the first byte says) one at the
//! attacker's domain, and bob's. Checks that only delivery lines are results, each of its own
//! recipient whatever the remote text; that nothing is charged but the attacker's address of
//! alice's message, and only when the message was accepted for it; that no recipient is
//! charged twice for one kind; and that bob is never charged.
#![no_main]

use std::collections::HashSet;

use floodgate::outcomes::index::{Index, Noted, Queued};
use floodgate::outcomes::logline::{Format, Kind, Line};
use libfuzzer_sys::fuzz_target;

const ALICE_PF: &str = "4AbCd1";
const BOB_PF: &str = "9BobQ2";
const ALICE_EXIM: &str = "1rOBxk-0003Ab-2Q";
const BOB_EXIM: &str = "1rOBxk-0003Bb-3Q";
const ATTACKER: &str = "x@evil.example";
const PF: &str = "Nov 25 19:30:01 relay postfix/smtp[2211]: ";
const EX: &str = "2026-11-25 19:30:01";

fn alice(rcpt: &str) -> Queued {
    Queued {
        keys: vec![("bounce-ratio".into(), "alice".into())],
        recipients: vec![
            "r0@example.org".into(),
            "r1@example.org".into(),
            "R2@Example.org".into(),
            rcpt.into(),
        ],
    }
}

/// Control characters become `?`, as Postfix and Exim log a remote reply: a line end never
/// comes from the remote side.
fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// One line with `text` at place `place`, and its format; whether it is a delivery line of
/// the attacker's recipient of alice's message (the others are no delivery results at all).
fn line(place: u8, text: &str, status: &str, flag: &str) -> (Format, String, bool) {
    let (format, line) = match place % 9 {
        0 => (Format::Postfix, format!("{PF}{ALICE_PF}: to=<{ATTACKER}>, relay=mx1.evil.example[192.0.2.1]:25, delay=1, delays=0/0/0/1, dsn=4.0.0, status={status} (host mx1.evil.example[192.0.2.1] said: {text})")),
        1 => (Format::Postfix, format!("{PF}{ALICE_PF}: host mx1.evil.example[192.0.2.1] said: {text}")),
        2 => (Format::Postfix, format!("{PF}{BOB_PF}: lost connection with mx1.evil.example[192.0.2.1] while sending RCPT TO: {text}")),
        3 => (Format::Postfix, format!("{PF}{ALICE_PF}: to=<{ATTACKER}>, orig_to=<{ATTACKER}>, relay=none, delay=1, dsn=5.0.0, status={status} ({text})")),
        4 => (Format::Postfix, format!("Nov 25 19:30:01 relay postfixx/smtp[1]: {text}")),
        5 => (Format::Exim, format!("{EX} {ALICE_EXIM} {flag} {ATTACKER} R=dnslookup T=remote_smtp H=mx1.evil.example [192.0.2.1]: SMTP error from remote mail server after RCPT TO:<{ATTACKER}>: {text}")),
        6 => (Format::Exim, format!("{EX} {ALICE_EXIM} {flag} {ATTACKER} R=dnslookup T=remote_smtp H=mx1.evil.example [192.0.2.1] C=\"{text}\"")),
        7 => (Format::Exim, format!("{EX} {BOB_EXIM} H=mx1.evil.example [192.0.2.1]: {text}")),
        _ => (Format::Exim, format!("{EX} {ALICE_EXIM} {flag} {ATTACKER}: {text}")),
    };
    (format, line, !matches!(place % 9, 1 | 2 | 4 | 7))
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, data)) = data.split_first() else {
        return;
    };
    // Whether alice's message was accepted for the attacker's address at all.
    let accepted = first & 1 == 0;
    let rcpt = if accepted { ATTACKER } else { "y@evil.example" };
    let index = Index::new(8);
    index.insert(ALICE_PF, alice(rcpt));
    index.insert(ALICE_EXIM, alice(rcpt));
    let bob = Queued {
        keys: vec![("bounce-ratio".into(), "bob".into())],
        recipients: vec!["b@example.net".into()],
    };
    index.insert(BOB_PF, bob.clone());
    index.insert(BOB_EXIM, bob);
    let mut charged: HashSet<(String, &'static str)> = HashSet::new();
    // Records: [place, status, length, text...].
    let mut rest = data;
    while rest.len() >= 3 {
        let (place, status, len) = (rest[0], rest[1], rest[2] as usize);
        let len = len.min(rest.len() - 3);
        let text = printable(&rest[3..3 + len]);
        rest = &rest[3 + len..];
        let (word, flag) = [
            ("sent", "=>"),
            ("bounced", "**"),
            ("deferred", "=="),
            ("SOFTBOUNCE", "->"),
        ][status as usize % 4];
        let (format, text, delivery) = line(place, &text, word, flag);
        let Line::Outcome(o) = format.line(&text) else {
            continue;
        };
        // A said: line, a lost connection, another program, a line of bob's: no result.
        assert!(delivery, "{text}");
        // A delivery line is about its own recipient, whatever the remote text.
        assert_eq!(o.recipient, ATTACKER, "{text}");
        assert!(o.original.is_none_or(|a| a == ATTACKER), "{text}");
        let noted = index.note(o.queue_id, o.recipient, o.original, o.kind);
        if let Noted::Charge(keys) = &noted {
            // Only alice's message, only its attacker's recipient when accepted, once per
            // kind.
            assert!(accepted, "{text}");
            assert!(
                o.queue_id == ALICE_PF || o.queue_id == ALICE_EXIM,
                "{text}"
            );
            assert_eq!(keys, &[("bounce-ratio".to_string(), "alice".to_string())]);
            assert!(o.kind != Kind::Sent);
            assert!(
                charged.insert((o.queue_id.to_string(), o.kind.as_str())),
                "charged twice: {text}"
            );
        }
    }
});
