//! HTML reduced to the text a reader sees, and the targets of its links.
//!
//! Tags go; the contents of `script`, `style`, `head`, `title` and `noscript` go with
//! them; block elements end a line; character references are decoded. Text inside
//! `blockquote` comes out as quoted lines (`> `), so that quotes in HTML replies are left out
//! like quotes in plain ones. Text the reader cannot see goes too: inside an element that
//! inline CSS or the `hidden` attribute hides, or drawn in (nearly) the colour of its
//! background (module `visibility`). The quoted or forwarded part of a reply in the forms
//! mail clients mark it (Gmail's `gmail_quote`, Outlook's `divRplyFwdMsg` and its
//! `border-top` separator, Thunderbird's `moz-cite-prefix`) ends the author's text: nothing
//! after it is read as text.

use super::visibility::{parse_attribute_color, parse_style, Rgb, Style, BLACK, WHITE};
use super::words::space_at;

use super::Budget;

/// What the reduction does with an element, from its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Kind {
    /// Its contents are not shown: `script`, `style`, `head`, `title`, `noscript`.
    hidden: bool,
    /// It starts or ends a line (`br`, `p`, `div`, `tr`, `li`, `ul`, `ol`, `table`,
    /// `h1`–`h6`, `hr`, `blockquote`, `pre`, `section`, `article`, `header`, `footer`).
    block: bool,
    /// It has no end tag (`br`, `img`, `hr`, `meta`, `link`, `input`, `wbr`, `area`,
    /// `base`, `col`, `embed`, `source`, `track`).
    void: bool,
    /// A link: `a` or `area`.
    link: bool,
    /// `blockquote`.
    quote: bool,
    /// `p` or `li`, whose end tags are optional.
    paragraph: bool,
    /// `font`, whose `color` attribute colours its text.
    font: bool,
    /// `div`.
    div: bool,
}

impl Kind {
    /// The kind of the element named `name` (in any case).
    fn of(name: &str) -> Kind {
        let mut buf = [0u8; 10];
        if name.is_empty() || name.len() > buf.len() {
            return Kind::default();
        }
        buf[..name.len()].copy_from_slice(name.as_bytes());
        buf.make_ascii_lowercase();
        let block = Kind {
            block: true,
            ..Kind::default()
        };
        let void = Kind {
            void: true,
            ..Kind::default()
        };
        match &buf[..name.len()] {
            b"script" | b"style" | b"head" | b"title" | b"noscript" => Kind {
                hidden: true,
                ..Kind::default()
            },
            b"br" | b"hr" => Kind {
                void: true,
                ..block
            },
            b"p" | b"li" => Kind {
                paragraph: true,
                ..block
            },
            b"div" => Kind { div: true, ..block },
            b"blockquote" => Kind {
                quote: true,
                ..block
            },
            b"tr" | b"ul" | b"ol" | b"table" | b"h1" | b"h2" | b"h3" | b"h4" | b"h5" | b"h6"
            | b"pre" | b"section" | b"article" | b"header" | b"footer" => block,
            b"img" | b"meta" | b"link" | b"input" | b"wbr" | b"base" | b"col" | b"embed"
            | b"source" | b"track" => void,
            b"area" => Kind { link: true, ..void },
            b"a" => Kind {
                link: true,
                ..Kind::default()
            },
            b"font" => Kind {
                font: true,
                ..Kind::default()
            },
            _ => Kind::default(),
        }
    }
}

/// At most this many elements are tracked open (deeper ones inherit their parent's
/// visibility).
const MAX_DEPTH: usize = 256;

/// At most this many link targets are taken from one document.
pub(super) const MAX_HREFS: usize = 10_000;

/// `html` without its `<img …>` tags and without the payload of its `data:` URIs, cut to
/// at most `max` bytes (at a character boundary): an inline image placed before the text
/// must not push the text out of the bytes read. Linear in what it reads: `html` is read
/// only until `max` bytes are kept.
pub(super) fn without_images(html: &str, max: usize) -> std::borrow::Cow<'_, str> {
    let b = html.as_bytes();
    let starts_image = |i: usize| {
        b.len() >= i + 4
            && b[i..i + 4].eq_ignore_ascii_case(b"<img")
            && b.get(i + 4).is_none_or(|c| !c.is_ascii_alphanumeric())
    };
    let starts_data = |i: usize| {
        b.len() >= i + 5
            && b[i..i + 5].eq_ignore_ascii_case(b"data:")
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
    };
    let mut out: Option<String> = None;
    // The bytes of `html` before `copied` are dealt with: kept in `out` or dropped.
    let mut copied = 0;
    let mut dropped = 0;
    // Found from their `<` before an `i` and their `:` after an `a`.
    for c in Candidates::new(b) {
        if c < copied {
            continue;
        }
        // A `data:` URI starts four bytes before its colon.
        if c.saturating_sub(4).max(copied) - dropped >= max {
            break;
        }
        let (start, end) = if b[c] == b'<' && starts_image(c) {
            let end = memchr::memchr(b'>', &b[c..]).map_or(b.len(), |e| c + e + 1);
            (c, end)
        } else if b[c] == b':' && c >= 4 && c - 4 >= copied && starts_data(c - 4) {
            let end = b[c..]
                .iter()
                .position(|&x| matches!(x, b'"' | b'\'' | b')' | b'>') || x.is_ascii_whitespace())
                .map_or(b.len(), |e| c + e);
            (c - 4, end)
        } else {
            continue;
        };
        out.get_or_insert_with(|| String::with_capacity(html.len().min(max)))
            .push_str(&html[copied..start]);
        dropped += end - start;
        copied = end;
    }
    match out {
        None => std::borrow::Cow::Borrowed(prefix(html, max)),
        Some(mut out) => {
            let room = max.saturating_sub(out.len());
            out.push_str(prefix(&html[copied..], room));
            std::borrow::Cow::Owned(out)
        }
    }
}

/// Whether byte `k` of `b` may start an image or a data URI: a `<` before an `i`, or a `:`
/// after an `a` (in any case).
#[inline]
fn is_candidate(b: &[u8], k: usize) -> bool {
    match b[k] {
        b'<' => b.get(k + 1).is_some_and(|&n| n | 0x20 == b'i'),
        b':' => k > 0 && b[k - 1] | 0x20 == b'a',
        _ => false,
    }
}

/// The positions of `b` where an image or a data URI may start ([`is_candidate`]), in
/// order. 16 bytes are looked at a time, each with its neighbours, and each block's hits
/// are read from one bit mask: the many `<` of other tags and `:` of styles are no hits.
struct Candidates<'b> {
    b: &'b [u8],
    /// Where the block of `mask` starts.
    base: usize,
    /// The hits of the block at `base` not yet given, one bit each.
    mask: u32,
    /// Where the next block starts.
    next: usize,
}

impl<'b> Candidates<'b> {
    fn new(b: &'b [u8]) -> Self {
        Candidates {
            b,
            base: 0,
            mask: 0,
            next: 0,
        }
    }

    /// The hit mask of the 16 bytes at `base`, which has a byte before it and one after.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn block_mask(&self, base: usize) -> u32 {
        use std::arch::x86_64::{
            __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        assert!(base >= 1 && base + 17 <= self.b.len());
        // SAFETY: SSE2 is part of every x86_64 target, so these instructions always exist;
        // the loads read bytes `base - 1` to `base + 16` of `b`, all in it (asserted), with
        // no alignment requirement.
        unsafe {
            let at = self.b.as_ptr().add(base);
            let v = _mm_loadu_si128(at.cast::<__m128i>());
            let after = _mm_loadu_si128(at.add(1).cast::<__m128i>());
            let before = _mm_loadu_si128(at.sub(1).cast::<__m128i>());
            let case = _mm_set1_epi8(0x20);
            let image = _mm_and_si128(
                _mm_cmpeq_epi8(v, _mm_set1_epi8(b'<' as i8)),
                _mm_cmpeq_epi8(_mm_or_si128(after, case), _mm_set1_epi8(b'i' as i8)),
            );
            let data = _mm_and_si128(
                _mm_cmpeq_epi8(v, _mm_set1_epi8(b':' as i8)),
                _mm_cmpeq_epi8(_mm_or_si128(before, case), _mm_set1_epi8(b'a' as i8)),
            );
            _mm_movemask_epi8(_mm_or_si128(image, data)) as u32
        }
    }

    /// The hit mask of the bytes `base..end`, byte by byte.
    #[inline]
    fn block_mask_portable(&self, base: usize, end: usize) -> u32 {
        (base..end).fold(0, |m, k| {
            m | u32::from(is_candidate(self.b, k)) << (k - base)
        })
    }
}

impl Iterator for Candidates<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            if self.next >= self.b.len() {
                return None;
            }
            self.base = self.next;
            let end = (self.base + 16).min(self.b.len());
            #[cfg(target_arch = "x86_64")]
            {
                self.mask = if self.base >= 1 && self.base + 17 <= self.b.len() {
                    self.block_mask(self.base)
                } else {
                    self.block_mask_portable(self.base, end)
                };
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                self.mask = self.block_mask_portable(self.base, end);
            }
            self.next = end;
        }
        let hit = self.base + self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(hit)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends at a character boundary.
pub(super) fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The text of one HTML document and its link targets.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Reduced {
    /// The visible text, lines ended by block elements.
    pub text: String,
    /// The `href` values of `a` and `area` elements, references decoded.
    pub hrefs: Hrefs,
}

/// Link targets in order, their text kept one after the other in one string (a string
/// each would cost an allocation each).
#[derive(Debug, Default, PartialEq)]
pub(super) struct Hrefs {
    /// The targets, one after the other.
    text: String,
    /// Where each target ends in `text`.
    ends: Vec<usize>,
}

impl Hrefs {
    /// How many targets there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Adds the target written `raw`, its references decoded.
    fn push_decoded(&mut self, raw: &str) {
        decode_references_into(&mut self.text, raw);
        self.ends.push(self.text.len());
    }

    /// Adds the targets of `other` after these.
    pub fn extend(&mut self, other: Hrefs) {
        if self.is_empty() {
            *self = other;
            return;
        }
        let offset = self.text.len();
        self.text.push_str(&other.text);
        self.ends.extend(other.ends.iter().map(|e| e + offset));
    }

    /// Keeps the first `n` targets.
    pub fn truncate(&mut self, n: usize) {
        if n < self.ends.len() {
            self.text
                .truncate(n.checked_sub(1).map_or(0, |last| self.ends[last]));
            self.ends.truncate(n);
        }
    }

    /// The targets, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.text[start..end])
    }
}

/// [`reduce_within`] without a budget.
#[cfg(test)]
pub(super) fn reduce(html: &str, max_text: usize) -> Reduced {
    reduce_within(html, max_text, &mut Budget::unlimited())
}

/// Reduces `html` to its text (at most about `max_text` bytes of it; the link targets are
/// still read after that) and link targets (at most [`MAX_HREFS`]). Malformed HTML is read
/// as far as it makes sense; nothing fails. Stops where `budget` runs out, with what was
/// reduced before.
pub(super) fn reduce_within(html: &str, max_text: usize, budget: &mut Budget) -> Reduced {
    // Room for text as long as the document (bounded by `max_text`): never grown.
    let mut out = Reduced {
        text: String::with_capacity(html.len().min(max_text).saturating_add(64)),
        ..Reduced::default()
    };
    let mut line = Line {
        start: true,
        ..Line::default()
    };
    let mut open = Open::default();
    let mut rest = html;
    while !rest.is_empty() {
        let full = out.text.len() >= max_text || open.cut;
        if full && out.hrefs.len() >= MAX_HREFS {
            break;
        }
        // Tags often follow one another: the search is made only when text comes first.
        let lt = if rest.as_bytes()[0] == b'<' {
            0
        } else {
            memchr::memchr(b'<', rest.as_bytes()).unwrap_or(rest.len())
        };
        if !budget.spend_octets(lt) {
            break;
        }
        if !full && open.visible() {
            push_text(&mut out.text, &rest[..lt], &mut line);
        }
        rest = &rest[lt..];
        if rest.is_empty() {
            break;
        }
        if rest.as_bytes().get(..4) == Some(b"<!--") {
            let after = &rest[4..];
            rest = after.find("-->").map_or("", |e| &after[e + 3..]);
            continue;
        }
        let Some(tag) = Tag::read(rest) else {
            // A '<' that opens no tag is text.
            if !full && open.visible() {
                push_text(&mut out.text, "<", &mut line);
            }
            rest = &rest[1..];
            continue;
        };
        rest = &rest[tag.len..];
        if !tag.closing && tag.kind.hidden {
            rest = skip_element(rest, tag.name);
            continue;
        }
        if full {
            // No more text is read: only the links are, whatever their element shows.
            if !tag.closing && tag.kind.link && out.hrefs.len() < MAX_HREFS {
                if let Some(href) = tag.read_attributes().href {
                    out.hrefs.push_decoded(href);
                }
            }
            continue;
        }
        // Attributes of ASCII whitespace only name nothing (nor do others of whitespace
        // only, which are read).
        let blank = |c: u8| matches!(c, b'\t'..=b'\r' | b' ');
        let attributes = if tag.closing || tag.attributes.bytes().all(blank) {
            Attributes::default()
        } else {
            tag.read_attributes()
        };
        open.tag(&tag, &attributes);
        if tag.kind.quote {
            line.quote_depth = if tag.closing {
                line.quote_depth.saturating_sub(1)
            } else {
                line.quote_depth + 1
            };
        }
        if tag.kind.block {
            if !line.start {
                out.text.push('\n');
            }
            line.start = true;
            line.space = false;
        }
        if !tag.closing && tag.kind.link && out.hrefs.len() < MAX_HREFS {
            if let Some(href) = attributes.href {
                out.hrefs.push_decoded(href);
            }
        }
    }
    out
}

/// Appends text found between tags, references decoded: runs of whitespace (newlines
/// included) become one space, and each line inside a blockquote starts with `> `. Text
/// split by inline tags (`V<b></b>iagra`) stays one word.
fn push_text(out: &mut String, raw: &str, line: &mut Line) {
    // Whitespace only (between block tags, most often): one space at most.
    if raw.bytes().all(|c| matches!(c, b'\t'..=b'\r' | b' ')) {
        if !raw.is_empty() {
            line.space = !line.start;
        }
        return;
    }
    // Decoded into a new string only when there is a reference to decode.
    let decoded;
    let text = if memchr::memchr(b'&', raw.as_bytes()).is_some() {
        decoded = decode_references(raw);
        decoded.as_str()
    } else {
        raw
    };
    // Runs of visible characters and single spaces are copied whole.
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let (space, len) = super::words::space_at(text, i);
        if space {
            line.space = !line.start;
            i += len;
            continue;
        }
        if line.start {
            for _ in 0..line.quote_depth {
                out.push_str("> ");
            }
            line.start = false;
        } else if line.space {
            out.push(' ');
        }
        line.space = false;
        // The run goes on over visible ASCII and over single spaces between it (copied as
        // they are: one space reads as one space); it ends before any other whitespace.
        let run = visible_run_end(b, i).max(i + len);
        out.push_str(&text[i..run]);
        i = run;
    }
}

/// The end of the run of visible ASCII (`!` to DEL) and single spaces between it that
/// starts at `k` of `b`: eight bytes looked at a time, a space every few words.
fn visible_run_end(b: &[u8], mut k: usize) -> usize {
    loop {
        k = super::words::visible_ascii_end(b, k);
        // A byte that is not visible ASCII: the run goes on over a single space.
        if b.get(k) == Some(&b' ') && b.get(k + 1).is_some_and(|&n| n > b' ' && n < 0x80) {
            k += 2;
        } else {
            return k;
        }
    }
}

/// Where the output stands.
#[derive(Default)]
struct Line {
    /// Nothing written on the current line yet.
    start: bool,
    /// Whitespace seen since the last character written.
    space: bool,
    /// Blockquotes open.
    quote_depth: usize,
}

/// The elements open, with what their style says about their text.
#[derive(Default)]
struct Open<'a> {
    /// Name, hidden, text colour, background colour of each open element, outermost first.
    stack: Vec<Frame<'a>>,
    /// A quoted or forwarded part began: no text is read after it.
    cut: bool,
    /// The last `style` attribute read and what it says: templates repeat one inline
    /// style on many elements, read once while it repeats.
    last_style: Option<(&'a str, Style)>,
}

/// One open element.
struct Frame<'a> {
    /// Its name as written (compared without regard to case).
    name: &'a str,
    hidden: bool,
    color: Rgb,
    background: Rgb,
}

impl<'a> Open<'a> {
    /// Whether text here is shown: no open element hides it and its colour differs from
    /// its background.
    fn visible(&self) -> bool {
        self.stack
            .last()
            .is_none_or(|f| !f.hidden && !f.color.near(f.background))
    }

    /// What the inline style `s` says: the last one's reading when `s` is written as it
    /// was.
    fn style(&mut self, s: &'a str) -> Style {
        match self.last_style {
            Some((last, style)) if last == s => style,
            _ => {
                let style = parse_style(s);
                self.last_style = Some((s, style));
                style
            }
        }
    }

    /// Opens or closes an element for `tag`.
    fn tag(&mut self, tag: &Tag<'a>, attributes: &Attributes<'a>) {
        if tag.name.is_empty() {
            return;
        }
        if tag.closing {
            if let Some(i) = self
                .stack
                .iter()
                .rposition(|f| f.name.eq_ignore_ascii_case(tag.name))
            {
                self.stack.truncate(i);
            }
            return;
        }
        if is_quote_marker(tag, attributes) {
            self.cut = true;
        }
        if tag.kind.void || tag.self_closing() {
            return;
        }
        // A new paragraph or list item ends the one open (their end tags are optional).
        if tag.kind.paragraph
            && self
                .stack
                .last()
                .is_some_and(|f| f.name.eq_ignore_ascii_case(tag.name))
        {
            self.stack.pop();
        }
        if self.stack.len() >= MAX_DEPTH {
            return;
        }
        let (parent_hidden, parent_color, parent_background) = self
            .stack
            .last()
            .map_or((false, BLACK, WHITE), |f| (f.hidden, f.color, f.background));
        let style = attributes
            .style
            .map_or_else(Style::default, |s| self.style(s));
        let background = style
            .background
            .or_else(|| attributes.bgcolor.and_then(parse_attribute_color))
            .unwrap_or(parent_background);
        let color = style
            .color
            .or_else(|| {
                tag.kind
                    .font
                    .then(|| attributes.color.and_then(parse_attribute_color))
                    .flatten()
            })
            .unwrap_or(parent_color);
        self.stack.push(Frame {
            name: tag.name,
            hidden: parent_hidden || style.hidden || attributes.hidden.is_some(),
            color,
            background,
        });
    }
}

/// Whether `tag` opens the quoted or forwarded part of a reply as mail clients mark it:
/// Gmail's `gmail_quote`, Thunderbird's `moz-cite-prefix`, Outlook's `divRplyFwdMsg` and
/// the top border Outlook draws above the forwarded header block.
fn is_quote_marker(tag: &Tag<'_>, attributes: &Attributes<'_>) -> bool {
    if attributes.class.is_none() && attributes.id.is_none() && !tag.kind.div {
        return false;
    }
    let class = attributes.class.unwrap_or("");
    let id = attributes.id.unwrap_or("");
    if class
        .split_whitespace()
        .any(|c| c == "gmail_quote" || c == "moz-cite-prefix" || c == "gmail_quote_container")
        || id.starts_with("divRplyFwdMsg")
        || id == "appendonsend"
    {
        return true;
    }
    if !tag.kind.div {
        return false;
    }
    let style = attributes.style.unwrap_or("").as_bytes();
    contains_ignore_case(style, b"border-top:solid")
        || contains_ignore_case(style, b"border-top: solid")
}

/// Whether `haystack` holds `needle` (lower-case ASCII) in any case.
fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The rest of the document after the end tag of `name` (all of it gone when there is none).
fn skip_element<'a>(rest: &'a str, name: &str) -> &'a str {
    let b = rest.as_bytes();
    let mut from = 0;
    while let Some(k) = memchr::memmem::find(&b[from..], b"</") {
        let at = from + k + 2;
        let end = at + name.len();
        if end <= b.len() && b[at..end].eq_ignore_ascii_case(name.as_bytes()) {
            return memchr::memchr(b'>', &b[end..]).map_or("", |g| &rest[end + g + 1..]);
        }
        from = at;
    }
    ""
}

/// The attributes of one tag that the reduction reads.
#[derive(Default)]
struct Attributes<'a> {
    style: Option<&'a str>,
    bgcolor: Option<&'a str>,
    color: Option<&'a str>,
    class: Option<&'a str>,
    id: Option<&'a str>,
    href: Option<&'a str>,
    hidden: Option<&'a str>,
}

/// One tag: `<name attributes>` or `</name>`.
struct Tag<'a> {
    name: &'a str,
    /// What its name makes it.
    kind: Kind,
    closing: bool,
    attributes: &'a str,
    /// Its length in the source, `<` to `>` included.
    len: usize,
}

impl<'a> Tag<'a> {
    /// The tag at the start of `s` (which starts with `<`), or None when what follows the
    /// `<` is no tag name. A tag that is never closed runs to the end.
    fn read(s: &'a str) -> Option<Tag<'a>> {
        // Its first bytes looked at as bytes (they are ASCII or no tag).
        let closing = s.as_bytes().get(1) == Some(&b'/');
        let body = &s[1 + usize::from(closing)..];
        let b = body.as_bytes();
        let declaration = matches!(b.first(), Some(b'!' | b'?'));
        if !declaration && !b.first().is_some_and(u8::is_ascii_alphabetic) {
            return None;
        }
        let name_len = b
            .iter()
            .position(|c| !c.is_ascii_alphanumeric())
            .unwrap_or(b.len());
        // The end: the first '>' outside quotes, found from one quote or '>' to the next.
        let mut end = b.len();
        let mut at = name_len;
        while let Some(k) = find3(&b[at..], b'>', b'"', b'\'') {
            let i = at + k;
            if b[i] == b'>' {
                end = i;
                break;
            }
            match find3(&b[i + 1..], b[i], b[i], b[i]) {
                Some(close) => at = i + 1 + close + 1,
                None => break,
            }
        }
        let offset = s.len() - body.len();
        let name = if declaration { "" } else { &body[..name_len] };
        Some(Tag {
            name,
            kind: Kind::of(name),
            closing,
            attributes: &body[name_len..end],
            len: (offset + end + 1).min(s.len()),
        })
    }

    /// Whether the tag ends with `/>`.
    fn self_closing(&self) -> bool {
        self.attributes.trim_end().as_bytes().last() == Some(&b'/')
    }

    /// The attributes the reduction reads, in one pass (the first of each name).
    fn read_attributes(&self) -> Attributes<'a> {
        let mut a = Attributes::default();
        self.each_attribute(|name, value| {
            let slot = match name.len() {
                2 if name.eq_ignore_ascii_case("id") => &mut a.id,
                4 if name.eq_ignore_ascii_case("href") => &mut a.href,
                5 if name.eq_ignore_ascii_case("style") => &mut a.style,
                5 if name.eq_ignore_ascii_case("class") => &mut a.class,
                5 if name.eq_ignore_ascii_case("color") => &mut a.color,
                6 if name.eq_ignore_ascii_case("hidden") => &mut a.hidden,
                7 if name.eq_ignore_ascii_case("bgcolor") => &mut a.bgcolor,
                _ => return,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        });
        a
    }

    /// Calls `f` with the name and raw value (quoted or not, references not yet decoded;
    /// empty when there is none) of each attribute, in order. Walked byte by byte, other
    /// characters decoded only where one starts ([`space_at`]).
    fn each_attribute(&self, mut f: impl FnMut(&'a str, &'a str)) {
        let s = self.attributes;
        let b = s.as_bytes();
        // The end of the run of whitespace (and, with `slash`, of '/') from `i`.
        let skip_spaces = |mut i: usize, slash: bool| {
            while i < b.len() {
                if slash && b[i] == b'/' {
                    i += 1;
                    continue;
                }
                match space_at(s, i) {
                    (true, len) => i += len,
                    _ => break,
                }
            }
            i
        };
        // The end of the run from `i` up to whitespace (or, with `stops`, '=' or '/').
        let run_end = |mut i: usize, stops: bool| {
            while i < b.len() {
                if stops && matches!(b[i], b'=' | b'/') {
                    break;
                }
                match space_at(s, i) {
                    (false, len) => i += len,
                    _ => break,
                }
            }
            i
        };
        let mut i = 0;
        loop {
            i = skip_spaces(i, true);
            if i == b.len() {
                return;
            }
            // A stray '=' names nothing: it is passed over.
            let name_end = run_end(i, true).max(i + 1);
            let name = &s[i..name_end];
            i = skip_spaces(name_end, false);
            let value = if b.get(i) == Some(&b'=') {
                i = skip_spaces(i + 1, false);
                match b.get(i) {
                    Some(&q @ (b'"' | b'\'')) => {
                        let inner = i + 1;
                        let close = memchr::memchr(q, &b[inner..]).map_or(b.len(), |k| inner + k);
                        i = (close + 1).min(b.len());
                        &s[inner..close]
                    }
                    _ => {
                        let start = i;
                        i = run_end(i, false);
                        &s[start..i]
                    }
                }
            } else {
                ""
            };
            f(name, value);
        }
    }

    /// [`Tag::each_attribute`] as it was written on `str` methods: what the byte walk is
    /// tested against.
    #[cfg(test)]
    fn each_attribute_by_chars(&self, mut f: impl FnMut(&'a str, &'a str)) {
        let mut rest = self.attributes;
        loop {
            rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
            if rest.is_empty() {
                return;
            }
            let name_end = match rest
                .find(|c: char| c.is_whitespace() || c == '=' || c == '/')
                .unwrap_or(rest.len())
            {
                0 => rest.chars().next().map_or(0, char::len_utf8),
                n => n,
            };
            let name = &rest[..name_end];
            rest = rest[name_end..].trim_start();
            let value = if let Some(v) = rest.strip_prefix('=') {
                let v = v.trim_start();
                let (value, after) = match v.chars().next() {
                    Some(q @ ('"' | '\'')) => {
                        let inner = &v[1..];
                        let close =
                            memchr::memchr(q as u8, inner.as_bytes()).unwrap_or(inner.len());
                        (&inner[..close], &inner[(close + 1).min(inner.len())..])
                    }
                    _ => {
                        let e = v.find(char::is_whitespace).unwrap_or(v.len());
                        (&v[..e], &v[e..])
                    }
                };
                rest = after;
                value
            } else {
                ""
            };
            f(name, value);
        }
    }
}

/// The first of the bytes `a`, `b`, `c` in `hay`: its first bytes looked at one by one (an
/// attribute value is short, and a vector search costs more to start than that), the rest
/// by memchr.
fn find3(hay: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
    const SHORT: usize = 32;
    let head = &hay[..hay.len().min(SHORT)];
    if let Some(i) = head.iter().position(|&x| x == a || x == b || x == c) {
        return Some(i);
    }
    if hay.len() <= SHORT {
        return None;
    }
    memchr::memchr3(a, b, c, &hay[SHORT..]).map(|i| i + SHORT)
}

/// `s` with HTML character references decoded: the numeric ones and the named ones mail
/// writers use; an unknown or malformed reference stays as written.
pub(super) fn decode_references(s: &str) -> String {
    let mut out = String::new();
    decode_references_into(&mut out, s);
    out
}

/// [`decode_references`], appended to `out`.
fn decode_references_into(out: &mut String, s: &str) {
    let Some(first) = memchr::memchr(b'&', s.as_bytes()) else {
        out.push_str(s);
        return;
    };
    out.reserve(s.len());
    out.push_str(&s[..first]);
    let mut rest = &s[first..];
    while let Some(amp) = memchr::memchr(b'&', rest.as_bytes()) {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest[1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
            .map_or(rest.len(), |e| e + 1);
        let name = &rest[1..end];
        let terminated = rest[end..].starts_with(';');
        match reference(name) {
            Some(decoded) if terminated || !name.starts_with('#') => {
                match decoded {
                    Decoded::Char(c) => out.push(c),
                    Decoded::Str(t) => out.push_str(t),
                }
                rest = &rest[end + usize::from(terminated)..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
}

/// What one reference (`amp`, `#233`, `#x1F600`) stands for.
fn reference(name: &str) -> Option<Decoded> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return Some(Decoded::Char(
            char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER),
        ));
    }
    let text = match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" => "\u{A0}",
        "shy" | "zwnj" | "zwj" => "",
        "copy" => "©",
        "reg" => "®",
        "trade" => "™",
        "hellip" => "…",
        "mdash" => "—",
        "ndash" => "–",
        "lsquo" => "‘",
        "rsquo" => "’",
        "ldquo" => "“",
        "rdquo" => "”",
        "laquo" => "«",
        "raquo" => "»",
        "bull" => "•",
        "middot" => "·",
        "euro" => "€",
        "pound" => "£",
        "yen" => "¥",
        "cent" => "¢",
        "deg" => "°",
        "times" => "×",
        _ => return None,
    };
    Some(Decoded::Str(text))
}

/// A decoded reference.
enum Decoded {
    Char(char),
    Str(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(html: &str) -> String {
        reduce(html, usize::MAX).text
    }

    /// [`push_text`] character by character: each run of whitespace one space, `> ` for
    /// each open blockquote at the start of a line.
    fn reference_push(out: &mut String, raw: &str, line: &mut Line) {
        for c in decode_references(raw).chars() {
            if c.is_whitespace() {
                line.space = !line.start;
                continue;
            }
            if line.start {
                for _ in 0..line.quote_depth {
                    out.push_str("> ");
                }
                line.start = false;
            } else if line.space {
                out.push(' ');
            }
            line.space = false;
            out.push(c);
        }
    }

    proptest! {
        /// Any text pieces, from any line state: the text pushed is the reference's.
        #[test]
        fn text_is_pushed_as_character_by_character(
            pieces in proptest::collection::vec("([a-z.,]{1,6}|[ \t\r\n\x0b\x0c\x01\x7f]{1,3}|&amp;|&nbsp;|[\u{00A0}\u{2003}\u{00E9}\u{200B}])*", 1..4),
            start: bool,
            space: bool,
            quote_depth in 0usize..3,
        ) {
            let new_line = || Line { start, space, quote_depth };
            let (mut fast, mut slow) = (String::new(), String::new());
            let (mut fast_line, mut slow_line) = (new_line(), new_line());
            for p in &pieces {
                push_text(&mut fast, p, &mut fast_line);
                reference_push(&mut slow, p, &mut slow_line);
                prop_assert_eq!(&fast, &slow);
                prop_assert_eq!(fast_line.start, slow_line.start);
                prop_assert_eq!(fast_line.space, slow_line.space);
            }
        }
    }

    proptest! {
        /// Any bytes, from any start: the run ends where the byte-by-byte walk ends it.
        #[test]
        fn visible_runs_end_where_walked_byte_by_byte(
            b in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'!'), Just(b'~'), Just(0x7f_u8), Just(0x80_u8), Just(b'\n'), Just(b'a'), any::<u8>()], 0..40),
            start in 0usize..40,
        ) {
            let start = start.min(b.len());
            let mut k = start;
            while k < b.len() {
                let c = b[k];
                if c > b' ' && c < 0x80 {
                    k += 1;
                } else if c == b' ' && b.get(k + 1).is_some_and(|&n| n > b' ' && n < 0x80) {
                    k += 2;
                } else {
                    break;
                }
            }
            prop_assert_eq!(visible_run_end(&b, start), k);
        }

        /// Any bytes: the candidates found are those looked at byte by byte, in order.
        #[test]
        fn candidates_are_found_in_order(
            b in proptest::collection::vec(prop_oneof![Just(b'<'), Just(b':'), Just(b'i'), Just(b'I'), Just(b'a'), Just(b'A'), Just(b'i' ^ 0x20 ^ 0x80), any::<u8>()], 0..100),
        ) {
            let want: Vec<usize> = (0..b.len())
                .filter(|&i| match b[i] {
                    b'<' => i + 1 < b.len() && matches!(b[i + 1], b'i' | b'I'),
                    b':' => i > 0 && matches!(b[i - 1], b'a' | b'A'),
                    _ => false,
                })
                .collect();
            let got: Vec<usize> = Candidates::new(&b).collect();
            prop_assert_eq!(got, want);
        }
    }

    proptest! {
        /// Any targets, joined and cut: the same as a list of strings of them.
        #[test]
        fn hrefs_hold_what_a_list_holds(
            first in proptest::collection::vec("[a-z&;#0-9é]{0,6}", 0..5),
            second in proptest::collection::vec("[a-z&;#0-9é]{0,6}", 0..5),
            keep in 0usize..12,
        ) {
            let (mut a, mut b) = (Hrefs::default(), Hrefs::default());
            first.iter().for_each(|h| a.push_decoded(h));
            second.iter().for_each(|h| b.push_decoded(h));
            a.extend(b);
            a.truncate(keep);
            let mut want: Vec<String> = first.iter().chain(&second).map(|h| decode_references(h)).collect();
            want.truncate(keep);
            prop_assert_eq!(a.len(), want.len());
            prop_assert_eq!(a.is_empty(), want.is_empty());
            prop_assert_eq!(a.iter().collect::<Vec<_>>(), want);
        }
    }

    proptest! {
        /// Any attribute text: the byte walk finds the names and values the `str` one does.
        #[test]
        fn attributes_are_walked_as_by_characters(
            attributes in "([a-z=/'\" \t\x0b\x0c\r\n]|[\u{85}\u{A0}\u{2003}\u{E9}])*",
        ) {
            let tag = Tag { name: "p", kind: Kind::default(), closing: false, attributes: &attributes, len: 0 };
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            tag.each_attribute(|n, v| fast.push((n, v)));
            tag.each_attribute_by_chars(|n, v| slow.push((n, v)));
            prop_assert_eq!(fast, slow);
        }
    }

    #[test]
    fn tags_go_and_blocks_end_lines() {
        assert_eq!(
            text("<html><body><p>Hello <b>dear</b>\n  friend,</p><div>Buy <i>now</i><br>today</div></body></html>"),
            "Hello dear friend,\nBuy now\ntoday\n"
        );
    }

    #[test]
    fn hidden_elements_and_comments_go() {
        assert_eq!(
            text("<HEAD><TITLE>t</TITLE><style>p{color:red}</style></HEAD><script type=x>var a = '<p>';</script><!-- hidden <p> -->shown<SCRIPT>x</Script> too"),
            "shown too"
        );
        assert_eq!(text("<script>never closed"), "");
    }

    #[test]
    fn references_are_decoded() {
        assert_eq!(
            text("Caf&eacute; &amp; caf&#233; &#x41;&lt;b&gt; &nbsp;&bogus; & ok &#xZZ;"),
            "Caf&eacute; & café A<b> &bogus; & ok &#xZZ;"
        );
        assert_eq!(decode_references("fish&chips&amp"), "fish&chips&");
        assert_eq!(decode_references("&#1114112;"), "\u{FFFD}");
    }

    #[test]
    fn blockquotes_come_out_quoted() {
        assert_eq!(
            text("<div>Thanks!</div><div>On Mon, Ann wrote:</div><blockquote>old <p>text</p></blockquote><p>bye</p>"),
            "Thanks!\nOn Mon, Ann wrote:\n> old\n> text\nbye\n"
        );
    }

    #[test]
    fn hrefs_are_collected() {
        let r = reduce(
            "<a class=x href=\"https://t.example.com/c?a=1&amp;b=2\">go</a> <A HREF='http://b.example'>b</A> <a href=https://c.example/x>c</a> <a name=n>no</a> <area href=\"https://d.example\">",
            usize::MAX,
        );
        assert_eq!(
            r.hrefs.iter().collect::<Vec<_>>(),
            [
                "https://t.example.com/c?a=1&b=2",
                "http://b.example",
                "https://c.example/x",
                "https://d.example"
            ]
        );
        assert_eq!(r.text, "go b c no");
    }

    #[test]
    fn links_are_read_past_the_text_budget() {
        let r = reduce("<p>text</p><a href=\"https://a.example\">a</a>", 0);
        assert_eq!(r.text, "");
        assert_eq!(r.hrefs.iter().collect::<Vec<_>>(), ["https://a.example"]);
    }

    #[test]
    fn text_that_only_looks_like_tags_stays() {
        assert_eq!(text("a < b and 3<4 <"), "a < b and 3<4 <");
        assert_eq!(text("V<b></b>iagra <i>now</i>"), "Viagra now");
        assert_eq!(text("<p unclosed attr=\"x>y"), "");
    }

    #[test]
    fn text_hidden_by_css_or_colour_goes() {
        assert_eq!(
            text("<p>shown <span style=\"display:none\">hidden1</span> <font style='font-size:0px'>hidden2</font> too</p>\
                  <div hidden>hidden3</div><div style=\"max-height:0;overflow:hidden\">hidden4 <b>x</b></div>\
                  <div style=\"mso-hide:all\">hidden5</div><span style='opacity:0'>hidden6</span>end"),
            "shown too\nend"
        );
        // White on white (the default background), near-white on white, and text on a
        // background of its own colour set by an ancestor.
        assert_eq!(
            text("<p>a <span style='color:#fff'>w1</span> <font color=\"#fefefe\">w2</font> b</p>\
                  <table bgcolor=\"#123456\"><tr><td><span style='color:#123457'>w3</span> c</td></tr></table>\
                  <div style='background:#000;color:#fff'>d</div>"),
            "a b\nc\nd\n"
        );
        // Unclosed paragraphs end at the next one.
        assert_eq!(text("<p style='display:none'>x<p>y"), "y");
    }

    #[test]
    fn a_repeated_style_reads_as_its_first_reading() {
        let hide = "<span style=\"display:none\">h</span>";
        let show = "<span style=\"color:red\">s</span>";
        assert_eq!(
            text(&format!("{hide}{hide}{show}{show}{hide}{show}")),
            "sss"
        );
        // A style written in another case is read on its own.
        assert_eq!(
            text("<b style='display:none'>h</b><b style='DISPLAY:NONE'>h</b><b style='display:nonE '>h</b><b style='display:non'>s</b>"),
            "s"
        );
    }

    #[test]
    fn quoted_and_forwarded_parts_end_the_text() {
        for marker in [
            "<div class=\"gmail_quote\">",
            "<div id=\"divRplyFwdMsg\" dir=\"ltr\">",
            "<div style=\"border:none;border-top:solid #E1E1E1 1.0pt;padding:3.0pt 0in 0in 0in\">",
            "<div class=\"moz-cite-prefix\">",
        ] {
            let r = reduce(
                &format!("<p>mine</p>{marker}<p>From: Ann</p><a href=\"https://x.example\">old</a></div><p>after</p>"),
                usize::MAX,
            );
            assert_eq!(r.text, "mine\n", "{marker}");
            assert_eq!(r.hrefs.iter().collect::<Vec<_>>(), ["https://x.example"]);
        }
    }

    #[test]
    fn images_and_data_uris_are_dropped_before_the_window() {
        let big = "A".repeat(2_000_000);
        let html = format!("<IMG src=\"data:image/png;base64,{big}\"><p>text</p><a href='data:x,{big}'>l</a> metadata: ok");
        let stripped = without_images(&html, usize::MAX);
        assert!(stripped.len() < 100, "{stripped}");
        assert_eq!(text(&stripped), "text\nl metadata: ok");
        assert!(matches!(
            without_images("<p>plain</p>", 100),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(without_images("<p>plain</p>", 5), "<p>pl");
        assert_eq!(without_images("<img x><p>é</p>", 4), "<p>");
        assert_eq!(without_images("data:xx <p>plain</p>", 4), " <p>");
    }

    #[test]
    fn element_kinds_are_read_in_any_case() {
        assert!(Kind::of("BlockQuote").quote && Kind::of("BlockQuote").block);
        assert!(Kind::of("AREA").link && Kind::of("area").void);
        assert!(Kind::of("noScript").hidden);
        assert_eq!(Kind::of("blockquotes"), Kind::default());
        assert_eq!(Kind::of(""), Kind::default());
        assert_eq!(Kind::of("span"), Kind::default());
    }

    #[test]
    fn text_is_bounded() {
        let html = "<p>word</p>".repeat(10_000);
        assert!(reduce(&html, 100).text.len() < 120);
    }
}
