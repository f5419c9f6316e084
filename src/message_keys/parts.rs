//! The text a message shows its reader: its text parts decoded (mail-parser decodes the
//! transfer encoding and charset), one alternative of each, HTML reduced to text, within a
//! budget.

use super::html::{self, prefix};
use super::Budget;
use mail_parser::{Message, MimeHeaders, PartType};

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
    pub hrefs: Vec<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use mail_parser::MessageParser;

    fn parse(raw: &str) -> Texts {
        let m = MessageParser::new().parse(raw.as_bytes()).expect("parses");
        texts(&m, true, &mut Budget::unlimited())
    }

    #[test]
    fn the_plain_alternative_is_preferred_and_html_links_still_read() {
        let t = parse(
            "Subject: x\r\nContent-Type: multipart/alternative; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nplain words\r\n--b\r\nContent-Type: text/html\r\n\r\n<p>html words <a href=\"https://x.example.com/\">x</a></p>\r\n--b--\r\n",
        );
        assert_eq!(t.text.trim(), "plain words");
        assert_eq!(t.hrefs, ["https://x.example.com/"]);
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
