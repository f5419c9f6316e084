//! From, Message-ID and Subject of a message, read from its header section: what the
//! per-message log line shows and what limits on the header From count.
//!
//! mail-parser is the reference: every answer is the one mail-parser gives for the whole
//! section. Most messages are read without it, though. A plain section (CRLF lines, every
//! field named and followed by ':') whose wanted fields each appear once, on one line, with a
//! value of the common simple shapes (`<id@host>`; `addr`, `<addr>` or `Name <addr>`; a
//! printable ASCII subject without encoded words) is read directly. Anything
//! else goes to mail-parser: only the wanted fields of a plain section (parsing the Date,
//! Received and other fields only to throw them away was most of its cost), or the whole
//! section when it is not plain. Property tests and a fuzz target check that the direct
//! reading, where it answers, is mail-parser's answer.

use std::sync::OnceLock;

use memchr::memmem::Finder;

/// What the header section says, each `None` when the field is absent or unreadable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderFields {
    /// The first address of the first `From:` field.
    pub from: Option<String>,
    /// The `Message-ID:`, without its angle brackets.
    pub message_id: Option<String>,
    /// The `Subject:`, unfolded and decoded.
    pub subject: Option<String>,
}

/// The wanted fields, in the order of [`Scan::values`].
const WANTED: [&[u8]; 3] = [b"from", b"message-id", b"subject"];

/// The end of the header section: just past its blank line (the first CRLF CRLF), or the
/// end of `msg`.
pub fn header_end(msg: &[u8]) -> usize {
    static BLANK_LINE: OnceLock<Finder<'static>> = OnceLock::new();
    BLANK_LINE
        .get_or_init(|| Finder::new(b"\r\n\r\n"))
        .find(msg)
        .map_or(msg.len(), |p| p + 4)
}

/// From, Message-ID and Subject of `msg`, read from its header section only (the body, after
/// the first blank line, is never read).
pub fn read(msg: &[u8]) -> HeaderFields {
    let head = &msg[..header_end(msg)];
    let Some(found) = scan(head, None) else {
        return by_mail_parser(head);
    };
    if found.values.iter().all(Option::is_none) {
        return HeaderFields::default();
    }
    if found.single {
        if let Some(fields) = quick(&found.values) {
            return fields;
        }
    }
    // The section is plain (the scan above went through): the same scan copies the wanted
    // fields for mail-parser.
    let mut wanted = Vec::new();
    scan(head, Some(&mut wanted));
    wanted.extend_from_slice(b"\r\n");
    by_mail_parser(&wanted)
}

/// mail-parser's reading of `section` (a header section, or the wanted fields of one).
pub fn by_mail_parser(section: &[u8]) -> HeaderFields {
    parser()
        .parse_headers(section)
        .map_or_else(HeaderFields::default, |msg| fields_of(&msg))
}

/// The fields as mail-parser found them in `msg`.
fn fields_of(msg: &mail_parser::Message<'_>) -> HeaderFields {
    HeaderFields {
        from: msg
            .from()
            .and_then(|a| a.first())
            .and_then(|a| a.address())
            .map(str::to_string),
        message_id: msg.message_id().map(str::to_string),
        subject: msg.subject().map(str::to_string),
    }
}

/// The parser of [`by_mail_parser`]: From, Message-ID and Subject parsed as mail-parser
/// always parses them, every other field skipped to its end.
fn parser() -> &'static mail_parser::MessageParser {
    static PARSER: OnceLock<mail_parser::MessageParser> = OnceLock::new();
    PARSER.get_or_init(|| {
        mail_parser::MessageParser::new()
            .header_address(mail_parser::HeaderName::From)
            .header_id(mail_parser::HeaderName::MessageId)
            .header_text(mail_parser::HeaderName::Subject)
            .default_header_ignore()
    })
}

/// What [`scan`] found in a plain section.
#[derive(Debug, Default)]
struct Scan<'a> {
    /// Whether each wanted field appears at most once and none is folded: then `values`
    /// holds all of them.
    single: bool,
    /// The raw value (after the ':', before the CRLF) of the last From, Message-ID and
    /// Subject; all `None` when the section has none of them.
    values: [Option<&'a [u8]>; 3],
}

/// Notes the values of the wanted fields of a plain header section, and, given `out`,
/// copies those fields (with their folded lines) into it, for mail-parser to read instead
/// of the whole section. `None` when the section is anything but plain (a bare CR or LF, a line
/// before the first field, a field name that is not printable ASCII followed by ':', no
/// final CRLF): mail-parser then reads it all, so what is found never depends on this
/// shortcut.
fn scan<'a>(head: &'a [u8], mut out: Option<&mut Vec<u8>>) -> Option<Scan<'a>> {
    let mut found = Scan {
        single: true,
        ..Scan::default()
    };
    let mut rest = head;
    let mut keep = false;
    let mut first = true;
    while !rest.is_empty() {
        let lf = memchr::memchr(b'\n', rest)?;
        let line = &rest[..=lf];
        let text = line.strip_suffix(b"\r\n")?;
        if memchr::memchr(b'\r', text).is_some() {
            return None;
        }
        if text.is_empty() {
            // The blank line ends the section; a section that starts with it is left to
            // mail-parser.
            return if first { None } else { Some(found) };
        }
        if text[0] == b' ' || text[0] == b'\t' {
            if first {
                return None;
            }
            if keep {
                found.single = false;
            }
        } else {
            let colon = memchr::memchr(b':', text)?;
            let name = &text[..colon];
            if name.is_empty() || !name.iter().all(|b| (33..=126).contains(b)) {
                return None;
            }
            let which = WANTED.iter().position(|w| name.eq_ignore_ascii_case(w));
            keep = which.is_some();
            if let Some(i) = which {
                let slot = &mut found.values[i];
                if slot.is_some() {
                    found.single = false;
                }
                *slot = Some(&text[colon + 1..]);
            }
        }
        if let (true, Some(out)) = (keep, out.as_deref_mut()) {
            out.extend_from_slice(line);
        }
        first = false;
        rest = &rest[lf + 1..];
    }
    Some(found)
}

/// The fields read directly from their one-line values, when every one present has a
/// simple shape; `None` sends the section to mail-parser.
fn quick(values: &[Option<&[u8]>; 3]) -> Option<HeaderFields> {
    let [from, id, subject] = values.map(|v| v.map(trim));
    Some(HeaderFields {
        from: match from {
            Some(v) => Some(simple_from(v)?),
            None => None,
        },
        message_id: match id {
            Some(v) => Some(simple_id(v)?),
            None => None,
        },
        subject: match subject {
            Some(v) => Some(simple_subject(v)?),
            None => None,
        },
    })
}

/// `v` without leading and trailing spaces and tabs.
fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t');
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(s), Some(e)) => &v[s..=e],
        _ => &[],
    }
}

/// An address of the simple shape `local@domain`: letters, digits and `._+-` before the one
/// `@`, letters, digits, `.` and `-` after it, both sides starting with a letter or digit.
fn simple_address(a: &[u8]) -> Option<String> {
    let at = memchr::memchr(b'@', a)?;
    let (local, domain) = (&a[..at], &a[at + 1..]);
    let local_ok = local.first()?.is_ascii_alphanumeric()
        && local
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'));
    let domain_ok = domain.first()?.is_ascii_alphanumeric()
        && domain
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
    if local_ok && domain_ok {
        ascii(a)
    } else {
        None
    }
}

/// The address of a From value of one of the shapes `addr`, `<addr>` and `Name <addr>`,
/// where the name is words of letters and digits with one space between them.
fn simple_from(v: &[u8]) -> Option<String> {
    let Some(inner) = v.strip_suffix(b">") else {
        return simple_address(v);
    };
    let open = memchr::memrchr(b'<', inner)?;
    let (name, addr) = (&inner[..open], &inner[open + 1..]);
    if !name.is_empty() {
        let words = name.strip_suffix(b" ")?;
        let plain = words
            .split(|&b| b == b' ')
            .all(|w| !w.is_empty() && w.iter().all(u8::is_ascii_alphanumeric));
        if !plain {
            return None;
        }
    }
    simple_address(addr)
}

/// The id of a Message-ID value of the shape `<id>`, the id a simple address.
fn simple_id(v: &[u8]) -> Option<String> {
    simple_address(v.strip_prefix(b"<")?.strip_suffix(b">")?)
}

/// A Subject value of printable ASCII, single spaces between its words and no encoded word
/// (nothing to decode or unfold).
fn simple_subject(v: &[u8]) -> Option<String> {
    let printable = !v.is_empty() && v.iter().all(|&b| (0x21..0x7f).contains(&b) || b == b' ');
    let plain = printable
        && memchr::memmem::find(v, b"=?").is_none()
        && memchr::memmem::find(v, b"  ").is_none();
    if plain {
        ascii(v)
    } else {
        None
    }
}

/// Bytes checked to be ASCII, as a String.
fn ascii(v: &[u8]) -> Option<String> {
    std::str::from_utf8(v).ok().map(str::to_owned)
}

#[cfg(test)]
mod tests;
