//! Delivery results in the smart host's log, read by position: only the fields the smart
//! host writes itself, at the places it writes them, never the text that came from the
//! remote server or from a user.
//!
//! Postfix (its own `maillog_file`, or syslog), one line per recipient and attempt:
//!
//! ```text
//! Nov 25 19:30:01 relay postfix/smtp[2211]: 4XyzQ1bCDf: to=<bob@example.org>, relay=mx.example.org[192.0.2.7]:25, delay=0.4, delays=0.1/0/0.2/0.1, dsn=2.0.0, status=sent (250 2.0.0 OK)
//! 2026-11-25T19:30:01.123456+00:00 relay postfix/smtp[2211]: 4XyzQ1bCDf: to=<nobody@example.org>, orig_to=<old@example.org>, relay=..., dsn=5.1.1, status=bounced (host ... said: 550 5.1.1 ...)
//! ```
//!
//! A delivery line is, in this order: the timestamp (`Nov 25 19:30:01`, with microseconds as
//! `maillog_file` writes it, or RFC 3339) and the host name; the program, exactly `postfix`
//! or a multi-instance `postfix-NAME`, then `/` and the program (`smtp`, `lmtp`, `local`,
//! `virtual`, `pipe`, `error`, `discard`, …) and `[PID]: `; the queue id and `: `; then
//! `to=<ADDRESS>` as the first field, an optional `orig_to=<ADDRESS>` right after it, more
//! `name=value` fields separated by `, `, and `status=WORD` last. What follows the status
//! word (the parenthesised text) is where the remote server's reply lives: it is never read.
//! A line of another shape (`QID: host mx.example[192.0.2.1] said: 450 …`, a line whose
//! program is not Postfix's) is not a result whatever text it contains.
//!
//! Exim's main log, one line per recipient and attempt (`=>` delivered, `->` delivered as
//! one more address of the same delivery, `**` failed for good, `==` deferred):
//!
//! ```text
//! 2026-11-25 19:30:01 1rOBxk-0003Ab-2Q => bob@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7] C="250 OK"
//! 2026-11-25 19:30:01.123 [2211] 1rOBxk-0003Ab-2Q ** nobody@example.org R=dnslookup T=remote_smtp: SMTP error from remote mail server after RCPT TO:<nobody@example.org>: 550 5.1.1 User unknown
//! 2026-11-25 19:30:01 1rOBxk-0003Ab-2Q == later@example.net <alias@example.com> R=dnslookup T=remote_smtp defer (-44): ...
//! ```
//!
//! The date, time, optional time zone and `[pid]`, the message id, the flag and the
//! recipient right after it (and its original address in `<…>` right after that) are read;
//! the rest (routing fields, the remote server's text after `:` or in `C="…"`) is not.
//!
//! Which log can be trusted is the operator's choice: see the `outcomes` module.

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

fn digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// `HH:MM:SS` with an optional `.fraction` at the start of `s`; what follows it.
fn clock(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let shape = b.len() >= 8
        && digits(&b[0..2])
        && b[2] == b':'
        && digits(&b[3..5])
        && b[5] == b':'
        && digits(&b[6..8]);
    if !shape {
        return None;
    }
    let rest = &s[8..];
    match rest.strip_prefix('.') {
        Some(f) => {
            let n = f.bytes().take_while(u8::is_ascii_digit).count();
            (n > 0).then(|| &f[n..])
        }
        None => Some(rest),
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A BSD syslog timestamp (`Nov 25 19:30:01`, `Nov  5 19:30:01.123456`) and its space;
/// what follows.
fn bsd_timestamp(t: &str) -> Option<&str> {
    let (month, rest) = t.split_at_checked(3)?;
    if !MONTHS.contains(&month) {
        return None;
    }
    let rest = rest.strip_prefix(' ')?;
    // The day is padded with a space to two characters.
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    let (day, rest) = rest.split_once(' ')?;
    if day.len() > 2 || !digits(day.as_bytes()) {
        return None;
    }
    let (time, rest) = rest.split_once(' ')?;
    clock(time)?.is_empty().then_some(rest)
}

/// An RFC 3339 timestamp (`2026-11-25T19:30:01.123456+00:00`, `…Z`, `…+0000`) and its
/// space; what follows.
fn rfc3339_timestamp(t: &str) -> Option<&str> {
    let (stamp, rest) = t.split_once(' ')?;
    let b = stamp.as_bytes();
    let date = b.len() > 11
        && digits(&b[0..4])
        && b[4] == b'-'
        && digits(&b[5..7])
        && b[7] == b'-'
        && digits(&b[8..10])
        && matches!(b[10], b'T' | b't');
    if !date {
        return None;
    }
    let zone = clock(&stamp[11..])?;
    let offset = |z: &str| {
        let z = z.as_bytes();
        match z.len() {
            5 => digits(&z[1..]),
            6 => digits(&z[1..3]) && z[3] == b':' && digits(&z[4..]),
            _ => false,
        }
    };
    let ok = matches!(zone, "Z" | "z") || (zone.starts_with(['+', '-']) && offset(zone));
    ok.then_some(rest)
}

/// The syslog prefix (a timestamp and the host name); what follows the host's space.
fn after_syslog_prefix(text: &str) -> Option<&str> {
    let rest = bsd_timestamp(text).or_else(|| rfc3339_timestamp(text))?;
    let (host, rest) = rest.split_once(' ')?;
    (!host.is_empty()).then_some(rest)
}

fn name_part(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Postfix's program name and `[PID]: `; what follows. The name is exactly `postfix` or a
/// multi-instance `postfix-NAME`, then one or more `/`-separated parts, the last the
/// program (`postfix/smtp`, `postfix-out/lmtp`, `postfix/submission/smtpd`).
fn after_postfix_program(s: &str) -> Option<&str> {
    let (token, rest) = s.split_once(' ')?;
    let (name, pid) = token.strip_suffix("]:")?.split_once('[')?;
    if pid.len() > 10 || !digits(pid.as_bytes()) {
        return None;
    }
    let mut parts = name.split('/');
    let syslog_name = parts.next()?;
    let postfix =
        syslog_name == "postfix" || syslog_name.strip_prefix("postfix-").is_some_and(name_part);
    let mut programs = 0;
    for p in parts {
        if !name_part(p) {
            return None;
        }
        programs += 1;
    }
    (postfix && programs > 0).then_some(rest)
}

fn postfix_id(w: &str) -> bool {
    !w.is_empty() && w.len() <= 64 && w.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The length of the quoted string (`"…"`, with `\` escapes) that `b` starts with, 0 when it
/// starts with none; `None` when the quote is not closed.
fn quoted_prefix(b: &[u8]) -> Option<usize> {
    if b.first() != Some(&b'"') {
        return Some(0);
    }
    let mut i = 1;
    loop {
        match b.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// An address inside `<…>`, from just after the `<`: the address and what follows its
/// `>`. A quoted local part (`"a>, b=c"@example.org`) may hold `>`, `, `, `=` and spaces, so
/// it is read as a quoted string (with `\` escapes) before the `>` is looked for; the rest of
/// an address (dot-atoms, a domain, an `[address literal]`) holds no `>`.
fn angle_address(s: &str) -> Option<(&str, &str)> {
    let b = s.as_bytes();
    let i = quoted_prefix(b)?;
    let close = i + s.get(i..)?.find('>')?;
    Some((&s[..close], &s[close + 1..]))
}

/// The fields of a Postfix delivery line, from `to=<`: the recipient, its original address
/// and the status word. `None` when they are not in Postfix's order and shape.
fn postfix_fields(fields: &str) -> Option<(&str, Option<&str>, &str)> {
    let (to, mut rest) = angle_address(fields.strip_prefix("to=<")?)?;
    let mut original = None;
    if let Some(r) = rest.strip_prefix(", orig_to=<") {
        let (o, r) = angle_address(r)?;
        original = Some(o);
        rest = r;
    }
    loop {
        rest = rest.strip_prefix(", ")?;
        if let Some(r) = rest.strip_prefix("status=") {
            // The last field: the free text after the word is not read.
            let word = &r[..r.find(' ').unwrap_or(r.len())];
            return Some((to, original, word));
        }
        let (name, r) = rest.split_once('=')?;
        let field_name = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            && !matches!(name, "to" | "orig_to");
        if !field_name {
            return None;
        }
        // relay=, conn_use=, delay=, delays=, dsn=: a value without spaces up to the next
        // field.
        let end = r.find(", ")?;
        if r[..end].contains(' ') {
            return None;
        }
        rest = &r[end..];
    }
}

/// A Postfix log line.
pub fn postfix(text: &str) -> Line<'_> {
    let Some(body) = after_syslog_prefix(text).and_then(after_postfix_program) else {
        // Not Postfix's own line: whatever it holds is no result of Postfix's.
        return if text.contains(": to=<") {
            Line::Unknown
        } else {
            Line::Other
        };
    };
    let Some((id, fields)) = body.split_once(": ") else {
        return Line::Other;
    };
    if !fields.starts_with("to=") {
        return Line::Other;
    }
    if !postfix_id(id) {
        return Line::Unknown;
    }
    let Some((to, original, word)) = postfix_fields(fields) else {
        return Line::Unknown;
    };
    let kind = match word {
        "sent" => Kind::Sent,
        "bounced" => Kind::Bounced,
        // soft_bounce = yes: a bounce kept in the queue, as a deferral.
        "deferred" | "SOFTBOUNCE" => Kind::Deferred,
        // Address verification probes, not deliveries.
        "deliverable" | "undeliverable" => return Line::Other,
        _ => return Line::Unknown,
    };
    if to.is_empty() || original.is_some_and(str::is_empty) {
        return Line::Unknown;
    }
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

/// The next space-separated word of `s`, which is moved past it.
fn word<'a>(s: &mut &'a str) -> Option<&'a str> {
    let t = s.trim_start_matches(' ');
    let end = t.find(' ').unwrap_or(t.len());
    *s = &t[end..];
    (end > 0).then(|| &t[..end])
}

/// Exim's recipient after the flag: a word, or a quoted local part (which may hold spaces)
/// and the rest of the word; `s` is moved past it.
fn exim_address<'a>(s: &mut &'a str) -> Option<&'a str> {
    let t = s.trim_start_matches(' ');
    let b = t.as_bytes();
    let i = quoted_prefix(b)?;
    let end = i + t.get(i..)?.find(' ').unwrap_or(t.len() - i);
    *s = &t[end..];
    (end > 0).then(|| &t[..end])
}

/// An Exim main log line.
pub fn exim(text: &str) -> Line<'_> {
    let mut rest = text;
    // Date and time, then an optional time zone and [pid].
    let (Some(date), Some(time)) = (word(&mut rest), word(&mut rest)) else {
        return Line::Other;
    };
    let d = date.as_bytes();
    let date_shape = d.len() == 10
        && digits(&d[0..4])
        && d[4] == b'-'
        && digits(&d[5..7])
        && d[7] == b'-'
        && digits(&d[8..10]);
    if !date_shape || clock(time) != Some("") {
        return Line::Other;
    }
    let mut id = None;
    for _ in 0..3 {
        let Some(w) = word(&mut rest) else {
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
    let kind = match word(&mut rest) {
        Some("=>") | Some("->") => Kind::Sent,
        Some("**") => Kind::Bounced,
        Some("==") => Kind::Deferred,
        _ => return Line::Other,
    };
    let Some(addr) = exim_address(&mut rest) else {
        return Line::Unknown;
    };
    // A ":" ends the address on failures without routing fields ("** x@y: reason"); the
    // text after it is the reason, never an address.
    let (addr, reason) = match addr.strip_suffix(':') {
        Some(a) => (a, true),
        None => (addr, false),
    };
    if addr.is_empty() || addr.starts_with('<') {
        return Line::Unknown;
    }
    // The original address, in angle brackets right after the delivered one.
    let after = rest.strip_prefix(' ').unwrap_or(rest);
    let original = match after.strip_prefix('<').filter(|_| !reason) {
        Some(r) => match angle_address(r) {
            Some((o, tail))
                if !o.is_empty() && (tail.is_empty() || tail.starts_with([' ', ':'])) =>
            {
                Some(o)
            }
            _ => return Line::Unknown,
        },
        None => None,
    };
    Line::Outcome(Outcome {
        queue_id: id,
        recipient: addr,
        original,
        kind,
    })
}

#[cfg(test)]
mod tests;
