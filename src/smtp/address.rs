//! Envelope addresses (RFC 5321 §4.1.2 `Path`, with RFC 6531 UTF-8).
//!
//! Source routes (`<@a,@b:user@c>`) are accepted, checked and dropped: RFC
//! 5321 §4.1.2 / Appendix C tell servers to ignore them, and relaying them
//! would only widen what upstream has to understand.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// RFC 5321 §4.5.3.1.1: maximum local-part length in octets.
pub const MAX_LOCAL_PART: usize = 64;
/// RFC 5321 §4.5.3.1.2: maximum domain length in octets.
pub const MAX_DOMAIN: usize = 255;
/// RFC 5321 §4.5.3.1.3: maximum path length in octets, angle brackets included.
pub const MAX_PATH: usize = 256;

/// Whether an address is a sender (MAIL) or a recipient (RCPT); it decides
/// which paths are legal and which enhanced code a rejection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressRole {
    /// Reverse-path of MAIL FROM.
    Sender,
    /// Forward-path of RCPT TO.
    Recipient,
}

impl fmt::Display for AddressRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressRole::Sender => "sender",
            AddressRole::Recipient => "recipient",
        })
    }
}

/// What is wrong with an address.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AddressError {
    /// `<>` where a mailbox is required (RCPT).
    #[error("null path not allowed here")]
    NullNotAllowed,
    /// The local part is not a dot-string or quoted-string.
    #[error("malformed local part")]
    BadLocalPart,
    /// The domain is neither a domain name nor an address literal.
    #[error("malformed domain")]
    BadDomain,
    /// There is no `@domain` (only `<Postmaster>` may omit it).
    #[error("missing domain")]
    MissingDomain,
    /// The source route is malformed.
    #[error("malformed source route")]
    BadRoute,
    /// Local part over 64 octets.
    #[error("local part longer than 64 octets")]
    LocalPartTooLong,
    /// Domain over 255 octets.
    #[error("domain longer than 255 octets")]
    DomainTooLong,
    /// Path over 256 octets.
    #[error("path longer than 256 octets")]
    PathTooLong,
}

/// A reverse- or forward-path: the mailbox between `<` and `>` (source route
/// dropped), empty for the null reverse-path `<>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Path {
    raw: String,
    /// The unquoted local part when it differs from the text before the '@' (a quoted
    /// local part); `None` when it is that text, which spares a copy for nearly every path.
    local: Option<String>,
    /// Byte index of the '@' separating local part and domain in `raw`.
    at: Option<usize>,
}

impl Path {
    /// The null reverse-path `<>`.
    pub fn null() -> Self {
        Path {
            raw: String::new(),
            local: None,
            at: None,
        }
    }

    /// Parses the text between `<` and `>` for the given role.
    pub fn parse(text: &str, role: AddressRole) -> Result<Self, AddressError> {
        if text.len() + 2 > MAX_PATH {
            return Err(AddressError::PathTooLong);
        }
        if text.is_empty() {
            return match role {
                AddressRole::Sender => Ok(Path::null()),
                AddressRole::Recipient => Err(AddressError::NullNotAllowed),
            };
        }
        let mailbox = strip_route(text)?;
        if role == AddressRole::Recipient && mailbox.eq_ignore_ascii_case("postmaster") {
            return Ok(Path {
                raw: mailbox.to_string(),
                local: None,
                at: None,
            });
        }
        let (local, at) = parse_local_part(mailbox)?;
        if at > MAX_LOCAL_PART {
            return Err(AddressError::LocalPartTooLong);
        }
        if mailbox.as_bytes().get(at) != Some(&b'@') {
            return Err(AddressError::MissingDomain);
        }
        let domain = &mailbox[at + 1..];
        if domain.len() > MAX_DOMAIN {
            return Err(AddressError::DomainTooLong);
        }
        check_domain_or_literal(domain)?;
        Ok(Path {
            raw: mailbox.to_string(),
            local,
            at: Some(at),
        })
    }

    /// Whether this is the null reverse-path `<>`.
    pub fn is_null(&self) -> bool {
        self.raw.is_empty()
    }

    /// The mailbox as written, without `<` `>` and without a source route.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The local part with quoting removed.
    pub fn local_part(&self) -> &str {
        match &self.local {
            Some(l) => l,
            None => &self.raw[..self.at.unwrap_or(self.raw.len())],
        }
    }

    /// The domain or address literal as written; `None` for `<Postmaster>`
    /// and for `<>`.
    pub fn domain(&self) -> Option<&str> {
        self.at.map(|i| &self.raw[i + 1..])
    }

    /// Whether the address is pure ASCII (otherwise it needs SMTPUTF8).
    pub fn is_ascii(&self) -> bool {
        self.raw.is_ascii()
    }

    /// Lower-cased local part (quotes removed) `@` lower-cased domain: the
    /// value Exim's `per_addr` unique counting uses. `""` for `<>`,
    /// `"postmaster"` for `<Postmaster>`.
    pub fn normalized(&self) -> String {
        let mut out = String::with_capacity(self.raw.len());
        self.normalized_into(&mut out);
        out
    }

    /// [`normalized`](Self::normalized) written into `out` (cleared first), so a caller can
    /// keep one buffer instead of allocating per address.
    pub fn normalized_into(&self, out: &mut String) {
        out.clear();
        push_lowercase(out, self.local_part());
        if let Some(d) = self.domain() {
            out.push('@');
            push_lowercase(out, d);
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}>", self.raw)
    }
}

/// Removes and validates a leading `@a,@b:` source route.
fn strip_route(text: &str) -> Result<&str, AddressError> {
    if !text.starts_with('@') {
        return Ok(text);
    }
    let colon = text.find(':').ok_or(AddressError::BadRoute)?;
    for hop in text[..colon].split(',') {
        let domain = hop.strip_prefix('@').ok_or(AddressError::BadRoute)?;
        check_domain(domain).map_err(|_| AddressError::BadRoute)?;
    }
    Ok(&text[colon + 1..])
}

/// Appends `s` lower-cased as `str::to_lowercase` does; ASCII (nearly every address) without
/// the Unicode tables or a temporary string.
fn push_lowercase(out: &mut String, s: &str) {
    if s.is_ascii() {
        let start = out.len();
        out.push_str(s);
        out[start..].make_ascii_lowercase();
    } else {
        out.push_str(&s.to_lowercase());
    }
}

/// Characters of RFC 5322 `atext`, plus any non-ASCII (RFC 6531 UTF8-non-ascii).
fn is_atext(c: char) -> bool {
    // A byte match rather than a search of the specials string: this runs per character
    // of every envelope address.
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '!' | '#'
                | '$'
                | '%'
                | '&'
                | '\''
                | '*'
                | '+'
                | '-'
                | '/'
                | '='
                | '?'
                | '^'
                | '_'
                | '`'
                | '{'
                | '|'
                | '}'
                | '~'
        )
        || !c.is_ascii()
}

/// Parses the local part at the start of `s`. Returns the unquoted local
/// part and the byte index just after it (where the '@' must be).
fn parse_local_part(s: &str) -> Result<(Option<String>, usize), AddressError> {
    if let Some(rest) = s.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => return Ok((Some(out), i + 2)),
                '\\' => match chars.next() {
                    Some((_, e)) if (' '..='~').contains(&e) => out.push(e),
                    _ => return Err(AddressError::BadLocalPart),
                },
                // qtextSMTP: %d32-33 / %d35-91 / %d93-126, and UTF-8.
                c if (' '..='~').contains(&c) || !c.is_ascii() => out.push(c),
                _ => return Err(AddressError::BadLocalPart),
            }
        }
        return Err(AddressError::BadLocalPart);
    }
    let end = memchr::memchr(b'@', s.as_bytes()).unwrap_or(s.len());
    let local = &s.as_bytes()[..end];
    // Bytewise as in check_domain: every byte of a non-ASCII character is atext.
    if local.is_empty()
        || !local
            .split(|&b| b == b'.')
            .all(|atom| !atom.is_empty() && atom.iter().all(|&b| is_atext(char::from(b))))
    {
        return Err(AddressError::BadLocalPart);
    }
    Ok((None, end))
}

fn check_domain_or_literal(d: &str) -> Result<(), AddressError> {
    match d.strip_prefix('[') {
        Some(rest) => {
            let inner = rest.strip_suffix(']').ok_or(AddressError::BadDomain)?;
            check_address_literal(inner)
        }
        None => check_domain(d),
    }
}

/// `sub-domain *("." sub-domain)`, sub-domain = Let-dig [Ldh-str]; non-ASCII
/// characters count as letters (U-labels).
fn check_domain(d: &str) -> Result<(), AddressError> {
    if d.is_empty() || d.len() > MAX_DOMAIN {
        return Err(AddressError::BadDomain);
    }
    // Bytes, not chars: a non-ASCII character is all bytes >= 0x80, each of which counts
    // as a letter here exactly as the character does (and the text is valid UTF-8).
    let let_dig = |b: u8| b.is_ascii_alphanumeric() || !b.is_ascii();
    for label in d.as_bytes().split(|&b| b == b'.') {
        let ok = label.len() <= 63
            && label.first().is_some_and(|&b| let_dig(b))
            && label.last().is_some_and(|&b| let_dig(b))
            && label.iter().all(|&b| let_dig(b) || b == b'-');
        if !ok {
            return Err(AddressError::BadDomain);
        }
    }
    Ok(())
}

/// The inside of `[...]`: IPv4, `IPv6:` + IPv6, or `tag:content`.
fn check_address_literal(inner: &str) -> Result<(), AddressError> {
    if inner.parse::<Ipv4Addr>().is_ok() {
        return Ok(());
    }
    let (tag, content) = inner.split_once(':').ok_or(AddressError::BadDomain)?;
    if tag.eq_ignore_ascii_case("IPv6") {
        return content
            .parse::<Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| AddressError::BadDomain);
    }
    // General-address-literal: Standardized-tag ":" 1*dcontent.
    let tag_ok = tag
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && tag
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let content_ok = !content.is_empty()
        && content
            .bytes()
            .all(|b| (33..=90).contains(&b) || (94..=126).contains(&b));
    if tag_ok && content_ok {
        Ok(())
    } else {
        Err(AddressError::BadDomain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressRole::*;

    fn ok(s: &str, role: AddressRole) -> Path {
        Path::parse(s, role).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn plain_mailbox() {
        let p = ok("John.Doe@Example.COM", Recipient);
        assert_eq!(p.as_str(), "John.Doe@Example.COM");
        assert_eq!(p.local_part(), "John.Doe");
        assert_eq!(p.domain(), Some("Example.COM"));
        assert_eq!(p.normalized(), "john.doe@example.com");
        assert!(!p.is_null() && p.is_ascii());
        assert_eq!(p.to_string(), "<John.Doe@Example.COM>");
    }

    #[test]
    fn null_path() {
        let p = ok("", Sender);
        assert!(p.is_null());
        assert_eq!(p.normalized(), "");
        assert_eq!(p.domain(), None);
        assert_eq!(
            Path::parse("", Recipient),
            Err(AddressError::NullNotAllowed)
        );
    }

    #[test]
    fn postmaster() {
        let p = ok("PostMaster", Recipient);
        assert_eq!(p.domain(), None);
        assert_eq!(p.normalized(), "postmaster");
        assert_eq!(
            Path::parse("postmaster", Sender),
            Err(AddressError::MissingDomain)
        );
        assert_eq!(
            Path::parse("bob", Recipient),
            Err(AddressError::MissingDomain)
        );
    }

    #[test]
    fn quoted_local_part() {
        let p = ok("\"John \\\"J\\\" Doe\"@example.com", Recipient);
        assert_eq!(p.local_part(), "John \"J\" Doe");
        assert_eq!(p.normalized(), "john \"j\" doe@example.com");
        let p = ok("\"a@b>c\"@x.org", Recipient);
        assert_eq!(p.local_part(), "a@b>c");
        assert_eq!(p.domain(), Some("x.org"));
        assert!(Path::parse("\"unterminated@x.org", Recipient).is_err());
        assert!(Path::parse("\"a\"b@x.org", Recipient).is_err());
        assert!(Path::parse("\"a\\\u{1}\"@x.org", Recipient).is_err());
    }

    #[test]
    fn source_route_dropped() {
        let p = ok("@relay.one,@relay.two:user@example.com", Recipient);
        assert_eq!(p.as_str(), "user@example.com");
        assert_eq!(
            Path::parse("@bad_host:user@x.org", Recipient),
            Err(AddressError::BadRoute)
        );
        assert_eq!(
            Path::parse("@a.b user@x.org", Recipient),
            Err(AddressError::BadRoute)
        );
    }

    #[test]
    fn utf8_addresses() {
        let p = ok("Jörg@Bücher.Example", Recipient);
        assert!(!p.is_ascii());
        assert_eq!(p.normalized(), "jörg@bücher.example");
    }

    #[test]
    fn address_literals() {
        ok("a@[192.0.2.1]", Recipient);
        ok("a@[IPv6:2001:db8::1]", Recipient);
        ok("a@[x-tag:stuff]", Recipient);
        for bad in [
            "a@[192.0.2.1",
            "a@[IPv6:zz]",
            "a@[999.1.1.1]",
            "a@[:x]",
            "a@[t:]",
        ] {
            assert_eq!(
                Path::parse(bad, Recipient),
                Err(AddressError::BadDomain),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_syntax() {
        for bad in ["a..b@x.org", ".a@x.org", "a.@x.org", "a b@x.org", "@x.org"] {
            assert!(Path::parse(bad, Recipient).is_err(), "{bad}");
        }
        for bad in [
            "a@",
            "a@x..org",
            "a@-x.org",
            "a@x-.org",
            "a@x_y.org",
            "a@x.org.",
            "a@b@c",
        ] {
            assert_eq!(
                Path::parse(bad, Recipient),
                Err(AddressError::BadDomain),
                "{bad}"
            );
        }
    }

    #[test]
    fn length_limits() {
        let local64 = "a".repeat(64);
        ok(&format!("{local64}@x.org"), Recipient);
        let local65 = "a".repeat(65);
        assert_eq!(
            Path::parse(&format!("{local65}@x.org"), Recipient),
            Err(AddressError::LocalPartTooLong)
        );
        let label = "b".repeat(63);
        // 63*3 + 2 dots = 191 octets of domain: fine.
        ok(&format!("a@{label}.{label}.{label}"), Recipient);
        // 254 octets between < > is exactly 256 with them.
        let d = format!("{}.{}.{}.{}", label, label, label, "c".repeat(60));
        assert_eq!(d.len(), 252);
        ok(&format!("a@{d}"), Recipient);
        assert_eq!(
            Path::parse(&format!("ab@{d}"), Recipient),
            Err(AddressError::PathTooLong)
        );
    }

    #[test]
    fn label_too_long() {
        let label = "b".repeat(64);
        assert_eq!(
            Path::parse(&format!("a@{label}.org"), Recipient),
            Err(AddressError::BadDomain)
        );
    }

    /// The atext set as RFC 5322 §3.2.3 lists it (plus UTF-8), spelled independently of
    /// `is_atext`'s match.
    fn atext_reference(c: char) -> bool {
        c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii()
    }

    #[test]
    fn atext_matches_rfc_list() {
        for c in (0u8..=0x7f).map(char::from).chain(['é', 'ß', '€']) {
            assert_eq!(is_atext(c), atext_reference(c), "{c:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The bytewise domain check answers as the char-wise definition does.
        #[test]
        fn domain_check_matches_char_definition(d in "[a-zA-Z0-9.\\-éΣ€_ ]{0,20}") {
            let let_dig = |c: char| c.is_ascii_alphanumeric() || !c.is_ascii();
            let want = !d.is_empty() && d.split('.').all(|label| {
                label.len() <= 63
                    && label.chars().next().is_some_and(let_dig)
                    && label.chars().last().is_some_and(let_dig)
                    && label.chars().all(|c| let_dig(c) || c == '-')
            });
            proptest::prop_assert_eq!(check_domain(&d).is_ok(), want);
        }

        /// The bytewise dot-atom check answers as the char-wise definition does.
        #[test]
        fn local_part_check_matches_char_definition(l in "[a-z.!#é€()<> ]{0,12}") {
            let want = !l.is_empty()
                && l.split('.').all(|atom| !atom.is_empty() && atom.chars().all(atext_reference));
            let got = parse_local_part(&format!("{l}@x"));
            proptest::prop_assert_eq!(got.is_ok(), want);
        }

        /// `normalized` is the lower-cased local part (quotes removed) `@` the lower-cased
        /// domain, as `str::to_lowercase` writes them; `normalized_into` agrees and clears.
        #[test]
        fn normalized_is_lowercased_parts(
            local in "([A-Za-z0-9.!#]{1,12}|\"[ -~ÉΣß]{0,8}\"|[a-zΣÉİ]{1,6})",
            domain in "[A-Za-z0-9ÀΣ]{1,10}(\\.[A-Za-z0-9]{1,8}){0,2}",
        ) {
            let text = format!("{local}@{domain}");
            if let Ok(p) = Path::parse(&text, Recipient) {
                let want = format!("{}@{}", p.local_part().to_lowercase(), domain.to_lowercase());
                proptest::prop_assert_eq!(p.normalized(), want.clone());
                let mut buf = String::from("stale");
                p.normalized_into(&mut buf);
                proptest::prop_assert_eq!(buf, want);
                if !local.starts_with('"') {
                    proptest::prop_assert_eq!(p.local_part(), local.as_str());
                }
            }
        }
    }
}
