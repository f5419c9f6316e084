//! Delivery results in the smart host's log.
//!
//! Postfix (syslog, or `maillog_file`), one line per recipient and attempt:
//!
//! ```text
//! Nov 25 19:30:01 relay postfix/smtp[2211]: 4XyzQ1bCDf: to=<bob@example.org>, relay=mx.example.org[192.0.2.7]:25, delay=0.4, delays=0.1/0/0.2/0.1, dsn=2.0.0, status=sent (250 2.0.0 OK)
//! 2026-11-25T19:30:01.123456+00:00 relay postfix/smtp[2211]: 4XyzQ1bCDf: to=<nobody@example.org>, orig_to=<old@example.org>, relay=..., dsn=5.1.1, status=bounced (host ... said: 550 5.1.1 ...)
//! ```
//!
//! Exim's main log, one line per recipient and attempt (`=>` delivered, `->` delivered as
//! one more address of the same delivery, `**` failed for good, `==` deferred):
//!
//! ```text
//! 2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => bob@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7] C="250 OK"
//! 2026-11-25 19:30:01.123 [2211] 1rOBxk-0003Ab-2Q ** nobody@example.org R=dnslookup T=remote_smtp: SMTP error from remote mail server after RCPT TO:<nobody@example.org>: 550 5.1.1 User unknown
//! 2026-11-25 19:30:01 1rOBxk-0003Ab-2Q == later@example.org <alias@example.org> R=dnslookup T=remote_smtp defer (-44): ...
//! ```

/// What the smart host reported for one recipient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Delivered.
    Sent,
    /// Failed for good.
    Bounced,
    /// Deferred (to be tried again).
    Deferred,
}

impl Kind {
    /// The word (`sent`, `bounced`, `deferred`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sent => "sent",
            Kind::Bounced => "bounced",
            Kind::Deferred => "deferred",
        }
    }

    /// Parses the word.
    pub fn parse(w: &str) -> Option<Kind> {
        Some(match w {
            "sent" => Kind::Sent,
            "bounced" => Kind::Bounced,
            "deferred" => Kind::Deferred,
            _ => return None,
        })
    }
}

/// One delivery result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome<'a> {
    /// The smart host's queue id.
    pub queue_id: &'a str,
    /// The recipient as delivered to.
    pub recipient: &'a str,
    /// The recipient as given, when the smart host rewrote it (Postfix `orig_to=`, Exim's
    /// `<address>` after the delivered one).
    pub original: Option<&'a str>,
    /// What happened.
    pub kind: Kind,
}

/// What a log line is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A delivery result.
    Outcome(Outcome<'a>),
    /// Some other line of the log (not a delivery result).
    Other,
    /// A line that looks like a delivery result but cannot be read.
    Unknown,
}

/// The log format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Postfix.
    Postfix,
    /// Exim.
    Exim,
}

impl Format {
    /// Parses `postfix` or `exim`.
    pub fn parse(w: &str) -> Option<Format> {
        match w {
            "postfix" => Some(Format::Postfix),
            "exim" => Some(Format::Exim),
            _ => None,
        }
    }

    /// Reads one line (without its newline).
    pub fn line(self, text: &str) -> Line<'_> {
        match self {
            Format::Postfix => postfix(text),
            Format::Exim => exim(text),
        }
    }
}

/// The text between `<` and `>` right after `field` (such as `to=`), searched in `text`.
fn angle<'a>(text: &'a str, field: &str) -> Option<Option<&'a str>> {
    let mut from = 0;
    // The field must start the text or follow ", " / " ".
    loop {
        let at = from + text[from..].find(field)?;
        let boundary = at == 0 || text[..at].ends_with(' ');
        if boundary {
            let rest = &text[at + field.len()..];
            let inner = rest
                .strip_prefix('<')
                .and_then(|r| r.find('>').map(|e| &r[..e]));
            return Some(inner);
        }
        from = at + field.len();
    }
}

fn postfix_id(w: &str) -> bool {
    !w.is_empty() && w.len() <= 64 && w.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A Postfix log line.
pub fn postfix(text: &str) -> Line<'_> {
    // The program part: "postfix/smtp[2211]: " (any postfix instance name, any program).
    let Some(p) = text.find("]: ") else {
        return Line::Other;
    };
    let head = &text[..p];
    let Some(prog_start) = head.rfind(' ') else {
        return Line::Other;
    };
    if !head[prog_start + 1..].contains("postfix") {
        return Line::Other;
    }
    let body = &text[p + 3..];
    let Some((id, rest)) = body.split_once(": ") else {
        return Line::Other;
    };
    let Some(status_at) = rest.find(" status=") else {
        return Line::Other;
    };
    if !postfix_id(id) {
        return Line::Unknown;
    }
    let status = &rest[status_at + 8..];
    let word = status.split([' ', ',']).next().unwrap_or("");
    let kind = match word {
        "sent" => Kind::Sent,
        "bounced" => Kind::Bounced,
        "deferred" => Kind::Deferred,
        // expired (the queue manager's "returned to sender") and others have no recipient.
        _ if rest.contains("to=<") => return Line::Unknown,
        _ => return Line::Other,
    };
    let Some(Some(to)) = angle(rest, "to=") else {
        return Line::Unknown;
    };
    let original = match angle(rest, "orig_to=") {
        Some(Some(o)) => Some(o),
        Some(None) => return Line::Unknown,
        None => None,
    };
    Line::Outcome(Outcome {
        queue_id: id,
        recipient: to,
        original,
        kind,
    })
}

/// Exim's message id: `XXXXXX-YYYYYY-ZZ` (before 4.97) or `XXXXXX-YYYYYYYYYYY-ZZZZ`.
fn exim_id(w: &str) -> bool {
    let mut parts = w.split('-');
    let ok = |p: Option<&str>, lens: &[usize]| {
        p.is_some_and(|p| lens.contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric()))
    };
    ok(parts.next(), &[6])
        && ok(parts.next(), &[6, 11])
        && ok(parts.next(), &[2, 4])
        && parts.next().is_none()
}

/// An Exim main log line.
pub fn exim(text: &str) -> Line<'_> {
    let mut words = text.split(' ').filter(|w| !w.is_empty()).peekable();
    // Date and time, then optional time zone and [pid].
    let (Some(date), Some(_time)) = (words.next(), words.next()) else {
        return Line::Other;
    };
    if date.len() != 10 || date.as_bytes().get(4) != Some(&b'-') {
        return Line::Other;
    }
    let mut id = None;
    for _ in 0..3 {
        let Some(w) = words.next() else {
            return Line::Other;
        };
        if exim_id(w) {
            id = Some(w);
            break;
        }
        if !(w.starts_with('[') || w.starts_with('+') || w.starts_with('-')) {
            return Line::Other;
        }
    }
    let Some(id) = id else {
        return Line::Other;
    };
    let kind = match words.next() {
        Some("=>") | Some("->") => Kind::Sent,
        Some("**") => Kind::Bounced,
        Some("==") => Kind::Deferred,
        _ => return Line::Other,
    };
    let Some(addr) = words.next() else {
        return Line::Unknown;
    };
    let original = match words.peek() {
        Some(w) if w.starts_with('<') => {
            let w = words.next().unwrap_or_default();
            match w.strip_prefix('<').and_then(|w| w.strip_suffix('>')) {
                Some(o) if !o.is_empty() => Some(o),
                _ => return Line::Unknown,
            }
        }
        _ => None,
    };
    // A ":" ends the address on failures without routing fields ("** x@y: reason").
    let addr = addr.strip_suffix(':').unwrap_or(addr);
    if addr.is_empty() || addr.starts_with('<') {
        return Line::Unknown;
    }
    Line::Outcome(Outcome {
        queue_id: id,
        recipient: addr,
        original,
        kind,
    })
}

#[cfg(test)]
mod tests {
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
        // Lines that are not results.
        for other in [
            "Nov 25 19:30:01 relay postfix/smtpd[99]: connect from unknown[192.0.2.1]",
            "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: from=<a@example.com>, size=300, nrcpt=1 (queue active)",
            "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: from=<a@example.com>, status=expired, returned to sender",
            "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: removed",
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
        ] {
            assert_eq!(postfix(unknown), Line::Unknown, "{unknown}");
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
        let bare =
            "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q ** nobody@example.org: Unrouteable address";
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
        for other in [
            "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q <= alice@example.com H=(client) [192.0.2.1] P=esmtpsa A=plain:alice S=1234 id=x@y",
            "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q Completed",
            "2026-11-25 19:30:01 SMTP connection from [192.0.2.1] lost",
            "2026-11-25 19:30:01 Start queue run: pid=123",
            "garbage",
            "",
        ] {
            assert_eq!(exim(other), Line::Other, "{other}");
        }
        for unknown in [
            "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q **",
            "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => bob@example.org <> R=x",
        ] {
            assert_eq!(exim(unknown), Line::Unknown, "{unknown}");
        }
    }

    proptest! {
        #[test]
        fn postfix_any_text_is_safe(s in "\\PC{0,200}") {
            let _ = postfix(&s);
            let _ = exim(&s);
        }

        #[test]
        fn postfix_generated(id in "[0-9A-Za-z]{5,15}", to in "[a-z0-9.]{1,10}@[a-z0-9.]{1,10}", k in 0usize..3, pid in 1u32..99999) {
            let kind = [Kind::Sent, Kind::Bounced, Kind::Deferred][k];
            let line = format!("Nov 25 19:30:01 relay postfix/smtp[{pid}]: {id}: to=<{to}>, relay=x[192.0.2.1]:25, delay=1, dsn=2.0.0, status={} (text, with status=sent inside)", kind.as_str());
            prop_assert_eq!(postfix(&line), out(&id, &to, None, kind));
        }

        #[test]
        fn exim_generated(a in "[0-9A-Za-z]{6}", b in "[0-9A-Za-z]{6}", c in "[0-9A-Za-z]{2}", to in "[a-z0-9.]{1,10}@[a-z0-9.]{1,10}", k in 0usize..3) {
            let (kind, flag) = [(Kind::Sent, "=>"), (Kind::Bounced, "**"), (Kind::Deferred, "==")][k];
            let id = format!("{a}-{b}-{c}");
            let line = format!("2026-11-25 19:30:01 {id} {flag} {to} R=dnslookup T=remote_smtp: text == ** =>");
            prop_assert_eq!(exim(&line), out(&id, &to, None, kind));
        }
    }
}
