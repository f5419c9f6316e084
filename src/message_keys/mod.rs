//! Message keys: rate-limit keys read from the message itself, for campaigns that spread
//! one message over many accounts.
//!
//! Credential-stuffing spam logs in to many stolen accounts and sends a little from each;
//! what the copies share is the message: one template with another greeting, a tracking
//! token in each link, a number in the Subject, and the same link hosts. Three keys catch
//! that, each computed only when some limit uses it:
//!
//! - **fingerprint**: the message's text as a near-duplicate fingerprint, one key value per
//!   band of a MinHash signature ([`minhash`] has the parameters and their S-curve);
//!   copies of one template share at least one value, unrelated messages almost never do.
//! - **link_domains**: the registered domains (eTLD+1) its links point to ([`links`]).
//! - **subject_shape**: its Subject with numbers and random tokens masked.
//!
//! Everything here is pure and bounded: at most [`MAX_PARSED`] bytes of a message are
//! parsed, and in them at most [`MAX_BOUNDARY_LINES`] MIME boundaries; only the fields that
//! shape the MIME structure and the Subject are parsed, and the bodies of base64
//! attachments are left out before parsing (module `attachments`); [`parts::MAX_TEXT`] bytes of text
//! read, [`minhash::MAX_SHINGLES`] shingles hashed and [`minhash::SAMPLE`] of them
//! MinHashed, [`links::MAX_LINKS_READ`] links read; bad MIME gives fewer keys, never a
//! panic.
//! Every pass is linear in what it reads, and [`compute_within`] stops at a [`Budget`] of
//! time: the keys finished by then are kept, the one under way and those after it are not.
//!
//! The text the fingerprint reads is the author's own visible text (module [`reading`]):
//! the text parts (the plain alternative where there is one; HTML reduced to the text a
//! reader sees, CSS-hidden and same-colour text left out, images dropped before its byte
//! window), without quoted lines, forwarded or Outlook-quoted messages, signatures,
//! disclaimers and the organisation's learnt boilerplate ([`Boilerplate`]), then normalised
//! word by word (module `words`): invisible characters dropped, look-alike letters folded,
//! case-folded, links as their host, digit runs as `0`, random-looking tokens as `*`,
//! punctuation dropped.

mod attachments;
mod automatic;
pub mod boilerplate;
pub mod budget;
mod forwarded;
mod html;
mod invisible;
pub mod links;
pub mod minhash;
pub mod parts;
mod quotes;
pub mod reading;
mod signature;
pub mod subject;
mod visibility;
mod words;

pub use automatic::is_automatic;
pub use boilerplate::Boilerplate;
pub use budget::Budget;
pub use reading::{LeftOut, Told};

use mail_parser::{HeaderName, MessageParser};
use std::sync::OnceLock;

/// At most this many bytes of a message are parsed; the rest (in practice attachments after
/// the text) is not read. It bounds the time and memory of [`compute`] whatever the size.
pub const MAX_PARSED: usize = 4 * 1024 * 1024;

/// At most this many lines that start with `--` are parsed: every MIME part starts at such
/// a line (its boundary), so a message is parsed into at most about this many parts, and a
/// message of a hundred thousand tiny parts costs no more than one of this many. The text
/// the keys read comes first in every common layout.
pub const MAX_BOUNDARY_LINES: usize = 1_000;

/// At most this many bytes of the body of a message that is one plain text part are parsed:
/// enough for [`parts::MAX_TEXT`] bytes of text in any transfer encoding (quoted-printable
/// spends at most three bytes on one) and charset (UTF-32 spends four on a character).
pub const MAX_PLAIN: usize = 4 * parts::MAX_TEXT;

/// At most this many bytes of a message's header section are parsed (a header section of
/// hundreds of kilobytes is crafted: a real one holds a few kilobytes of trace fields and
/// signatures). Past it the section is ended and the body follows: the fields after the
/// cut, or the rest of a longer one, are not read.
pub const MAX_HEADER: usize = 64 * 1024;

/// The part of `message` that is parsed: [`parse_window`], its header section cut to
/// [`MAX_HEADER`] bytes, the bodies of its base64 attachments left out (copied only
/// then). Linear in the message's length.
fn parsed_part(message: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut raw = header_cut(parse_window(message));
    if let Some(body) = attachments::header_end(&raw, 0, MAX_HEADER + 4) {
        if attachments::is_plain_text(&raw[..body]) && raw.len() > body + MAX_PLAIN {
            // One plain text part: only its first parts::MAX_TEXT bytes are read.
            raw = match raw {
                std::borrow::Cow::Borrowed(r) => r[..body + MAX_PLAIN].into(),
                std::borrow::Cow::Owned(mut r) => {
                    r.truncate(body + MAX_PLAIN);
                    r.into()
                }
            };
        }
    }
    match attachments::bodies_left_out(&raw) {
        Some(kept) => kept.into(),
        None => raw,
    }
}

/// `raw` with its header section cut to [`MAX_HEADER`] bytes (copied only then).
fn header_cut(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if raw.len() <= MAX_HEADER {
        return raw.into();
    }
    // The body starts after the first empty line.
    let body = [&b"\n\r\n"[..], b"\n\n"]
        .iter()
        .filter_map(|end| memchr::memmem::find(raw, end).map(|i| i + end.len()))
        .min();
    match body {
        Some(body) if body <= MAX_HEADER => raw.into(),
        _ => {
            let body = &raw[body.unwrap_or(raw.len())..];
            let mut cut = Vec::with_capacity(MAX_HEADER + 4 + body.len());
            cut.extend_from_slice(&raw[..MAX_HEADER]);
            cut.extend_from_slice(b"\r\n\r\n");
            cut.extend_from_slice(body);
            cut.into()
        }
    }
}

/// The part of `message` that is parsed, its header section aside: its first [`MAX_PARSED`]
/// bytes, cut before its `MAX_BOUNDARY_LINES + 1`-th line that starts with `--`. Linear in
/// what it returns.
fn parse_window(message: &[u8]) -> &[u8] {
    let raw = &message[..message.len().min(MAX_PARSED)];
    let mut seen = 0;
    let mut from = 0;
    while let Some(k) = memchr::memmem::find(&raw[from..], b"\n--") {
        let line = from + k + 1;
        seen += 1;
        if seen > MAX_BOUNDARY_LINES {
            return &raw[..line];
        }
        from = line;
    }
    raw
}

/// The parser of message keys: the fields that shape the MIME structure (`Content-Type`,
/// `Content-Disposition`, `Content-Transfer-Encoding`) and the Subject are parsed, every
/// other field is passed over unread (addresses, dates and message ids are never used).
fn parser() -> &'static MessageParser {
    static PARSER: OnceLock<MessageParser> = OnceLock::new();
    PARSER.get_or_init(|| {
        MessageParser::new()
            .header_content_type(HeaderName::ContentType)
            .header_content_type(HeaderName::ContentDisposition)
            .header_text(HeaderName::ContentTransferEncoding)
            .header_text(HeaderName::Subject)
            .default_header_ignore()
    })
}

/// Which keys to compute: only those some limit uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    /// The near-duplicate fingerprint's band values.
    pub fingerprint: bool,
    /// The registered domains of the links.
    pub link_domains: bool,
    /// The Subject's shape.
    pub subject_shape: bool,
}

impl Wanted {
    /// Every key.
    pub const ALL: Wanted = Wanted {
        fingerprint: true,
        link_domains: true,
        subject_shape: true,
    };

    /// Whether no key is wanted (and [`compute`] does nothing).
    pub fn is_none(self) -> bool {
        !(self.fingerprint || self.link_domains || self.subject_shape)
    }
}

/// The keys of one message. A key not wanted, or not computable (no text, fewer than
/// [`minhash::MIN_WORDS`] words, no links, no Subject), is empty or None.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageKeys {
    /// One value per band of the text's MinHash signature, `b{band}:{16 hex digits}`
    /// ([`minhash::BANDS`] of them), then, when the message has a Subject, one per band of
    /// its word-pair signature joined to the Subject's shape, `s{band}:{16 hex digits}`
    /// ([`minhash::SUBJECT_BANDS`]); or none.
    pub fingerprint: Vec<String>,
    /// The distinct registered domains of the message's `http(s)` links, sorted, at most
    /// [`links::MAX_LINK_DOMAINS`], exempt ones left out.
    pub link_domains: Vec<String>,
    /// The Subject case-folded, spaces collapsed, digit runs as `0`, random tokens as `*`.
    pub subject_shape: Option<String>,
    /// The message links somewhere, and only to exempt domains (with `link_domains`
    /// wanted): own bulk mail, which the caller may leave without keys.
    pub only_exempt_links: bool,
    /// With the fingerprint: the hashes of the blocks of the author's text (lines of at
    /// least [`boilerplate::MIN_BLOCK_WORDS`] words), for [`Boilerplate::observe`].
    pub blocks: Vec<u64>,
    /// With the fingerprint: the lines left out as not the author's (at most
    /// [`reading::MAX_TOLD`]), and why.
    pub left_out: Vec<Told>,
    /// With the fingerprint: the quoted lines left out.
    pub quoted_lines: usize,
}

/// Computes the `wanted` keys of `message` (the whole message as received: header section,
/// blank line, body; CRLF line ends) in bounded time and memory. Links to a domain of
/// `exempt_link_domains`, or to a subdomain of one, are left out of `link_domains`.
pub fn compute(message: &[u8], wanted: Wanted, exempt_link_domains: &[String]) -> MessageKeys {
    compute_within(
        message,
        wanted,
        exempt_link_domains,
        None,
        &mut Budget::unlimited(),
    )
}

/// [`compute`], the lines that `learnt` (the organisation's boilerplate, and today's day
/// number, [`boilerplate::day_of`]) holds left out of the fingerprint.
pub fn compute_learnt(
    message: &[u8],
    wanted: Wanted,
    exempt_link_domains: &[String],
    learnt: Option<(&Boilerplate, u32)>,
) -> MessageKeys {
    compute_within(
        message,
        wanted,
        exempt_link_domains,
        learnt,
        &mut Budget::unlimited(),
    )
}

/// [`compute_learnt`] within `budget`: once it is spent ([`Budget::exceeded`]), the keys
/// finished before are kept (the Subject's shape first, then the fingerprint, then the link
/// domains), and the key under way and those after it stay empty.
pub fn compute_within(
    message: &[u8],
    wanted: Wanted,
    exempt_link_domains: &[String],
    learnt: Option<(&Boilerplate, u32)>,
    budget: &mut Budget,
) -> MessageKeys {
    let mut keys = MessageKeys::default();
    if wanted.is_none() {
        return keys;
    }
    let raw = parsed_part(message);
    let parser = parser();
    let needs_body = wanted.fingerprint || wanted.link_domains;
    // One text part that needs no decoding is read as it is; any other body is parsed.
    let headers = parser.parse_headers(&*raw);
    let single = match &headers {
        Some(h) if needs_body => parts::single_part(&raw, h),
        _ => None,
    };
    let parsed = if needs_body && single.is_none() {
        parser.parse(&*raw)
    } else {
        headers
    };
    let Some(parsed) = parsed else {
        return keys;
    };
    if !budget.check() {
        return keys;
    }
    let shape = if wanted.subject_shape || wanted.fingerprint {
        parsed.subject().and_then(subject::shape)
    } else {
        None
    };
    if wanted.subject_shape {
        keys.subject_shape = shape.clone();
    }
    if !needs_body {
        return keys;
    }
    let texts = match single {
        Some((html, body)) => parts::single_texts(body, html, wanted.link_domains, budget),
        None => parts::texts(&parsed, wanted.link_domains, budget),
    };
    if budget.exceeded() {
        return keys;
    }
    if wanted.fingerprint {
        // The reading is linear in the text (at most parts::MAX_TEXT octets), charged to
        // the budget before and checked after.
        if !budget.spend_octets(texts.text.len()) {
            return keys;
        }
        let reading = reading::read(&texts.text, learnt);
        if !budget.check() {
            return keys;
        }
        keys.fingerprint = minhash::fingerprint(&reading.words, shape.as_deref());
        keys.blocks = reading.blocks;
        keys.left_out = reading.told;
        keys.quoted_lines = reading.quoted;
        if !budget.check() {
            keys.fingerprint.clear();
            keys.blocks.clear();
            return keys;
        }
    }
    if wanted.link_domains {
        let mut domains = links::LinkDomains::new(exempt_link_domains);
        for href in texts.hrefs.iter() {
            if !budget.spend(1) {
                return keys;
            }
            domains.add_url(href);
        }
        domains.add_text_within(&texts.text, budget);
        if budget.exceeded() {
            return keys;
        }
        keys.only_exempt_links = domains.only_exempt();
        keys.link_domains = domains.finish();
    }
    keys
}

/// The shingle hashes of a plain `text` as the fingerprint reads it (sorted, distinct):
/// the sets whose Jaccard similarity the bands estimate, for measuring them.
pub fn text_shingles(text: &str) -> Vec<u64> {
    let words = reading::read(text, None).words;
    let mut s = minhash::shingles(&words);
    s.sort_unstable();
    s.dedup();
    s
}

/// The fingerprint's band values of a plain `text` (as [`compute`] gives them for a
/// message whose only text part it is).
pub fn text_bands(text: &str) -> Vec<String> {
    minhash::fingerprint(&reading::read(text, None).words, None)
}

/// The fingerprint's band values of a plain `text` sent under `subject`: the text's bands
/// and its Subject-joined bands (as [`compute`] gives them for a message of that Subject
/// whose only text part it is).
pub fn text_bands_with_subject(text: &str, subject: &str) -> Vec<String> {
    let shape = subject::shape(subject);
    minhash::fingerprint(&reading::read(text, None).words, shape.as_deref())
}

#[cfg(test)]
mod tests;
