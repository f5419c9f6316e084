//! The held-message file: what floodgate writes for one held message (pure: serialisation
//! and parsing; [`read`](super::read) reads it, from a file a part at a time or from bytes
//! with `HeldMessage::decode`).
//!
//! ```text
//! floodgate-held 2
//! envelope 367
//! id 0192ab34cd-1a2b-0
//! key alice
//! limit per_user
//! paced 30/60s messages
//! time 1764000000
//! client 192.0.2.7 50123
//! local 192.0.2.1 587
//! name laptop.example.org
//! reverse_name laptop.example.org
//! user alice
//! helo laptop.example
//! proto ESMTP
//! tls TLSv1.3:TLS13_AES_256_GCM_SHA384
//! mail <alice@example.org> BODY=8BITMIME
//! rcpt <bob@example.net> NOTIFY=SUCCESS,FAILURE
//! subject Invoice 2025-11
//! headers 734
//! body 1234
//! <exactly 1234 octets: the message as floodgate relays it, CRLF lines, not dot-stuffed>
//! end
//! ```
//!
//! The first line names the format's version. `envelope` gives the octets of the lines after
//! it through the `body` line: the envelope, and what a listing shows of the message (its
//! decoded Subject, the length of its header section, its size). A listing reads that much
//! of each file and never a body, as Postfix's `showq` reads only a queue file's envelope
//! records; `headers` lets `held show` read the header section (through its blank line, or
//! the whole body when it has none) without the rest.
//!
//! Field values are one line each, with `%`, control characters and non-ASCII octets
//! written as `%XX`. Optional fields are absent when there is no value. Every length is
//! given before what it measures and the file ends with `end`: a truncated file never
//! reads, and a reader checks each length against the file's own length before it reads or
//! allocates anything.
//!
//! Version 1 (`floodgate-held 1`: no `envelope`, `subject` nor `headers` line) is still
//! read, whole; [`Spool::recover`](super::Spool::recover) rewrites such files as version 2.

use std::net::{IpAddr, SocketAddr};

/// The first line of every held file written now.
pub const MAGIC: &str = "floodgate-held 2";
/// The first line of a held file of version 1.
pub const MAGIC_V1: &str = "floodgate-held 1";

/// One held message's envelope and the client it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldEnvelope {
    /// Its id (letters, digits and `-`; the file name).
    pub id: String,
    /// The key of the limit that held it.
    pub key: String,
    /// The limit that held it.
    pub limit: String,
    /// For a paced message (`action = "pace"`): the rate it is released at, as
    /// [`PaceRate`](super::pace::PaceRate) writes it; `None` for a message held for an
    /// operator.
    pub paced: Option<String>,
    /// When it was held (seconds since the Unix epoch).
    pub time: u64,
    /// The client's address.
    pub client: SocketAddr,
    /// The address the client connected to, when known.
    pub local: Option<SocketAddr>,
    /// The client's verified name (XCLIENT `NAME`) when the session knew it, or
    /// `[TEMPUNAVAIL]` when its lookup failed for now; `None`: no name (`[UNAVAILABLE]`).
    /// Files written before the field existed read as `None`.
    pub name: Option<String>,
    /// The client's reverse name (XCLIENT `REVERSE_NAME`), as `name`.
    pub reverse_name: Option<String>,
    /// The authenticated user, if any.
    pub user: Option<String>,
    /// The client's HELO/EHLO name, if any.
    pub helo: Option<String>,
    /// `ESMTP` (EHLO) or `SMTP` (HELO).
    pub proto: String,
    /// The client's TLS (version and cipher), if any.
    pub tls: Option<String>,
    /// The reverse path and MAIL parameters: `<a@b> BODY=8BITMIME`.
    pub mail: String,
    /// Each accepted recipient with its RCPT parameters: `<c@d> NOTIFY=NEVER`.
    pub rcpts: Vec<String>,
}

/// What the start of a held file says: the envelope and what a listing shows of the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldHead {
    /// The envelope.
    pub envelope: HeldEnvelope,
    /// The message's Subject, decoded, when it has one.
    pub subject: Option<String>,
    /// Octets of the body's header section (through its blank line).
    pub headers: u64,
    /// Octets of the body.
    pub size: u64,
}

/// One held message: its envelope and the octets floodgate would have relayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldMessage {
    /// The envelope.
    pub envelope: HeldEnvelope,
    /// The message's Subject, decoded, as it was when the message was held (see
    /// [`HeldMessage::new`]).
    pub subject: Option<String>,
    /// The message as floodgate relays it: CRLF lines, not dot-stuffed.
    pub body: Vec<u8>,
}

/// Why a held file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Not a held file, or a version this floodgate does not know.
    #[error("not a floodgate held file (no {MAGIC:?} or {MAGIC_V1:?} line)")]
    Magic,
    /// A line of the envelope is not `name value`, or the file ends inside it.
    #[error("line {0}: malformed")]
    Line(usize),
    /// A field is missing.
    #[error("field {0:?} is missing")]
    Missing(&'static str),
    /// A field appears twice, or is not known.
    #[error("field {0:?} is repeated or unknown")]
    Field(String),
    /// A field's value cannot be read, or a length does not fit the file.
    #[error("field {0:?} has a bad value")]
    Value(&'static str),
    /// The file's id is not the id its name gives (a file copied or planted under another
    /// message's name).
    #[error("its id {0:?} is not the file's name")]
    Misnamed(String),
    /// The file is shorter or longer than its lengths say, or the `end` line is missing.
    #[error("the file is truncated or has bytes after its end")]
    Truncated,
}

/// Whether `id` is a valid held id: 1 to 64 ASCII letters, digits and `-`, not starting
/// with `-` or `.` (so it can never name another file).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('-')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The length of the header section of `body`: through its first blank line, or all of it.
pub fn header_section_len(body: &[u8]) -> usize {
    memchr::memmem::find(body, b"\r\n\r\n").map_or(body.len(), |p| p + 4)
}

/// The decoded Subject of a header section, when it has one.
pub fn subject_of(section: &[u8]) -> Option<String> {
    let msg = mail_parser::MessageParser::new().parse_headers(section)?;
    msg.subject().map(str::to_string)
}

/// Whether `section` (the first `section.len()` octets of a body of `size` octets) is that
/// body's whole header section, as [`header_section_len`] finds it.
pub fn is_header_section(section: &[u8], size: u64) -> bool {
    header_section_len(section) == section.len()
        && (section.len() as u64 == size || section.ends_with(b"\r\n\r\n"))
}

fn escape(v: &str, out: &mut Vec<u8>) {
    for &b in v.as_bytes() {
        if b == b'%' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

fn unescape(v: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let b = v[i];
        if b == b'%' {
            let hex = std::str::from_utf8(v.get(i + 1..i + 3)?).ok()?;
            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else if !(0x20..0x7f).contains(&b) {
            return None;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn addr_text(a: SocketAddr) -> String {
    format!("{} {}", a.ip(), a.port())
}

fn parse_addr(v: &str) -> Option<SocketAddr> {
    let (ip, port) = v.split_once(' ')?;
    Some(SocketAddr::new(
        ip.parse::<IpAddr>().ok()?,
        port.parse().ok()?,
    ))
}

/// A number as the file writes it: decimal digits, no sign, no leading zero.
pub(super) fn number(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) || (v.len() > 1 && v[0] == b'0') {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn field(out: &mut Vec<u8>, name: &str, v: &str) {
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    escape(v, out);
    out.push(b'\n');
}

impl HeldEnvelope {
    /// The reverse path without its angle brackets and parameters.
    pub fn sender(&self) -> &str {
        path_of(&self.mail)
    }

    /// The recipients' addresses, without parameters.
    pub fn recipients(&self) -> Vec<&str> {
        self.rcpts.iter().map(|r| path_of(r)).collect()
    }

    /// The envelope's lines, `id` through the recipients.
    fn encode_into(&self, out: &mut Vec<u8>) {
        field(out, "id", &self.id);
        field(out, "key", &self.key);
        field(out, "limit", &self.limit);
        if let Some(p) = &self.paced {
            field(out, "paced", p);
        }
        field(out, "time", &self.time.to_string());
        field(out, "client", &addr_text(self.client));
        if let Some(l) = self.local {
            field(out, "local", &addr_text(l));
        }
        if let Some(n) = &self.name {
            field(out, "name", n);
        }
        if let Some(n) = &self.reverse_name {
            field(out, "reverse_name", n);
        }
        if let Some(u) = &self.user {
            field(out, "user", u);
        }
        if let Some(h) = &self.helo {
            field(out, "helo", h);
        }
        field(out, "proto", &self.proto);
        if let Some(t) = &self.tls {
            field(out, "tls", t);
        }
        field(out, "mail", &self.mail);
        for r in &self.rcpts {
            field(out, "rcpt", r);
        }
    }
}

impl HeldHead {
    /// The file's first octets: the version, the `envelope` line and the envelope through
    /// the `body` line; the body follows them.
    pub fn encode(&self) -> Vec<u8> {
        let mut env = Vec::with_capacity(512);
        self.envelope.encode_into(&mut env);
        if let Some(s) = &self.subject {
            field(&mut env, "subject", s);
        }
        field(&mut env, "headers", &self.headers.to_string());
        field(&mut env, "body", &self.size.to_string());
        let mut out = Vec::with_capacity(env.len() + 48);
        out.extend_from_slice(MAGIC.as_bytes());
        out.push(b'\n');
        field(&mut out, "envelope", &env.len().to_string());
        out.extend_from_slice(&env);
        out
    }
}

impl HeldMessage {
    /// A message to hold: its Subject is read from `body` now and kept in the file, so a
    /// listing shows it without reading the body.
    pub fn new(envelope: HeldEnvelope, body: Vec<u8>) -> HeldMessage {
        let subject = subject_of(&body[..header_section_len(&body)]);
        HeldMessage {
            envelope,
            subject,
            body,
        }
    }

    /// What the start of its file says.
    pub fn head(&self) -> HeldHead {
        HeldHead {
            envelope: self.envelope.clone(),
            subject: self.subject.clone(),
            headers: header_section_len(&self.body) as u64,
            size: self.body.len() as u64,
        }
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.head().encode();
        out.reserve(self.body.len() + 4);
        out.extend_from_slice(&self.body);
        out.extend_from_slice(b"end\n");
        out
    }

    /// The header section of the body (through its blank line, or all of it).
    pub fn header_section(&self) -> &[u8] {
        &self.body[..header_section_len(&self.body)]
    }
}

/// The address of a `<path> PARAMS` text.
fn path_of(text: &str) -> &str {
    let first = text.split(' ').next().unwrap_or("");
    first
        .strip_prefix('<')
        .and_then(|s| s.strip_suffix('>'))
        .unwrap_or(first)
}

/// The fields of an envelope as read, through its `body` line.
#[derive(Debug)]
pub(super) struct Fields {
    /// The envelope.
    pub envelope: HeldEnvelope,
    /// `subject` (version 2).
    pub subject: Option<String>,
    /// `headers` (version 2; `None` in version 1).
    pub headers: Option<u64>,
    /// `body`: the body's length.
    pub size: u64,
    /// Octets read, through the `body` line.
    pub consumed: usize,
}

/// Reads envelope lines from the start of `bytes` through the `body` line; `first_line` is
/// the number of the first (for errors). Version 1 knows neither `subject` nor `headers`.
pub(super) fn parse_fields(
    bytes: &[u8],
    version: u8,
    first_line: usize,
) -> Result<Fields, FormatError> {
    const SINGLE: [&str; 17] = [
        "id",
        "key",
        "limit",
        "paced",
        "time",
        "client",
        "local",
        "name",
        "reverse_name",
        "user",
        "helo",
        "proto",
        "tls",
        "mail",
        "subject",
        "headers",
        "body",
    ];
    let mut at = 0;
    let mut fields: Vec<(&'static str, String)> = Vec::new();
    let mut rcpts = Vec::new();
    let mut numbers = [None::<u64>; 2];
    let mut n = first_line;
    let size = loop {
        let lf = memchr::memchr(b'\n', &bytes[at..]).ok_or(FormatError::Line(n))?;
        let line = &bytes[at..at + lf];
        at += lf + 1;
        let sp = memchr::memchr(b' ', line).ok_or(FormatError::Line(n))?;
        let (name, value) = (&line[..sp], &line[sp + 1..]);
        let text = unescape(value).ok_or(FormatError::Line(n))?;
        if name == b"rcpt" {
            rcpts.push(text);
            n += 1;
            continue;
        }
        let name = std::str::from_utf8(name).map_err(|_| FormatError::Line(n))?;
        let known = SINGLE
            .iter()
            .find(|s| **s == name)
            .filter(|s| version >= 2 || !matches!(**s, "subject" | "headers"))
            .ok_or_else(|| FormatError::Field(name.into()))?;
        if fields.iter().any(|(f, _)| f == known) {
            return Err(FormatError::Field(name.into()));
        }
        match *known {
            "body" => break number(value).ok_or(FormatError::Value("body"))?,
            "headers" => numbers[0] = Some(number(value).ok_or(FormatError::Value("headers"))?),
            "time" => numbers[1] = Some(number(value).ok_or(FormatError::Value("time"))?),
            _ => {}
        }
        fields.push((known, text));
        n += 1;
    };
    let mut take = |name: &'static str| {
        fields
            .iter()
            .position(|(f, _)| *f == name)
            .map(|i| fields.swap_remove(i).1)
    };
    let need = |v: Option<String>, name: &'static str| v.ok_or(FormatError::Missing(name));
    let id = need(take("id"), "id")?;
    if !valid_id(&id) {
        return Err(FormatError::Value("id"));
    }
    need(take("time"), "time")?;
    let client =
        parse_addr(&need(take("client"), "client")?).ok_or(FormatError::Value("client"))?;
    let local = match take("local") {
        Some(v) => Some(parse_addr(&v).ok_or(FormatError::Value("local"))?),
        None => None,
    };
    let envelope = HeldEnvelope {
        id,
        key: need(take("key"), "key")?,
        limit: need(take("limit"), "limit")?,
        paced: take("paced"),
        time: numbers[1].unwrap_or_default(),
        client,
        local,
        name: take("name"),
        reverse_name: take("reverse_name"),
        user: take("user"),
        helo: take("helo"),
        proto: need(take("proto"), "proto")?,
        tls: take("tls"),
        mail: need(take("mail"), "mail")?,
        rcpts,
    };
    Ok(Fields {
        envelope,
        subject: take("subject"),
        headers: numbers[0],
        size,
        consumed: at,
    })
}

/// Reads a whole version 1 file: the envelope lines, `body N`, N octets, `end`.
pub(super) fn decode_v1(bytes: &[u8]) -> Result<HeldMessage, FormatError> {
    let first = MAGIC_V1.len() + 1;
    if bytes.get(..first) != Some(format!("{MAGIC_V1}\n").as_bytes()) {
        return Err(FormatError::Magic);
    }
    let f = parse_fields(&bytes[first..], 1, 2)?;
    let rest = &bytes[first + f.consumed..];
    let len = usize::try_from(f.size).map_err(|_| FormatError::Value("body"))?;
    if len.checked_add(4) != Some(rest.len()) || &rest[len..] != b"end\n" {
        return Err(FormatError::Truncated);
    }
    let body = rest[..len].to_vec();
    let m = HeldMessage::new(f.envelope, body);
    // Canonical form only: what is read writes back to the same bytes.
    if encode_v1(&m) != bytes {
        return Err(FormatError::Value("canonical form"));
    }
    Ok(m)
}

/// A version 1 file's bytes, for the canonical check of [`decode_v1`] (and tests).
pub(super) fn encode_v1(m: &HeldMessage) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.body.len() + 512);
    out.extend_from_slice(MAGIC_V1.as_bytes());
    out.push(b'\n');
    m.envelope.encode_into(&mut out);
    field(&mut out, "body", &m.body.len().to_string());
    out.extend_from_slice(&m.body);
    out.extend_from_slice(b"end\n");
    out
}

#[cfg(test)]
mod tests;
