//! Reading a held file a part at a time: the envelope alone (listing, expiry, pacing,
//! claims), the envelope and header section (`held show`), or the whole message (a
//! release). The same functions read a file on disk and bytes in memory (tests and the
//! fuzz target), through [`Source`].
//!
//! Every length the file gives is checked, with checked arithmetic, against the file's own
//! length before anything is read or allocated: a planted or damaged file is refused with a
//! [`FormatError`], never read past its end nor allowed to ask for more memory than it has
//! octets.

use super::format::{
    decode_v1, is_header_section, number, parse_fields, FormatError, HeldHead, HeldMessage, MAGIC,
    MAGIC_V1,
};

/// Where a held file is read from: its length, and reads at an offset.
pub trait Source {
    /// The file's length in octets.
    fn size(&self) -> u64;
    /// Fills `buf` from `offset`; only called with `offset + buf.len() <= size()`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

impl Source for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let from = usize::try_from(offset).map_err(std::io::Error::other)?;
        let part = from
            .checked_add(buf.len())
            .and_then(|to| self.get(from..to))
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(part);
        Ok(())
    }
}

/// Why a held file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file's content is not a held file: it is damaged or was not written by floodgate.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The file could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The most octets an envelope may have: far more than `[smtp] max_recipients` recipients
/// of the longest command line need, and a bound on what a damaged file can make a reader
/// allocate.
pub const MAX_ENVELOPE: u64 = 64 << 20;

/// The octets read first: the version line and the `envelope` line at their longest
/// (`floodgate-held 2`, `envelope ` and 20 digits, each with its LF). A version 2 envelope
/// is always longer, so this never reads into a body.
const PREFIX: u64 = 48;

/// How a file's start was read.
enum Start {
    /// Version 2: the head, and where the body starts.
    Head { head: HeldHead, body_at: u64 },
    /// Version 1 has no envelope length: the whole file was read.
    Whole(HeldMessage),
}

fn read_vec(src: &(impl Source + ?Sized), offset: u64, len: u64) -> Result<Vec<u8>, ReadError> {
    let end = offset.checked_add(len).ok_or(FormatError::Truncated)?;
    if end > src.size() {
        return Err(FormatError::Truncated.into());
    }
    let len = usize::try_from(len).map_err(|_| FormatError::Truncated)?;
    let mut buf = vec![0; len];
    src.read_at(offset, &mut buf)?;
    Ok(buf)
}

/// Reads the start of a file: for version 2 the envelope only (its length checked against
/// the file's, the `end` line checked), for version 1 the whole file.
fn start(src: &(impl Source + ?Sized)) -> Result<Start, ReadError> {
    let len = src.size();
    let mut buf = read_vec(src, 0, len.min(PREFIX))?;
    let lf = memchr::memchr(b'\n', &buf).ok_or(FormatError::Magic)?;
    if &buf[..lf] == MAGIC_V1.as_bytes() {
        return Ok(Start::Whole(decode_v1(&read_vec(src, 0, len)?)?));
    }
    if &buf[..lf] != MAGIC.as_bytes() {
        return Err(FormatError::Magic.into());
    }
    let line = &buf[lf + 1..];
    let end = memchr::memchr(b'\n', line).ok_or(FormatError::Line(2))?;
    let n = line[..end]
        .strip_prefix(b"envelope ")
        .ok_or(FormatError::Line(2))
        .and_then(|v| number(v).ok_or(FormatError::Value("envelope")))?;
    if n > MAX_ENVELOPE {
        return Err(FormatError::Value("envelope").into());
    }
    let env_at = (lf + 1 + end + 1) as u64;
    // Within MAX_ENVELOPE of a 48-octet prefix: no overflow.
    let env_end = env_at + n;
    if env_end > len {
        return Err(FormatError::Truncated.into());
    }
    let have = buf.len() as u64;
    if env_end > have {
        buf.extend(read_vec(src, have, env_end - have)?);
    } else {
        buf.truncate(env_end as usize);
    }
    let f = parse_fields(&buf[env_at as usize..], 2, 3)?;
    if f.consumed as u64 != n {
        return Err(FormatError::Value("envelope").into());
    }
    let headers = f.headers.ok_or(FormatError::Missing("headers"))?;
    if headers > f.size {
        return Err(FormatError::Value("headers").into());
    }
    if env_end.checked_add(f.size).and_then(|e| e.checked_add(4)) != Some(len) {
        return Err(FormatError::Truncated.into());
    }
    let head = HeldHead {
        envelope: f.envelope,
        subject: f.subject,
        headers,
        size: f.size,
    };
    // Canonical form only: what is read writes back to the same bytes.
    if head.encode() != buf {
        return Err(FormatError::Value("canonical form").into());
    }
    if read_vec(src, len - 4, 4)? != b"end\n" {
        return Err(FormatError::Truncated.into());
    }
    Ok(Start::Head {
        head,
        body_at: env_end,
    })
}

impl HeldMessage {
    /// Reads a held file from its bytes (version 2, or 1), checking it whole.
    pub fn decode(bytes: &[u8]) -> Result<HeldMessage, FormatError> {
        message(bytes).map_err(|e| match e {
            ReadError::Format(f) => f,
            // A slice never fails to read inside its length, and every read is checked
            // against that length first.
            ReadError::Io(_) => FormatError::Truncated,
        })
    }
}

/// The envelope of a held file and what it says of its body, reading (in version 2) only
/// the envelope and the 4-octet `end` line: what a listing, expiry, pacing and a claim read.
pub fn head(src: &(impl Source + ?Sized)) -> Result<HeldHead, ReadError> {
    Ok(match start(src)? {
        Start::Head { head, .. } => head,
        Start::Whole(m) => m.head(),
    })
}

/// The head and the body's header section, reading nothing after the section.
pub fn header_section(src: &(impl Source + ?Sized)) -> Result<(HeldHead, Vec<u8>), ReadError> {
    match start(src)? {
        Start::Head { head, body_at } => {
            let section = read_vec(src, body_at, head.headers)?;
            if !is_header_section(&section, head.size) {
                return Err(FormatError::Value("headers").into());
            }
            Ok((head, section))
        }
        Start::Whole(m) => {
            let section = m.header_section().to_vec();
            Ok((m.head(), section))
        }
    }
}

/// The whole message, checked whole: what a release reads.
pub fn message(src: &(impl Source + ?Sized)) -> Result<HeldMessage, ReadError> {
    match start(src)? {
        Start::Head { head, body_at } => {
            let body = read_vec(src, body_at, head.size)?;
            let m = HeldMessage {
                envelope: head.envelope,
                subject: head.subject,
                body,
            };
            if m.head().headers != head.headers {
                return Err(FormatError::Value("headers").into());
            }
            Ok(m)
        }
        Start::Whole(m) => Ok(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::format::{encode_v1, HeldEnvelope};
    use proptest::prelude::*;
    use std::cell::Cell;

    /// A source that counts the octets read.
    struct Counted<'a> {
        bytes: &'a [u8],
        read: Cell<u64>,
    }

    impl Source for Counted<'_> {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.read.set(self.read.get() + buf.len() as u64);
            self.bytes.read_at(offset, buf)
        }
    }

    fn sample(body_len: usize) -> HeldMessage {
        let mut body = b"Subject: =?utf-8?q?caf=C3=A9?=\r\nFrom: a@b\r\n\r\n".to_vec();
        body.resize(body_len.max(body.len()), b'x');
        HeldMessage::new(
            HeldEnvelope {
                id: "18f-1a-0".into(),
                key: "alice".into(),
                limit: "per_user".into(),
                paced: None,
                time: 1_764_000_000,
                client: "192.0.2.7:50123".parse().unwrap(),
                local: None,
                name: None,
                reverse_name: None,
                user: Some("alice".into()),
                helo: None,
                proto: "ESMTP".into(),
                tls: None,
                mail: "<alice@example.org>".into(),
                rcpts: vec!["<bob@example.net>".into()],
            },
            body,
        )
    }

    #[test]
    fn a_head_reads_the_envelope_and_the_end_line_only() {
        let m = sample(100_000);
        let bytes = m.encode();
        let env = m.head().encode().len() as u64;
        let src = Counted {
            bytes: &bytes,
            read: Cell::new(0),
        };
        let h = head(&src).unwrap();
        assert_eq!(h, m.head());
        assert_eq!(h.subject.as_deref(), Some("café"));
        assert_eq!(src.read.get(), env + 4, "the envelope and `end`");
        src.read.set(0);
        let (h2, section) = header_section(&src).unwrap();
        assert_eq!(h2, h);
        assert_eq!(section, m.header_section());
        assert_eq!(src.read.get(), env + 4 + section.len() as u64);
        src.read.set(0);
        assert_eq!(message(&src).unwrap(), m);
        assert_eq!(src.read.get(), bytes.len() as u64);
    }

    #[test]
    fn version_1_files_still_read_whole() {
        let m = sample(50);
        let old = encode_v1(&m);
        assert!(old.starts_with(b"floodgate-held 1\nid 18f-1a-0\n"));
        assert_eq!(message(&old[..]).unwrap(), m);
        assert_eq!(head(&old[..]).unwrap(), m.head());
        let (_, section) = header_section(&old[..]).unwrap();
        assert_eq!(section, m.header_section());
        // What reads as version 1 writes as version 2.
        assert_eq!(HeldMessage::decode(&m.encode()), Ok(m));
    }

    #[test]
    fn lengths_that_do_not_fit_the_file_are_refused_without_reading_them() {
        let m = sample(200);
        let good = String::from_utf8(m.encode()).unwrap();
        let swap = |from: &str, to: &str| good.replacen(from, to, 1).into_bytes();
        let env_line = good.lines().nth(1).unwrap().to_string();
        // A body length near u64::MAX (it wrapped and panicked before), the envelope's
        // own length left as it was: the envelope ends inside the `body` line.
        for n in ["18446744073709551615", "99999999999999999999999"] {
            let bytes = swap("body 200", &format!("body {n}"));
            assert!(matches!(
                head(&bytes[..]),
                Err(ReadError::Format(FormatError::Line(_)))
            ));
            assert!(HeldMessage::decode(&bytes).is_err());
        }
        for (line, want) in [
            (
                "envelope 18446744073709551615",
                FormatError::Value("envelope"),
            ),
            ("envelope 99999999", FormatError::Value("envelope")),
            ("envelope 9999999", FormatError::Truncated),
            ("envelope 007", FormatError::Value("envelope")),
            ("envelope x", FormatError::Value("envelope")),
            ("envelope 99999999999999999999999", FormatError::Line(2)),
            ("colour 1", FormatError::Line(2)),
        ] {
            let bytes = swap(&env_line, line);
            assert_eq!(
                head(&bytes[..]).unwrap_err().to_string(),
                want.to_string(),
                "{line}"
            );
            assert_eq!(HeldMessage::decode(&bytes), Err(want), "{line}");
        }
        // One octet more or less than the envelope has.
        let n: u64 = env_line["envelope ".len()..].parse().unwrap();
        for (k, want) in [
            (n + 1, FormatError::Value("envelope")),
            (n - 1, FormatError::Line(14)),
        ] {
            let bytes = swap(&env_line, &format!("envelope {k}"));
            assert_eq!(HeldMessage::decode(&bytes), Err(want), "{k}");
        }
        // The same lengths with the envelope's own length adjusted: the body length is
        // refused against the file's length.
        let huge = HeldHead {
            size: u64::MAX,
            ..m.head()
        }
        .encode();
        let mut bytes = huge.clone();
        bytes.extend_from_slice(&m.body);
        bytes.extend_from_slice(b"end\n");
        assert_eq!(
            head(&bytes[..]).unwrap_err().to_string(),
            FormatError::Truncated.to_string()
        );
        assert_eq!(HeldMessage::decode(&bytes), Err(FormatError::Truncated));
        let over = HeldHead {
            headers: 201,
            ..m.head()
        }
        .encode();
        let mut bytes = over;
        bytes.extend_from_slice(&m.body);
        bytes.extend_from_slice(b"end\n");
        assert_eq!(
            HeldMessage::decode(&bytes),
            Err(FormatError::Value("headers"))
        );
        // A header length that does not end the header section.
        let short = HeldHead {
            headers: 10,
            ..m.head()
        }
        .encode();
        let mut bytes = short;
        bytes.extend_from_slice(&m.body);
        bytes.extend_from_slice(b"end\n");
        assert!(head(&bytes[..]).is_ok(), "the head does not read the body");
        assert!(header_section(&bytes[..]).is_err());
        assert_eq!(
            HeldMessage::decode(&bytes),
            Err(FormatError::Value("headers"))
        );
        // A version 1 body length near u64::MAX.
        let old = String::from_utf8(encode_v1(&m)).unwrap();
        let bad = old.replacen("body 200", "body 18446744073709551615", 1);
        assert_eq!(
            HeldMessage::decode(bad.as_bytes()),
            Err(FormatError::Truncated)
        );
        let bad = old.replacen("body 200", "body 18446744073709551616", 1);
        assert_eq!(
            HeldMessage::decode(bad.as_bytes()),
            Err(FormatError::Value("body"))
        );
    }

    #[test]
    fn garbage_and_truncated_files_are_refused() {
        let bytes = sample(300).encode();
        for cut in 0..bytes.len() {
            assert!(head(&bytes[..cut]).is_err(), "cut {cut}");
            assert!(message(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut bad_end = bytes.clone();
        let n = bad_end.len();
        bad_end[n - 2] = b'D';
        assert_eq!(
            head(&bad_end[..]).unwrap_err().to_string(),
            FormatError::Truncated.to_string()
        );
        for junk in [
            &b""[..],
            b"\n",
            b"floodgate-held 3\n",
            b"GIF89a\x00\x01",
            &[0xff; 100],
        ] {
            assert_eq!(
                head(junk).unwrap_err().to_string(),
                FormatError::Magic.to_string(),
                "{junk:?}"
            );
        }
    }

    proptest! {
        /// Arbitrary bytes after either version line never panic, and the three readers
        /// agree: the whole message reads only where the head and the section do, and they
        /// are its own.
        #[test]
        fn readers_agree_and_never_panic(
            v1 in any::<bool>(),
            data in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut input = if v1 { MAGIC_V1 } else { MAGIC }.as_bytes().to_vec();
            input.push(b'\n');
            input.extend(data);
            let h = head(&input[..]);
            let s = header_section(&input[..]);
            if let Ok(m) = message(&input[..]) {
                prop_assert_eq!(h.unwrap(), m.head());
                prop_assert_eq!(s.unwrap().1, m.header_section().to_vec());
            }
        }

        /// A sample with any of its length lines rewritten to any number reads as the same
        /// message or not at all.
        #[test]
        fn any_length_is_checked(which in 0..3usize, n in any::<u64>()) {
            let m = sample(120);
            let good = String::from_utf8(m.encode()).unwrap();
            let name = ["envelope", "headers", "body"][which];
            let line = good.lines().find(|l| l.starts_with(name)).unwrap().to_string();
            let bytes = good.replacen(&line, &format!("{name} {n}"), 1).into_bytes();
            if let Ok(read) = message(&bytes[..]) {
                prop_assert_eq!(read, m.clone());
            }
            if let Ok(h) = head(&bytes[..]) {
                prop_assert_eq!(h, m.head());
            }
        }
    }
}
