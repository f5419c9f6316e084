//! The text a message shows its reader: its text parts decoded (mail-parser decodes the
//! transfer encoding and charset), one alternative of each, HTML reduced to text, within a
//! budget.

use super::html::{self, prefix};
use super::Budget;
use mail_parser::{HeaderName, HeaderValue, Message, MimeHeaders, PartType};

/// At most this many bytes of decoded text are read from one message.
pub const MAX_TEXT: usize = 256 * 1024;

/// At most this many bytes of one HTML part are read: HTML spends much of its size on tags.
pub const MAX_HTML: usize = 1024 * 1024;

/// A message's text and the link targets of its HTML.
#[derive(Debug, Default)]
pub(super) struct Texts {
    /// The text parts, one after the other, each ending a line.
    pub text: String,
    /// The `href`s of the HTML parts (of the HTML alternative too when the text read is the
    /// plain one).
    pub hrefs: html::Hrefs,
}

/// The text of `message`: the parts of its text body (mail-parser's choice: the plain
/// alternative where there is one, else the HTML one), HTML reduced to text. With
/// `hrefs`, the link targets of every HTML body part as well. Stops where `budget` runs
/// out.
pub(super) fn texts(message: &Message<'_>, hrefs: bool, budget: &mut Budget) -> Texts {
    let mut out = Texts::default();
    for &id in &message.text_body {
        let room = MAX_TEXT.saturating_sub(out.text.len());
        if room == 0 || !budget.spend(1) {
            break;
        }
        match message.parts.get(id as usize).map(|p| &p.body) {
            Some(PartType::Text(t)) => out.text.push_str(prefix(t, room)),
            Some(PartType::Html(h)) => {
                let h = html::without_images(h, MAX_HTML);
                let reduced = html::reduce_within(&h, room, budget);
                out.text.push_str(prefix(&reduced.text, room));
                if hrefs {
                    out.hrefs.extend(reduced.hrefs);
                }
            }
            _ => continue,
        }
        out.text.push('\n');
    }
    if out.text.trim().is_empty() {
        // The body mail-parser chose holds no text (an inline image placed first in a
        // multipart/related, say): the first text part not given as an attachment is the
        // text the reader sees.
        if let Some(part) = message.parts.iter().find(|p| {
            matches!(p.body, PartType::Text(_) | PartType::Html(_))
                && !p.content_disposition().is_some_and(|d| d.is_attachment())
        }) {
            match &part.body {
                PartType::Text(t) => out.text.push_str(prefix(t, MAX_TEXT)),
                PartType::Html(h) => {
                    let h = html::without_images(h, MAX_HTML);
                    out.text
                        .push_str(&html::reduce_within(&h, MAX_TEXT, budget).text);
                }
                _ => {}
            }
            out.text.push('\n');
        }
    }
    if hrefs {
        // Sorted once: a message of many parts has as many ids in both lists.
        let mut read = message.text_body.clone();
        read.sort_unstable();
        for &id in message
            .html_body
            .iter()
            .filter(|id| read.binary_search(id).is_err())
        {
            if out.hrefs.len() >= html::MAX_HREFS || !budget.spend(1) {
                break;
            }
            if let Some(PartType::Html(h)) = message.parts.get(id as usize).map(|p| &p.body) {
                let h = html::without_images(h, MAX_HTML);
                out.hrefs.extend(html::reduce_within(&h, 0, budget).hrefs);
            }
        }
        out.hrefs.truncate(html::MAX_HREFS);
    }
    out
}

/// The body of `raw` (a message whose header fields `headers` holds) when it is one text
/// part whose text is its bytes as they are: `text/plain`, `text/html` or no type, not an
/// attachment, no transfer encoding (or 7bit, 8bit, binary), no charset or UTF-8 (or
/// US-ASCII, the body all ASCII), valid UTF-8, and a header section of plain field lines.
/// Such a body is read without the parser's decoded copy: the text is the same, and the
/// validation costs less. With whether it is HTML; None for every other message.
pub(super) fn single_part<'a>(raw: &'a [u8], headers: &Message<'_>) -> Option<(bool, &'a str)> {
    let html = match headers.content_type() {
        None => false,
        Some(ct) if ct.ctype() == "text" => {
            let html = match ct.subtype() {
                Some("plain") => false,
                Some("html") => true,
                _ => return None,
            };
            let charset = ct.attribute("charset");
            if !charset.is_none_or(|c| {
                ["utf-8", "utf8", "us-ascii"]
                    .iter()
                    .any(|u| c.eq_ignore_ascii_case(u))
            }) {
                return None;
            }
            html
        }
        Some(_) => return None,
    };
    if headers.content_disposition().is_some() {
        return None;
    }
    let plain_encoding = match headers.header(HeaderName::ContentTransferEncoding) {
        None => true,
        Some(HeaderValue::Text(e)) => ["7bit", "8bit", "binary"]
            .iter()
            .any(|p| e.trim().eq_ignore_ascii_case(p)),
        Some(_) => false,
    };
    if !plain_encoding {
        return None;
    }
    let body = super::attachments::header_end(raw, 0, raw.len())?;
    if !plain_field_lines(&raw[..body]) {
        return None;
    }
    let ascii_only = headers
        .content_type()
        .and_then(|ct| ct.attribute("charset"))
        .is_some_and(|c| c.eq_ignore_ascii_case("us-ascii"));
    let text = std::str::from_utf8(&raw[body..]).ok()?;
    if ascii_only && !text.is_ascii() {
        return None;
    }
    Some((html, text))
}

/// Whether `head` (a header section and its blank line) is lines of `Name: value` (a name
/// of visible ASCII) and their continuation lines only: where the parser ends such a
/// section is certain.
fn plain_field_lines(head: &[u8]) -> bool {
    let mut first = true;
    for line in head.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            // The blank line that ends the section (or the end after it).
            continue;
        }
        let folded = matches!(line[0], b' ' | b'\t');
        let field = memchr::memchr(b':', line).is_some_and(|colon| {
            colon > 0 && line[..colon].iter().all(|&c| (0x21..=0x7e).contains(&c))
        });
        if !(field || folded && !first) {
            return false;
        }
        first = false;
    }
    true
}

/// [`texts`] of a message that is the one text part `body` ([`single_part`]): HTML when
/// `html`.
pub(super) fn single_texts(body: &str, html: bool, hrefs: bool, budget: &mut Budget) -> Texts {
    let mut out = Texts::default();
    let read = |out: &mut Texts, room: usize, budget: &mut Budget| {
        if html {
            let h = html::without_images(body, MAX_HTML);
            let mut reduced = html::reduce_within(&h, room, budget);
            let keep = prefix(&reduced.text, room).len();
            reduced.text.truncate(keep);
            // The first text read is taken as it is, not copied.
            if out.text.is_empty() {
                out.text = reduced.text;
            } else {
                out.text.push_str(&reduced.text);
            }
            reduced.hrefs
        } else {
            let text = prefix(body, room);
            out.text.reserve(text.len() + 1);
            out.text.push_str(text);
            html::Hrefs::default()
        }
    };
    if !budget.spend(1) {
        return out;
    }
    let links = read(&mut out, MAX_TEXT, budget);
    if hrefs {
        out.hrefs = links;
    }
    out.text.push('\n');
    if out.text.trim().is_empty() {
        // As texts: the first text part not given as an attachment, read again.
        read(&mut out, MAX_TEXT, budget);
        out.text.push('\n');
    }
    out.hrefs.truncate(html::MAX_HREFS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail_parser::MessageParser;

    fn parse(raw: &str) -> Texts {
        let m = MessageParser::new().parse(raw.as_bytes()).expect("parses");
        texts(&m, true, &mut Budget::unlimited())
    }

    /// [`single_texts`] of `raw` when [`single_part`] takes it, and [`texts`] of its parse.
    fn both_ways(raw: &str) -> Option<(Texts, Texts)> {
        let parser = super::super::parser();
        let headers = parser.parse_headers(raw.as_bytes())?;
        let (html, body) = single_part(raw.as_bytes(), &headers)?;
        let fast = single_texts(body, html, true, &mut Budget::unlimited());
        let m = parser.parse(raw.as_bytes()).expect("parses");
        Some((fast, texts(&m, true, &mut Budget::unlimited())))
    }

    #[test]
    fn one_text_part_read_as_it_is_reads_as_parsed() {
        let bodies = [
            "plain words\r\nand more\r\n",
            "",
            "  \r\n",
            "<p>Hello <a href=\"https://x.example.com/a\">there</a></p>\r\n",
            "<p style=\"display:none\">hidden</p>   ",
            "Gr\u{fc}\u{df}e \u{200b}aus Wien\n> quoted\n",
        ];
        let heads = [
            "Subject: x\r\n",
            "Subject: x\r\nContent-Type: text/plain; charset=utf-8\r\n",
            "Subject: x\r\nContent-Type: text/html; charset=\"UTF-8\"\r\nContent-Transfer-Encoding: 8bit\r\n",
            "Subject: a folded\r\n subject\r\nContent-Type: text/html\r\n",
            "Content-Type: TEXT/PLAIN; charset=us-ascii\r\nContent-Transfer-Encoding: 7BIT\r\n",
        ];
        let mut taken = 0;
        for head in heads {
            for body in bodies {
                let raw = format!("{head}\r\n{body}");
                if let Some((fast, parsed)) = both_ways(&raw) {
                    assert_eq!(fast.text, parsed.text, "{raw:?}");
                    assert_eq!(fast.hrefs, parsed.hrefs, "{raw:?}");
                    taken += 1;
                }
            }
        }
        // Every head but the US-ASCII one with a non-ASCII body is taken.
        assert_eq!(taken, heads.len() * bodies.len() - 1);
    }

    #[test]
    fn other_messages_are_parsed() {
        for raw in [
            "Subject: x\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\r\nCaf\u{e9}\r\n",
            "Subject: x\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8=\r\n",
            "Subject: x\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3Db\r\n",
            "Subject: x\r\nContent-Type: text/enriched\r\n\r\nx\r\n",
            "Subject: x\r\nContent-Disposition: attachment\r\n\r\nx\r\n",
            "Subject: x\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nx\r\n--b--\r\n",
            "Subject: x\r\nnot a field line\r\n\r\nx\r\n",
            "Subject: x\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\nGr\u{fc}\u{df}e\r\n",
        ] {
            let headers = super::super::parser()
                .parse_headers(raw.as_bytes())
                .expect("parses");
            assert!(single_part(raw.as_bytes(), &headers).is_none(), "{raw:?}");
        }
        let raw = b"Subject: x\r\n\r\nbad \xff byte\r\n";
        let headers = super::super::parser().parse_headers(raw).expect("parses");
        assert!(single_part(raw, &headers).is_none(), "not UTF-8");
    }

    #[test]
    fn the_plain_alternative_is_preferred_and_html_links_still_read() {
        let t = parse(
            "Subject: x\r\nContent-Type: multipart/alternative; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nplain words\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>html words <a href=\"https://x.example.com/\">x</a></p>\r\n--b--\r\n",
        );
        assert_eq!(t.text.trim(), "plain words");
        assert_eq!(
            t.hrefs.iter().collect::<Vec<_>>(),
            ["https://x.example.com/"]
        );
    }

    #[test]
    fn html_only_is_reduced_to_text() {
        let t = parse(
            "Subject: x\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<html><style>p{}</style><p>Hello&nbsp;<b>there</b></p></html>\r\n",
        );
        assert_eq!(t.text.trim(), "Hello there");
    }

    #[test]
    fn transfer_encodings_and_charsets_are_decoded() {
        let t = parse(
            "Subject: x\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nCaf=E9 cr=E8me\r\n",
        );
        assert_eq!(t.text.trim(), "Café crème");
        let t = parse(
            "Subject: x\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\nR3LDvMOfZSBhdXMgV2llbg==\r\n",
        );
        assert_eq!(t.text.trim(), "Grüße aus Wien");
    }

    #[test]
    fn attachments_are_not_text() {
        let t = parse(
            "Subject: x\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n--b--\r\n",
        );
        assert_eq!(t.text, "");
        assert!(t.hrefs.is_empty());
    }

    #[test]
    fn an_image_placed_first_does_not_hide_the_text() {
        let t = parse(
            "Subject: x\r\nContent-Type: multipart/related; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>the text</p>\r\n--b\r\nContent-Type: text/plain\r\nContent-Disposition: attachment\r\n\r\nattached\r\n--b--\r\n",
        );
        assert_eq!(t.text.trim(), "the text");
    }

    #[test]
    fn text_is_bounded() {
        let body = "word ".repeat(MAX_TEXT / 2);
        let t = parse(&format!("Subject: x\r\n\r\n{body}\r\n"));
        assert!(t.text.len() <= MAX_TEXT + 1);
        assert!(prefix("é", 1).is_empty());
    }
}
