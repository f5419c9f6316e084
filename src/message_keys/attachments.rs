//! The bodies of base64 attachments left out before a message is parsed: the keys never
//! read an image, a PDF or an archive, and decoding one costs more than reading all the
//! text of the message.
//!
//! A part is recognised from its boundary line (`--` and a boundary that the message or an
//! enclosing part declared) and its header fields: a `Content-Type` that is neither text,
//! multipart nor message, and a `Content-Transfer-Encoding` of base64. Its body ends before
//! the next line that starts with `--` (base64 has no `-`), so the boundary that ends it
//! stays and the parts after it are parsed as before.

use memchr::memmem;

/// At most this many boundaries are remembered (a message nests a few); parts under
/// others are parsed whole.
const MAX_BOUNDARIES: usize = 16;

/// At most this many bytes of a part's header fields are looked at.
const MAX_PART_HEADER: usize = 4 * 1024;

/// At most this many bytes of a message's header section are looked at for its boundary.
const MAX_HEADER: usize = super::MAX_HEADER;

/// `raw` (a whole message) with the bodies of its base64 attachments emptied, or None
/// when it has none. Linear in `raw`'s length.
pub(super) fn bodies_left_out(raw: &[u8]) -> Option<Vec<u8>> {
    let head_end = header_end(raw, 0, MAX_HEADER)?;
    let mut boundaries: Vec<&[u8]> = Vec::new();
    declared_boundaries(&raw[..head_end], &mut boundaries);
    if boundaries.is_empty() {
        return None;
    }
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    // From the blank line's '\n': a body may start with its first boundary.
    let mut from = head_end - 1;
    while let Some(k) = memmem::find(&raw[from..], b"\n--") {
        let line = from + k + 1;
        from = line;
        let name = &raw[line + 2..];
        if !boundaries.iter().any(|b| name.starts_with(b)) {
            continue;
        }
        let Some(body) = header_end(raw, line, MAX_PART_HEADER) else {
            continue;
        };
        let fields = &raw[line..body];
        declared_boundaries(fields, &mut boundaries);
        if !is_base64_attachment(fields) {
            continue;
        }
        // The body ends with the line end before the next line that starts with `--`.
        let next = memmem::find(&raw[body - 1..], b"\n--").map_or(raw.len(), |k| body - 1 + k);
        let end = if next > body && raw[next - 1] == b'\r' {
            next - 1
        } else {
            next
        };
        if end > body {
            let kept = out.get_or_insert_with(|| Vec::with_capacity(raw.len() / 4));
            kept.extend_from_slice(&raw[copied..body]);
            copied = end;
        }
        if next >= raw.len() {
            break;
        }
        from = next.max(body - 1);
    }
    let mut kept = out?;
    kept.extend_from_slice(&raw[copied..]);
    Some(kept)
}

/// Where the body starts after the header fields that start at `start` (the index after
/// their blank line), looked for in the first `max` bytes, or None.
pub(super) fn header_end(raw: &[u8], start: usize, max: usize) -> Option<usize> {
    let window = &raw[start..raw.len().min(start.saturating_add(max))];
    memchr::memchr_iter(b'\n', window).find_map(|i| match window.get(i + 1..) {
        Some([b'\n', ..]) => Some(start + i + 2),
        Some([b'\r', b'\n', ..]) => Some(start + i + 3),
        _ => None,
    })
}

/// Adds the `boundary=` parameters of `fields` to `boundaries` (at most
/// [`MAX_BOUNDARIES`] in all).
fn declared_boundaries<'a>(fields: &'a [u8], boundaries: &mut Vec<&'a [u8]>) {
    const NAME: &[u8] = b"boundary";
    for eq in memchr::memchr_iter(b'=', fields) {
        if boundaries.len() >= MAX_BOUNDARIES {
            return;
        }
        if eq < NAME.len() || !fields[eq - NAME.len()..eq].eq_ignore_ascii_case(NAME) {
            continue;
        }
        let value = &fields[eq + 1..];
        let value = match value.strip_prefix(b"\"") {
            Some(quoted) => &quoted[..memchr::memchr(b'"', quoted).unwrap_or(0)],
            None => {
                let end = value
                    .iter()
                    .position(|&c| c == b';' || c.is_ascii_whitespace())
                    .unwrap_or(value.len());
                &value[..end]
            }
        };
        if !value.is_empty() {
            boundaries.push(value);
        }
    }
}

/// Whether a message's header section `fields` makes it one plain text part: no
/// `Content-Type`, or `text/plain`.
pub(super) fn is_plain_text(fields: &[u8]) -> bool {
    fields
        .split(|&c| c == b'\n')
        .find_map(|line| field_value(line, b"content-type:"))
        .is_none_or(|v| v.len() >= 10 && v[..10].eq_ignore_ascii_case(b"text/plain"))
}

/// Whether the header fields of a part (its boundary line first) give it a type other
/// than text, multipart and message, and base64 as its transfer encoding.
fn is_base64_attachment(fields: &[u8]) -> bool {
    let mut binary = false;
    let mut base64 = false;
    for line in fields.split(|&c| c == b'\n') {
        if let Some(value) = field_value(line, b"content-type:") {
            binary = !value.is_empty()
                && ![&b"text/"[..], b"multipart/", b"message/"]
                    .iter()
                    .any(|t| value.len() >= t.len() && value[..t.len()].eq_ignore_ascii_case(t));
        } else if let Some(value) = field_value(line, b"content-transfer-encoding:") {
            base64 = value.eq_ignore_ascii_case(b"base64");
        }
    }
    binary && base64
}

/// The value of `line` (spaces around it trimmed) when it is the field `name` (lower-case,
/// colon included), or None.
fn field_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    if line.len() < name.len() || !line[..name.len()].eq_ignore_ascii_case(name) {
        return None;
    }
    Some(line[name.len()..].trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TEXT: &str = "--m\r\nContent-Type: text/plain\r\n\r\nthe text\r\n";
    const PDF: &str = "--m\r\nContent-Type: application/pdf; name=\"a.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\nJVBERi0xLjQK\r\n";

    fn message(parts: &[&str]) -> String {
        format!(
            "Subject: s\r\nContent-Type: multipart/mixed; boundary=\"m\"\r\n\r\n{}--m--\r\n",
            parts.concat()
        )
    }

    fn left_out(raw: &str) -> Option<String> {
        bodies_left_out(raw.as_bytes()).map(|v| String::from_utf8(v).expect("utf-8 kept"))
    }

    #[test]
    fn a_base64_attachment_body_is_emptied_and_the_rest_kept() {
        let kept = left_out(&message(&[TEXT, PDF, TEXT])).expect("an attachment");
        assert_eq!(
            kept,
            message(&[
                TEXT,
                "--m\r\nContent-Type: application/pdf; name=\"a.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\n\r\n",
                TEXT
            ])
        );
        let parsed = mail_parser::MessageParser::new()
            .parse(kept.as_bytes())
            .expect("parses");
        assert_eq!(parsed.parts.len(), 4);
        assert_eq!(parsed.body_text(0).as_deref(), Some("the text"));
        assert_eq!(parsed.body_text(1).as_deref(), Some("the text"));
    }

    #[test]
    fn text_parts_and_other_encodings_are_kept() {
        let b64_text = "--m\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\ndGV4dA==\r\n";
        let plain_pdf = "--m\r\nContent-Type: application/pdf\r\n\r\n%PDF\r\n";
        assert_eq!(left_out(&message(&[TEXT, b64_text, plain_pdf])), None);
        // A body that only looks like a part, under no declared boundary, stays.
        let text = "Subject: s\r\n\r\nhi\r\n--m\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\nwords\r\n";
        assert_eq!(left_out(text), None);
    }

    #[test]
    fn boundaries_are_read_quoted_or_not_and_nested() {
        let raw = "Content-Type: multipart/mixed; BOUNDARY=outer\r\n\r\n--outer\r\nContent-Type: multipart/related; boundary=\"in ner\"\r\n\r\n--in ner\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: BASE64\r\n\r\niVBOR\r\n--in ner--\r\n--outer--\r\n";
        assert_eq!(
            left_out(raw).as_deref(),
            Some("Content-Type: multipart/mixed; BOUNDARY=outer\r\n\r\n--outer\r\nContent-Type: multipart/related; boundary=\"in ner\"\r\n\r\n--in ner\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: BASE64\r\n\r\n\r\n--in ner--\r\n--outer--\r\n")
        );
    }

    #[test]
    fn an_attachment_cut_off_at_the_end_is_emptied() {
        let raw = "Content-Type: multipart/mixed; boundary=m\n\n--m\nContent-Type: image/gif\nContent-Transfer-Encoding: base64\n\nR0lGOD";
        assert_eq!(
            left_out(raw).as_deref(),
            Some("Content-Type: multipart/mixed; boundary=m\n\n--m\nContent-Type: image/gif\nContent-Transfer-Encoding: base64\n\n")
        );
    }

    #[test]
    fn plain_text_is_told_from_its_content_type() {
        assert!(is_plain_text(b"Subject: s\r\n"));
        assert!(is_plain_text(
            b"content-type: Text/Plain; charset=utf-8\r\n"
        ));
        assert!(!is_plain_text(b"Content-Type: text/html\r\n"));
        assert!(!is_plain_text(
            b"Content-Type: multipart/mixed; boundary=b\r\n"
        ));
    }

    proptest! {
        /// Any bytes: no panic, and what is kept is never longer than the message.
        #[test]
        fn any_bytes_are_read(
            head in "[a-zA-Z=;:\" \r\n-]{0,80}",
            body in prop::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut raw = format!("Content-Type: multipart/mixed; boundary=m\r\n{head}\r\n\r\n--m\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n").into_bytes();
            raw.extend_from_slice(&body);
            if let Some(kept) = bodies_left_out(&raw) {
                prop_assert!(kept.len() < raw.len());
            }
            let _ = bodies_left_out(&body);
        }
    }
}
