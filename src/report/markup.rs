//! Escaping text for HTML and SVG markup, shared by the HTML report and the web console,
//! and showing the characters a reader cannot see ([`is_hidden`]), shared with alert mail.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Unicode's format characters (general category Cf, Unicode 15.1), as inclusive ranges:
/// the bidirectional marks, embeddings, overrides and isolates, the zero-width space, joiners
/// and word joiner, the byte order mark, the invisible operators, the interlinear
/// annotation marks and the tags.
const FORMAT: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

/// Whether `c` is a character a reader cannot see, or that changes how the text around it
/// reads: a C0 or C1 control (tab, line feed and carriage return included: callers that
/// keep them say so), DEL, or a Unicode format character (Cf: U+202E RIGHT-TO-LEFT
/// OVERRIDE, U+200B ZERO WIDTH SPACE, the BOM, …).
pub fn is_hidden(c: char) -> bool {
    c.is_control() || (c >= '\u{AD}' && FORMAT.iter().any(|&(lo, hi)| lo <= c && c <= hi))
}

/// Appends `c` written as Rust writes it escaped, `\u{202e}`: visible, and impossible to
/// mistake for the text around it.
pub fn push_escaped(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// `s` with every hidden character ([`is_hidden`]) but tab, line feed and carriage return
/// written `\u{…}`; borrowed when there is none.
pub fn reveal(s: &str) -> Cow<'_, str> {
    let shown = |c: char| matches!(c, '\t' | '\n' | '\r') || !is_hidden(c);
    if s.chars().all(shown) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if shown(c) {
            out.push(c);
        } else {
            push_escaped(&mut out, c);
        }
    }
    Cow::Owned(out)
}

/// Escapes `s` for HTML text: `& < > " '` become character references, and hidden
/// characters ([`is_hidden`]) other than tab, line feed and carriage return are shown as
/// `\u{…}` (a right-to-left override in a key or a Subject is seen, not obeyed).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    escape_into(&mut out, s);
    out
}

/// [`escape`], appending to `out`.
pub fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\t' | '\n' | '\r' => out.push(c),
            c if is_hidden(c) => push_escaped(out, c),
            c => push_markup(out, c),
        }
    }
}

/// Escapes `s` for a quoted attribute value that is sent back as it is (a form's key): `&
/// < > " '` become character references, controls other than tab, line feed and carriage
/// return become U+FFFD (HTML forbids them), format characters stay as they are, so the
/// value submitted is the value shown.
pub fn escape_attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => push_markup(&mut out, c),
        }
    }
    out
}

/// `c`, as a character reference when it is markup.
fn push_markup(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        '\'' => out.push_str("&#39;"),
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::any;

    #[test]
    fn markup_quotes_and_controls() {
        assert_eq!(
            escape(r#"<a href="x">Tom & 'Jerry'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
        assert_eq!(escape("nul\0bell\x07"), "nul\\u{0}bell\\u{7}");
        assert_eq!(escape("a\tb\r\nc"), "a\tb\r\nc");
    }

    #[test]
    fn bidi_and_format_characters_are_shown_not_obeyed() {
        // invoice, U+202E, fdp.exe reads "invoiceexe.pdf" when the override is obeyed.
        assert_eq!(escape("invoice\u{202e}fdp.exe"), "invoice\\u{202e}fdp.exe");
        assert_eq!(escape("a\u{200b}b\u{feff}c"), "a\\u{200b}b\\u{feff}c");
        assert_eq!(escape("\u{85}\u{9f}\u{7f}"), "\\u{85}\\u{9f}\\u{7f}");
        assert_eq!(escape("tag\u{e0041}"), "tag\\u{e0041}");
        // Letters, marks and emoji stay.
        assert_eq!(escape("Ünïcödé ✓ 日本"), "Ünïcödé ✓ 日本");
        assert_eq!(reveal("plain"), Cow::Borrowed("plain"));
        assert_eq!(reveal("a\tb\u{2066}c\n"), "a\tb\\u{2066}c\n");
    }

    #[test]
    fn attributes_keep_what_is_submitted() {
        assert_eq!(escape_attr("k\u{202e}\"<"), "k\u{202e}&quot;&lt;");
        assert_eq!(escape_attr("nul\0"), "nul\u{fffd}");
    }

    #[test]
    fn hidden_is_controls_and_every_format_character() {
        for c in [
            '\0',
            '\x1b',
            '\x7f',
            '\u{80}',
            '\u{9f}',
            '\u{ad}',
            '\u{61c}',
            '\u{200e}',
            '\u{202a}',
            '\u{2069}',
            '\u{feff}',
            '\u{e007f}',
        ] {
            assert!(is_hidden(c), "{:x}", c as u32);
        }
        for c in [
            'a', ' ', '\u{a0}', 'é', '\u{2010}', '\u{2070}', '\u{fffd}', '😀',
        ] {
            assert!(!is_hidden(c), "{:x}", c as u32);
        }
    }

    proptest::proptest! {
        /// Revealed text has no hidden character but tab, line feed and carriage return,
        /// and text without any comes back as it was.
        #[test]
        fn revealed_text_hides_nothing(s in any::<String>()) {
            let r = reveal(&s);
            proptest::prop_assert!(r.chars().all(|c| matches!(c, '\t' | '\n' | '\r') || !is_hidden(c)));
            if !s.chars().any(|c| !matches!(c, '\t' | '\n' | '\r') && is_hidden(c)) {
                proptest::prop_assert_eq!(r.as_ref(), s.as_str());
            }
        }
    }
}
