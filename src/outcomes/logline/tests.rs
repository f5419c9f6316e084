use super::*;
use proptest::prelude::*;

fn out<'a>(id: &'a str, to: &'a str, orig: Option<&'a str>, kind: Kind) -> Line<'a> {
    Line::Outcome(Outcome {
        queue_id: id,
        recipient: to,
        original: orig,
        kind,
    })
}

const PREFIX: &str = "Nov 25 19:30:01 relay postfix/smtp[2211]: ";

#[test]
fn postfix_lines() {
    let sent = "Nov 25 19:30:01 relay postfix/smtp[2211]: 4XyzQ1bCDf: to=<bob@example.org>, relay=mx.example.org[192.0.2.7]:25, delay=0.4, delays=0.1/0/0.2/0.1, dsn=2.0.0, status=sent (250 2.0.0 OK 1732563001 x)";
    assert_eq!(
        postfix(sent),
        out("4XyzQ1bCDf", "bob@example.org", None, Kind::Sent)
    );
    let bounced = "2026-11-25T19:30:01.123456+00:00 relay postfix/smtp[2211]: 3F1A2B3C4D: to=<nobody@example.org>, orig_to=<old@example.org>, relay=mx.example.org[192.0.2.7]:25, delay=0.5, delays=0.1/0/0.2/0.2, dsn=5.1.1, status=bounced (host mx.example.org[192.0.2.7] said: 550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown (in reply to RCPT TO command))";
    assert_eq!(
        postfix(bounced),
        out(
            "3F1A2B3C4D",
            "nobody@example.org",
            Some("old@example.org"),
            Kind::Bounced
        )
    );
    let deferred = "Nov 25 19:30:01 relay postfix/smtp[2211]: 3F1A2B3C4D: to=<later@example.net>, relay=none, delay=30, delays=0.1/0/30/0, dsn=4.4.1, status=deferred (connect to mx.example.net[192.0.2.9]:25: Connection refused)";
    assert_eq!(
        postfix(deferred),
        out("3F1A2B3C4D", "later@example.net", None, Kind::Deferred)
    );
    // A local delivery and a multi-instance name.
    let local = "Nov 25 19:30:01 relay postfix-out/local[12]: ABC123: to=<root@relay.example>, orig_to=<root>, relay=local, delay=0, dsn=2.0.0, status=sent (delivered to mailbox)";
    assert_eq!(
        postfix(local),
        out("ABC123", "root@relay.example", Some("root"), Kind::Sent)
    );
    // Postfix's own maillog_file (microseconds), a space-padded day, a syslog_name with a
    // service part, the other delivery agents, conn_use=, soft_bounce.
    for (line, kind) in [
        ("Nov  5 19:30:01.471238 relay postfix/lmtp[7]: Q1: to=<a@b.example>, relay=mail.example[private/dovecot-lmtp], delay=0.1, delays=0/0/0/0.1, dsn=2.0.0, status=sent (250 2.0.0 <a@b.example> Saved)", Kind::Sent),
        ("Nov 25 19:30:01 relay postfix/relay/smtp[7]: Q1: to=<a@b.example>, relay=mx.b.example[192.0.2.3]:25, conn_use=2, delay=0.1, delays=0/0/0/0.1, dsn=2.0.0, status=sent (250 ok)", Kind::Sent),
        ("Nov 25 19:30:01 relay postfix/pipe[7]: Q1: to=<a@b.example>, relay=dovecot, delay=0.1, delays=0/0/0/0.1, dsn=2.0.0, status=sent (delivered via dovecot service)", Kind::Sent),
        ("Nov 25 19:30:01 relay postfix/virtual[7]: Q1: to=<a@b.example>, relay=virtual, delay=0.1, delays=0/0/0/0.1, dsn=2.0.0, status=sent (delivered to maildir)", Kind::Sent),
        ("Nov 25 19:30:01 relay postfix/error[7]: Q1: to=<a@b.example>, relay=none, delay=0.1, delays=0/0/0/0.1, dsn=4.4.1, status=deferred (delivery temporarily suspended)", Kind::Deferred),
        ("Nov 25 19:30:01 relay postfix/discard[7]: Q1: to=<a@b.example>, relay=none, delay=0.1, delays=0/0/0/0.1, dsn=2.0.0, status=sent (b.example)", Kind::Sent),
        ("Nov 25 19:30:01 relay postfix/smtp[7]: Q1: to=<a@b.example>, relay=none, delay=0.1, delays=0/0/0/0.1, dsn=5.4.4, status=SOFTBOUNCE (Host or domain name not found)", Kind::Deferred),
        ("2026-11-25T19:30:01Z relay postfix/smtp[7]: Q1: to=<a@b.example>, relay=none, delay=1, dsn=4.4.1, status=deferred (x)", Kind::Deferred),
        ("2026-11-25T19:30:01.5+0100 relay postfix/smtp[7]: Q1: to=<a@b.example>, relay=none, delay=1, dsn=4.4.1, status=deferred (x)", Kind::Deferred),
    ] {
        assert_eq!(postfix(line), out("Q1", "a@b.example", None, kind), "{line}");
    }
    // Lines that are not results.
    for other in [
        "Nov 25 19:30:01 relay postfix/smtpd[99]: connect from unknown[192.0.2.1]",
        "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: from=<a@example.com>, size=300, nrcpt=1 (queue active)",
        "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: from=<a@example.com>, status=expired, returned to sender",
        "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: removed",
        "Nov 25 19:30:01 relay postfix/smtp[7]: Q1: to=<a@b.example>, relay=mx[192.0.2.3]:25, delay=0.1, delays=0/0/0/0.1, dsn=2.1.5, status=deliverable (250 2.1.5 Ok)",
        "Nov 25 19:30:01 relay dovecot[1]: imap-login: Login: user=<bob>",
        "",
    ] {
        assert_eq!(postfix(other), Line::Other, "{other}");
    }
    for unknown in [
        "Nov 25 19:30:01 relay postfix/smtp[2211]: 3F1A2B3C4D: to=bob@example.org, status=sent (ok)",
        "Nov 25 19:30:01 relay postfix/smtp[2211]: 3F1A2B3C4D: to=<bob@example.org>, status=weird",
        "Nov 25 19:30:01 relay postfix/smtp[2211]: 3F1A-2B: to=<bob@example.org>, status=sent (ok)",
        "Nov 25 19:30:01 relay postfix/smtp[2211]: ABC: to=<x@y>, orig_to=broken, status=sent (ok)",
        "Nov 25 19:30:01 relay postfix/smtp[2211]: ABC: to=<>, relay=none, status=sent (ok)",
        "Nov 25 19:30:01 relay postfix/smtp[2211]: ABC: to=<x@y>, relay=none",
        "Nov 25 19:30:01 relay postfix/smtp[2211]: ABC: to=<x@y, relay=none, status=sent (ok)",
    ] {
        assert_eq!(postfix(unknown), Line::Unknown, "{unknown}");
    }
}

/// Quoted local parts may hold `>`, `, `, `=` and spaces: the address ends at the `>` after
/// the quoted string.
#[test]
fn postfix_quoted_local_parts() {
    let line = format!(
        "{PREFIX}Q1: to=<\"a>, relay=x, status=sent (\"@b.example>, orig_to=<\"c d=e\\\" >,\"@f.example>, relay=none, delay=1, dsn=5.0.0, status=bounced (no)"
    );
    assert_eq!(
        postfix(&line),
        out(
            "Q1",
            "\"a>, relay=x, status=sent (\"@b.example",
            Some("\"c d=e\\\" >,\"@f.example"),
            Kind::Bounced
        )
    );
    // An unterminated quoted string is no address.
    let broken = format!("{PREFIX}Q1: to=<\"a@b.example>, relay=none, status=sent (ok)");
    assert_eq!(postfix(&broken), Line::Unknown);
}

/// What a remote server or a local user controls never makes a result: the reply text
/// (after `status=WORD`, in a `said:` line), lines of other programs, forged program names.
#[test]
fn postfix_forgeries_are_not_results() {
    // The real line: only its own to= counts, whatever its free text says.
    let real = format!(
        "{PREFIX}Q1: to=<x@evil.example>, relay=mx1.evil.example[192.0.2.1]:25, delay=1, delays=0/0/0/1, dsn=4.0.0, status=deferred (host mx1.evil.example[192.0.2.1] said: 450 Q1: to=<victim@example.org>, relay=x, dsn=5.0.0, status=bounced (no) status=bounced to=<victim@example.org>)"
    );
    assert_eq!(
        postfix(&real),
        out("Q1", "x@evil.example", None, Kind::Deferred)
    );
    for forged in [
        // A non-final MX's 4xx, as Postfix logs it.
        format!("{PREFIX}Q1: host mx1.evil.example[192.0.2.1] said: 450 4.0.0 x status=bounced to=<victim@example.org> (in reply to RCPT TO command)"),
        format!("{PREFIX}Q1: host mx1.evil.example[192.0.2.1] said: 450 4.0.0 Q1: to=<victim@example.org>, relay=x, dsn=5.0.0, status=bounced (x)"),
        // Another line of the queue id with status= and to=< in it.
        "Nov 25 19:30:01 relay postfix/cleanup[9]: Q1: message-id=<x status=bounced to=<victim@example.org>>".to_string(),
        "Nov 25 19:30:01 relay postfix/qmgr[88]: Q1: from=<to=<victim@example.org>, status=bounced>, size=3, nrcpt=1 (queue active)".to_string(),
        format!("{PREFIX}Q1: lost connection with mx[192.0.2.1] while receiving the initial server greeting: to=<victim@example.org>, status=bounced"),
        // status= inside an earlier field's position is not a field.
        format!("{PREFIX}Q1: to=<x@evil.example>, relay=mx (status=bounced to=<victim@example.org>), status=sent (ok)"),
    ] {
        assert!(
            !matches!(postfix(&forged), Line::Outcome(_)),
            "{forged}"
        );
    }
    // Forged program names and a line of another program that quotes a Postfix line.
    let body = "Q1: to=<victim@example.org>, relay=none, delay=1, dsn=5.0.0, status=bounced (x)";
    for head in [
        "Nov 25 19:30:01 relay postfixevil/smtp[1]: ",
        "Nov 25 19:30:01 relay x-postfix/smtp[1]: ",
        "Nov 25 19:30:01 relay postfix[1]: ",
        "Nov 25 19:30:01 relay postfix-/smtp[1]: ",
        "Nov 25 19:30:01 relay postfix/smtp: ",
        "Nov 25 19:30:01 relay postfix/smtp[x]: ",
        "Nov 25 19:30:01 relay postfix//smtp[1]: ",
        "Nov 25 19:30:01 relay sshd[1]: postfix/smtp[1]: ",
        "Nov 25 19:30:01 relay myapp[1]: Nov 25 19:30:01 relay postfix/smtp[1]: ",
        "relay postfix/smtp[1]: ",
        "postfix/smtp[1]: ",
        "Foo 25 19:30:01 relay postfix/smtp[1]: ",
        "2026-11-25T19:30:01 relay postfix/smtp[1]: ",
    ] {
        let line = format!("{head}{body}");
        assert!(!matches!(postfix(&line), Line::Outcome(_)), "{line}");
    }
}

#[test]
fn exim_lines() {
    let sent = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => bob@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7] X=TLS1.3:TLS_AES_256_GCM_SHA384:256 CV=yes C=\"250 2.0.0 OK\"";
    assert_eq!(
        exim(sent),
        out("1rOBxk-0003Ab-2Q", "bob@example.org", None, Kind::Sent)
    );
    let more = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q -> carol@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7]";
    assert_eq!(
        exim(more),
        out("1rOBxk-0003Ab-2Q", "carol@example.org", None, Kind::Sent)
    );
    let bounced = "2026-11-25 19:30:01.123 +0000 [2211] 1rOBxk-00000003Abc-2Qxy ** nobody@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7]: SMTP error from remote mail server after RCPT TO:<nobody@example.org>: 550 5.1.1 User unknown";
    assert_eq!(
        exim(bounced),
        out(
            "1rOBxk-00000003Abc-2Qxy",
            "nobody@example.org",
            None,
            Kind::Bounced
        )
    );
    let bare = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q ** nobody@example.org: Unrouteable address";
    assert_eq!(
        exim(bare),
        out(
            "1rOBxk-0003Ab-2Q",
            "nobody@example.org",
            None,
            Kind::Bounced
        )
    );
    let deferred = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q == later@example.net <alias@example.com> R=dnslookup T=remote_smtp defer (-44) H=mx.example.net [192.0.2.9]: SMTP error from remote mail server after RCPT TO:<later@example.net>: 451 4.7.1 Greylisted";
    assert_eq!(
        exim(deferred),
        out(
            "1rOBxk-0003Ab-2Q",
            "later@example.net",
            Some("alias@example.com"),
            Kind::Deferred
        )
    );
    let parent_colon = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q ** a@example.net <list@example.com>: Unrouteable address";
    assert_eq!(
        exim(parent_colon),
        out(
            "1rOBxk-0003Ab-2Q",
            "a@example.net",
            Some("list@example.com"),
            Kind::Bounced
        )
    );
    // The reason after "address:" is not an original address.
    let reason = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q ** a@example.net: <r0@example.org> said no";
    assert_eq!(
        exim(reason),
        out("1rOBxk-0003Ab-2Q", "a@example.net", None, Kind::Bounced)
    );
    let quoted = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q ** \"a b\"@example.net <\"c> d\"@example.com> R=x T=y: no";
    assert_eq!(
        exim(quoted),
        out(
            "1rOBxk-0003Ab-2Q",
            "\"a b\"@example.net",
            Some("\"c> d\"@example.com"),
            Kind::Bounced
        )
    );
    for other in [
        "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q <= alice@example.com H=(client) [192.0.2.1] P=esmtpsa A=plain:alice S=1234 id=x@y",
        "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q Completed",
        "2026-11-25 19:30:01 SMTP connection from [192.0.2.1] lost",
        "2026-11-25 19:30:01 Start queue run: pid=123",
        "2026-11-25 x 1rOBxk-0003Ab-2Q ** nobody@example.org",
        "garbage",
        "",
    ] {
        assert_eq!(exim(other), Line::Other, "{other}");
    }
    for unknown in [
        "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q **",
        "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => bob@example.org <> R=x",
        "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => bob@example.org <c@d",
        "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => \"bob@example.org",
    ] {
        assert_eq!(exim(unknown), Line::Unknown, "{unknown}");
    }
}

/// Remote text in Exim's lines (after `:`, in `C="…"`) and lines whose message id or flag
/// is not where Exim writes them are not results of another recipient.
#[test]
fn exim_forgeries_are_not_results() {
    let id = "1rOBxk-0003Ab-2Q";
    let real = format!("2026-11-25 19:30:01 {id} == x@evil.example R=dnslookup T=remote_smtp defer (-44) H=mx [192.0.2.1]: SMTP error from remote mail server after RCPT TO:<x@evil.example>: 451 {id} ** victim@example.org C=\"{id} ** victim@example.org\"");
    assert_eq!(exim(&real), out(id, "x@evil.example", None, Kind::Deferred));
    for forged in [
        format!("2026-11-25 19:30:01 H=mx [192.0.2.1]: {id} ** victim@example.org"),
        format!("2026-11-25 19:30:01 {id} H=mx [192.0.2.1]: SMTP error: 550 {id} ** victim@example.org"),
        format!("2026-11-25 19:30:01 {id} SMTP error from remote mail server after end of data: ** victim@example.org"),
        format!("Nov 25 19:30:01 relay exim[1]: {id} ** victim@example.org"),
    ] {
        assert!(!matches!(exim(&forged), Line::Outcome(_)), "{forged}");
    }
}

/// Text as Postfix and Exim write a remote reply: printable, no line end.
fn remote_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,200}",
        // Made of the pieces a forger would use.
        proptest::collection::vec(
            prop_oneof![
                Just("to=<victim@example.org>".to_string()),
                Just(", ".to_string()),
                Just("status=bounced".to_string()),
                Just(" (".to_string()),
                Just(")".to_string()),
                Just("orig_to=<victim@example.org>".to_string()),
                Just("Q1: ".to_string()),
                Just(" ** ".to_string()),
                Just("1rOBxk-0003Ab-2Q".to_string()),
                Just("\"".to_string()),
                Just(">".to_string()),
                Just("said: ".to_string()),
                "[a-z@. ]{0,8}",
            ],
            0..24
        )
        .prop_map(|v| v.concat()),
    ]
}

proptest! {
    #[test]
    fn any_text_is_safe(s in "\\PC{0,200}") {
        let _ = postfix(&s);
        let _ = exim(&s);
    }

    #[test]
    fn postfix_generated(id in "[0-9A-Za-z]{5,15}", to in "[a-z0-9.]{1,10}@[a-z0-9.]{1,10}", k in 0usize..3, pid in 1u32..99999) {
        let kind = [Kind::Sent, Kind::Bounced, Kind::Deferred][k];
        let line = format!("Nov 25 19:30:01 relay postfix/smtp[{pid}]: {id}: to=<{to}>, relay=x[192.0.2.1]:25, delay=1, dsn=2.0.0, status={} (text, with status=sent inside)", kind.as_str());
        prop_assert_eq!(postfix(&line), out(&id, &to, None, kind));
    }

    /// Remote reply text where Postfix puts it (after the status word; in a `said:` line;
    /// in a `lost connection` line) never yields a result for another recipient than the
    /// line's own `to=`.
    #[test]
    fn postfix_remote_text_names_no_other_recipient(text in remote_text(), k in 0usize..3) {
        let word = ["sent", "bounced", "deferred"][k];
        let real = format!("{PREFIX}Q1: to=<x@evil.example>, relay=mx1.evil.example[192.0.2.1]:25, delay=1, delays=0/0/0/1, dsn=4.0.0, status={word} (host mx1.evil.example[192.0.2.1] said: {text})");
        match postfix(&real) {
            Line::Outcome(o) => {
                prop_assert_eq!(o.queue_id, "Q1");
                prop_assert_eq!(o.recipient, "x@evil.example");
                prop_assert_eq!(o.original, None);
                prop_assert_eq!(o.kind.as_str(), word);
            }
            other => prop_assert!(false, "{other:?}"),
        }
        for line in [
            format!("{PREFIX}Q1: host mx1.evil.example[192.0.2.1] said: {text}"),
            format!("{PREFIX}Q1: lost connection with mx1.evil.example[192.0.2.1] while sending RCPT TO: {text}"),
            format!("{PREFIX}warning: {text}"),
            format!("{PREFIX}Q1: {text}"),
        ] {
            if let Line::Outcome(o) = postfix(&line) {
                // Only a text that is itself a whole delivery line's fields can be read, and
                // then it is the line's first field, not text inside it.
                prop_assert!(line.starts_with(&format!("{PREFIX}Q1: to=<{}>", o.recipient)), "{line}");
                prop_assert!(text.starts_with("to=<"), "{line}");
            }
        }
    }

    #[test]
    fn exim_generated(a in "[0-9A-Za-z]{6}", b in "[0-9A-Za-z]{6}", c in "[0-9A-Za-z]{2}", to in "[a-z0-9.]{1,10}@[a-z0-9.]{1,10}", k in 0usize..3) {
        let (kind, flag) = [(Kind::Sent, "=>"), (Kind::Bounced, "**"), (Kind::Deferred, "==")][k];
        let id = format!("{a}-{b}-{c}");
        let line = format!("2026-11-25 19:30:01 {id} {flag} {to} R=dnslookup T=remote_smtp: text == ** =>");
        prop_assert_eq!(exim(&line), out(&id, &to, None, kind));
    }

    /// Remote text after `:` and in `C="…"` never changes Exim's recipient.
    #[test]
    fn exim_remote_text_names_no_other_recipient(text in remote_text(), k in 0usize..3) {
        let (kind, flag) = [(Kind::Sent, "=>"), (Kind::Bounced, "**"), (Kind::Deferred, "==")][k];
        let id = "1rOBxk-0003Ab-2Q";
        for line in [
            format!("2026-11-25 19:30:01 {id} {flag} x@evil.example R=dnslookup T=remote_smtp H=mx [192.0.2.1]: SMTP error from remote mail server after RCPT TO:<x@evil.example>: {text}"),
            format!("2026-11-25 19:30:01 {id} {flag} x@evil.example R=dnslookup T=remote_smtp H=mx [192.0.2.1] C=\"{text}\""),
        ] {
            prop_assert_eq!(exim(&line), out(id, "x@evil.example", None, kind));
        }
    }
}
