//! The held-message file: what floodgate writes for one held message, and reads back.
//!
//! ```text
//! floodgate-held 1
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
//! body 1234
//! <exactly 1234 octets: the message as floodgate relays it, CRLF lines, not dot-stuffed>
//! end
//! ```
//!
//! Field values are one line each, with `%`, control characters and non-ASCII octets
//! written as `%XX`. Optional fields are absent when there is no value. The body's length
//! is given before it and the file ends with `end`: a truncated file never parses.
//! Pure: no I/O here.

use std::net::{IpAddr, SocketAddr};

/// The first line of every held file.
pub const MAGIC: &str = "floodgate-held 1";

/// One held message with its envelope and the client it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldMessage {
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
    /// The message as floodgate relays it: CRLF lines, not dot-stuffed.
    pub body: Vec<u8>,
}

/// Why a held file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Not a held file, or another version.
    #[error("not a floodgate held file (no {MAGIC:?} line)")]
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
    /// A field's value cannot be read.
    #[error("field {0:?} has a bad value")]
    Value(&'static str),
    /// The body is shorter than announced or the `end` line is missing.
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

impl HeldMessage {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 512);
        out.extend_from_slice(MAGIC.as_bytes());
        out.push(b'\n');
        let mut field = |name: &str, v: &str| {
            out.extend_from_slice(name.as_bytes());
            out.push(b' ');
            escape(v, &mut out);
            out.push(b'\n');
        };
        field("id", &self.id);
        field("key", &self.key);
        field("limit", &self.limit);
        if let Some(p) = &self.paced {
            field("paced", p);
        }
        field("time", &self.time.to_string());
        field("client", &addr_text(self.client));
        if let Some(l) = self.local {
            field("local", &addr_text(l));
        }
        if let Some(n) = &self.name {
            field("name", n);
        }
        if let Some(n) = &self.reverse_name {
            field("reverse_name", n);
        }
        if let Some(u) = &self.user {
            field("user", u);
        }
        if let Some(h) = &self.helo {
            field("helo", h);
        }
        field("proto", &self.proto);
        if let Some(t) = &self.tls {
            field("tls", t);
        }
        field("mail", &self.mail);
        for r in &self.rcpts {
            field("rcpt", r);
        }
        field("body", &self.body.len().to_string());
        out.extend_from_slice(&self.body);
        out.extend_from_slice(b"end\n");
        out
    }

    /// Reads a held file.
    pub fn decode(bytes: &[u8]) -> Result<HeldMessage, FormatError> {
        let mut rest = bytes;
        let mut next_line = |n: usize| -> Result<&[u8], FormatError> {
            let lf = memchr::memchr(b'\n', rest).ok_or(FormatError::Line(n))?;
            let line = &rest[..lf];
            rest = &rest[lf + 1..];
            Ok(line)
        };
        if next_line(1).map_err(|_| FormatError::Magic)? != MAGIC.as_bytes() {
            return Err(FormatError::Magic);
        }
        let mut fields: Vec<(&'static str, String)> = Vec::new();
        let mut rcpts = Vec::new();
        let mut body_len = None;
        let mut n = 1;
        while body_len.is_none() {
            n += 1;
            let line = next_line(n)?;
            let sp = memchr::memchr(b' ', line).ok_or(FormatError::Line(n))?;
            let (name, value) = (&line[..sp], &line[sp + 1..]);
            let value = unescape(value).ok_or(FormatError::Line(n))?;
            const SINGLE: [&str; 15] = [
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
                "body",
            ];
            match name {
                b"rcpt" => rcpts.push(value),
                _ => {
                    let name = std::str::from_utf8(name).map_err(|_| FormatError::Line(n))?;
                    let Some(known) = SINGLE.iter().find(|s| **s == name) else {
                        return Err(FormatError::Field(name.into()));
                    };
                    if fields.iter().any(|(f, _)| f == known) {
                        return Err(FormatError::Field(name.into()));
                    }
                    if *known == "body" {
                        let len: usize = value.parse().map_err(|_| FormatError::Value("body"))?;
                        if value.starts_with('+') || (value.len() > 1 && value.starts_with('0')) {
                            return Err(FormatError::Value("body"));
                        }
                        body_len = Some(len);
                    }
                    fields.push((known, value));
                }
            }
        }
        let len = body_len.unwrap_or(0);
        if rest.len() != len + 4 || &rest[len..] != b"end\n" {
            return Err(FormatError::Truncated);
        }
        let body = rest[..len].to_vec();
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
        let time_text = need(take("time"), "time")?;
        let time = time_text
            .parse::<u64>()
            .ok()
            .filter(|t| t.to_string() == time_text)
            .ok_or(FormatError::Value("time"))?;
        let client =
            parse_addr(&need(take("client"), "client")?).ok_or(FormatError::Value("client"))?;
        let local = match take("local") {
            Some(v) => Some(parse_addr(&v).ok_or(FormatError::Value("local"))?),
            None => None,
        };
        let held = HeldMessage {
            id,
            key: need(take("key"), "key")?,
            limit: need(take("limit"), "limit")?,
            paced: take("paced"),
            time,
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
            body,
        };
        // Canonical form only: what is read writes back to the same bytes.
        if held.encode() != bytes {
            return Err(FormatError::Value("canonical form"));
        }
        Ok(held)
    }

    /// The reverse path without its angle brackets and parameters.
    pub fn sender(&self) -> &str {
        path_of(&self.mail)
    }

    /// The recipients' addresses, without parameters.
    pub fn recipients(&self) -> Vec<&str> {
        self.rcpts.iter().map(|r| path_of(r)).collect()
    }

    /// The header section of the body (through its blank line, or all of it).
    pub fn header_section(&self) -> &[u8] {
        let end = memchr::memmem::find(&self.body, b"\r\n\r\n").map_or(self.body.len(), |p| p + 4);
        &self.body[..end]
    }

    /// The Subject of the message, decoded, when it has one.
    pub fn subject(&self) -> Option<String> {
        let msg = mail_parser::MessageParser::new().parse_headers(self.header_section())?;
        msg.subject().map(str::to_string)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> HeldMessage {
        HeldMessage {
            id: "18f-1a-0".into(),
            key: "alice".into(),
            limit: "per_user".into(),
            paced: None,
            time: 1_764_000_000,
            client: "192.0.2.7:50123".parse().unwrap(),
            local: Some("[::1]:587".parse().unwrap()),
            name: Some("laptop.example.org".into()),
            reverse_name: Some("[TEMPUNAVAIL]".into()),
            user: Some("alice".into()),
            helo: Some("laptop.example".into()),
            proto: "ESMTP".into(),
            tls: None,
            mail: "<alice@example.org> BODY=8BITMIME".into(),
            rcpts: vec![
                "<bob@example.net> NOTIFY=NEVER".into(),
                "<c@d.example>".into(),
            ],
            body: b"Subject: hi\r\n\r\nline\r\nend\n\r\n".to_vec(),
        }
    }

    #[test]
    fn round_trip_and_accessors() {
        let m = sample();
        let bytes = m.encode();
        assert!(bytes.starts_with(b"floodgate-held 1\nid 18f-1a-0\n"));
        assert_eq!(HeldMessage::decode(&bytes), Ok(m.clone()));
        assert_eq!(m.sender(), "alice@example.org");
        assert_eq!(m.recipients(), vec!["bob@example.net", "c@d.example"]);
        assert_eq!(m.subject().as_deref(), Some("hi"));
        assert_eq!(m.header_section(), b"Subject: hi\r\n\r\n");
    }

    #[test]
    fn paced_messages_say_so() {
        let mut m = sample();
        m.paced = Some("30/60s messages".into());
        let bytes = m.encode();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("limit per_user\npaced 30/60s messages\ntime "),
            "{text}"
        );
        assert_eq!(HeldMessage::decode(&bytes), Ok(m));
        // Out of its place, the file is not in canonical form.
        let moved = text
            .replace("paced 30/60s messages\n", "")
            .replace("proto ESMTP\n", "proto ESMTP\npaced 30/60s messages\n");
        assert_eq!(
            HeldMessage::decode(moved.as_bytes()),
            Err(FormatError::Value("canonical form"))
        );
    }

    #[test]
    fn files_without_the_client_names_still_read() {
        // As written before the names were kept: no `name` nor `reverse_name` line.
        let mut m = sample();
        m.name = None;
        m.reverse_name = None;
        let bytes = m.encode();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("\nname ") && !text.contains("reverse_name"));
        assert_eq!(HeldMessage::decode(&bytes), Ok(m));
        let named = String::from_utf8_lossy(&sample().encode()).into_owned();
        assert!(named.contains("\nname laptop.example.org\nreverse_name [TEMPUNAVAIL]\n"));
    }

    #[test]
    fn values_are_escaped_to_one_line() {
        let mut m = sample();
        m.key = "a\nb%c é".into();
        m.user = None;
        let bytes = m.encode();
        assert!(bytes
            .windows(b"key a%0Ab%25c %C3%A9\n".len())
            .any(|w| w == b"key a%0Ab%25c %C3%A9\n"));
        assert_eq!(HeldMessage::decode(&bytes), Ok(m));
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let good = sample().encode();
        assert_eq!(HeldMessage::decode(b""), Err(FormatError::Magic));
        assert_eq!(
            HeldMessage::decode(b"floodgate-held 2\n"),
            Err(FormatError::Magic)
        );
        // Every strict prefix is refused (a half-written file never reads).
        for cut in 0..good.len() {
            assert!(HeldMessage::decode(&good[..cut]).is_err(), "cut {cut}");
        }
        let mut extra = good.clone();
        extra.push(b'x');
        assert_eq!(HeldMessage::decode(&extra), Err(FormatError::Truncated));
        let text = String::from_utf8_lossy(&good).to_string();
        let swap =
            |from: &str, to: &str| HeldMessage::decode(text.replacen(from, to, 1).as_bytes());
        assert_eq!(swap("key alice\n", ""), Err(FormatError::Missing("key")));
        assert_eq!(
            swap("key alice\n", "key alice\nkey bob\n"),
            Err(FormatError::Field("key".into()))
        );
        assert_eq!(
            swap("key alice\n", "colour red\n"),
            Err(FormatError::Field("colour".into()))
        );
        assert_eq!(
            swap("time 1764000000", "time x"),
            Err(FormatError::Value("time"))
        );
        assert_eq!(
            swap("time 1764000000", "time 01764000000"),
            Err(FormatError::Value("time"))
        );
        assert_eq!(
            swap("client 192.0.2.7 50123", "client x"),
            Err(FormatError::Value("client"))
        );
        assert_eq!(
            swap("id 18f-1a-0", "id ../x"),
            Err(FormatError::Value("id"))
        );
        assert_eq!(swap("key alice", "key a%zz"), Err(FormatError::Line(3)));
        assert_eq!(swap("key alice", "keyalice"), Err(FormatError::Line(3)));
        assert_eq!(swap("body 27", "body 99"), Err(FormatError::Truncated));
        assert_eq!(swap("body 27", "body x"), Err(FormatError::Value("body")));
    }

    #[test]
    fn the_fuzz_seed_reads() {
        let seed = include_bytes!("../../fuzz/corpus/held_file/seed-sample");
        let m = HeldMessage::decode(seed).unwrap();
        assert_eq!(m.user.as_deref(), Some("alé"));
        assert_eq!(m.recipients(), vec!["c@d", "e@f"]);
        assert_eq!(m.encode(), seed);
    }

    #[test]
    fn the_named_fuzz_seed_reads() {
        let seed = include_bytes!("../../fuzz/corpus/held_file/seed-named");
        let m = HeldMessage::decode(seed).unwrap();
        assert_eq!(m.name.as_deref(), Some("client.example.org"));
        assert_eq!(m.reverse_name.as_deref(), Some("[TEMPUNAVAIL]"));
        assert_eq!(m.encode(), seed);
    }

    #[test]
    fn ids() {
        assert!(valid_id("18f-1a-0"));
        for bad in ["", "-x", "a/b", "..", "a.b", "a b", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    fn text() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[ -~\\n\\r%é\\x00]{0,12}").unwrap()
    }

    /// Addresses as the spool keeps them: IP and port (no IPv6 flow or scope).
    fn addr() -> impl Strategy<Value = SocketAddr> {
        (any::<IpAddr>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port))
    }

    fn held() -> impl Strategy<Value = HeldMessage> {
        (
            "[a-z0-9][a-z0-9-]{0,20}",
            (
                text(),
                text(),
                any::<u64>(),
                addr(),
                proptest::option::of(text()),
            ),
            (
                proptest::option::of(addr()),
                proptest::option::of(text()),
                proptest::option::of(text()),
                proptest::option::of(text()),
            ),
            (proptest::option::of(text()), proptest::option::of(text())),
            (text(), proptest::collection::vec(text(), 0..4)),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(
                |(
                    id,
                    (key, limit, time, client, paced),
                    (local, user, helo, tls),
                    (name, reverse_name),
                    (mail, rcpts),
                    body,
                )| {
                    HeldMessage {
                        id,
                        key,
                        limit,
                        paced,
                        time,
                        client,
                        local,
                        name,
                        reverse_name,
                        user,
                        helo,
                        proto: "ESMTP".into(),
                        tls,
                        mail,
                        rcpts,
                        body,
                    }
                },
            )
    }

    proptest! {
        /// Whatever is written reads back the same.
        #[test]
        fn encode_decode_round_trip(m in held()) {
            let bytes = m.encode();
            prop_assert_eq!(HeldMessage::decode(&bytes), Ok(m));
        }

        /// A file that is cut short or has a byte changed never reads as a different message
        /// of the same length; cut short, it never reads at all.
        #[test]
        fn damaged_files_never_read_as_whole(m in held(), cut in any::<prop::sample::Index>()) {
            let bytes = m.encode();
            let at = cut.index(bytes.len());
            prop_assert!(HeldMessage::decode(&bytes[..at]).is_err());
        }

        /// Arbitrary bytes never panic; what reads writes back to the same bytes.
        #[test]
        fn arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut input = MAGIC.as_bytes().to_vec();
            input.push(b'\n');
            input.extend(data);
            if let Ok(m) = HeldMessage::decode(&input) {
                prop_assert_eq!(m.encode(), input);
            }
        }
    }
}
