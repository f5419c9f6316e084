//! Links: finding `http(s)://` links in text, their hosts, and the registered domains
//! (eTLD+1 by the public suffix list) that the `link_domains` key lists.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

/// At most this many distinct registered domains are listed for one message; the first
/// ones met in the text are kept.
pub const MAX_LINK_DOMAINS: usize = 32;

/// At most this many links are read from one message; a message of a million links costs
/// no more than one of this many.
pub const MAX_LINKS_READ: usize = 10_000;

/// At most this many authorities (as written) are remembered as read.
const MAX_AUTHORITIES: usize = 16;

/// The longest host name DNS allows.
const MAX_HOST: usize = 253;

/// The next `http://` or `https://` link in `text` (scheme in any case): the offset where
/// its scheme starts and the offset just after its `//`.
pub(super) fn find_link(text: &str) -> Option<(usize, usize)> {
    // Built once: building a searcher costs more than most searches of one token.
    static SEPARATOR: std::sync::OnceLock<memchr::memmem::Finder<'static>> =
        std::sync::OnceLock::new();
    let separator = SEPARATOR.get_or_init(|| memchr::memmem::Finder::new(b"://"));
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(k) = separator.find(&b[from..]) {
        let colon = from + k;
        from = colon + 3;
        for scheme in ["https", "http"] {
            let n = scheme.len();
            if colon >= n && b[colon - n..colon].eq_ignore_ascii_case(scheme.as_bytes()) {
                return Some((colon - n, colon + 3));
            }
        }
    }
    None
}

/// The authority that starts `rest` (the part of a link after its `//`): up to the first
/// whitespace, `/`, `?`, `#`, `\\`, quote or angle bracket. Looked for byte by byte while
/// the bytes are ASCII (most links), by characters from the first other one on.
pub(super) fn authority(rest: &str) -> &str {
    let b = rest.as_bytes();
    let ascii_end = b
        .iter()
        .position(|&c| !c.is_ascii() || c.is_ascii_whitespace() || c == 0x0b || is_host_end(c))
        .unwrap_or(b.len());
    let end = if ascii_end < b.len() && !b[ascii_end].is_ascii() {
        ascii_end
            + rest[ascii_end..]
                .find(|c: char| c.is_whitespace() || (c.is_ascii() && is_host_end(c as u8)))
                .unwrap_or(rest.len() - ascii_end)
    } else {
        ascii_end
    };
    &rest[..end]
}

/// The host of the authority that starts `rest` (the part of a link after its `//`):
/// user information and port left out, lower-cased, a trailing dot dropped; IP literals as
/// the address (IPv6 without brackets). None when it is not a host name or IP address.
/// Borrowed from `rest` when it is written in lower case.
pub(super) fn host(rest: &str) -> Option<Cow<'_, str>> {
    host_of(authority(rest))
}

/// The host of one `authority` (as [`authority`] finds it), as [`host`] gives it.
fn host_of(authority: &str) -> Option<Cow<'_, str>> {
    let authority = match memchr::memrchr(b'@', authority.as_bytes()) {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    if let Some(inner) = authority.strip_prefix('[') {
        let inner = &inner[..inner.find(']')?];
        return inner
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| Cow::Owned(ip.to_string()));
    }
    let name = match memchr::memchr(b':', authority.as_bytes()) {
        Some(colon) => &authority[..colon],
        None => authority,
    };
    // A link at the end of a sentence or in brackets: "(see https://example.com)."
    let name = name.trim_end_matches(['.', ',', ';', ')', ']', '}', '!', '*']);
    if name.is_empty() || name.len() > MAX_HOST {
        return None;
    }
    if name.is_ascii() {
        // Most hosts: bytes, no Unicode tables.
        // Labels of letters, digits, `-` and `_`, none empty.
        let n = name.as_bytes();
        let mut upper = false;
        let mut previous = b'.';
        for &c in n {
            if !(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
                || (c == b'.' && previous == b'.')
            {
                return None;
            }
            upper |= c.is_ascii_uppercase();
            previous = c;
        }
        if previous == b'.' {
            return None;
        }
        return Some(if upper {
            Cow::Owned(name.to_ascii_lowercase())
        } else {
            Cow::Borrowed(name)
        });
    }
    let valid = name.split('.').all(|label| {
        !label.is_empty()
            && label
                .chars()
                .all(|c| c.is_alphanumeric() || c == '-' || c == '_')
    });
    valid.then(|| Cow::Owned(name.to_lowercase()))
}

/// Whether the ASCII byte `c` ends a link's authority (whitespace aside).
fn is_host_end(c: u8) -> bool {
    matches!(c, b'/' | b'?' | b'#' | b'\\' | b'"' | b'\'' | b'<' | b'>')
}

/// The registered domain of a lower-case `host`: the IP address itself for an IP literal,
/// otherwise the public suffix with one label before it (`mail.example.co.uk` →
/// `example.co.uk`). None when the host is itself a public suffix or a single label.
pub(super) fn registered_domain(host: &str) -> Option<String> {
    if host.parse::<Ipv4Addr>().is_ok() || host.parse::<Ipv6Addr>().is_ok() {
        return Some(host.to_string());
    }
    let domain = psl::domain_str(host)?;
    // The list's default rule makes any unknown last label a suffix; a registered domain
    // has at least two labels.
    domain.contains('.').then(|| domain.to_string())
}

/// Whether `host` (or its registered domain `domain`) is one of `exempt` or under one of
/// them. `exempt` holds lower-case names without a trailing dot.
fn is_exempt(host: &str, domain: &str, exempt: &[String]) -> bool {
    exempt.iter().any(|e| {
        host == e
            || domain == e
            || (host.len() > e.len()
                && host.ends_with(e.as_str())
                && host.as_bytes()[host.len() - e.len() - 1] == b'.')
    })
}

/// The registered domains of the links in a message, gathered from its text and its HTML
/// links, in bounded time: at most [`MAX_LINKS_READ`] links are read and
/// [`MAX_LINK_DOMAINS`] domains kept.
pub(super) struct LinkDomains {
    exempt: Vec<String>,
    domains: BTreeSet<String>,
    /// The hosts already counted: a host met again changes nothing, and is not looked up
    /// in the public suffix list again.
    hosts: HashSet<String>,
    /// The first [`MAX_AUTHORITIES`] authorities read, as written: a link of one of them
    /// (most links of a newsletter or a tracked message) is not read again.
    authorities: Vec<String>,
    read: usize,
    left_out: bool,
}

impl LinkDomains {
    /// A collector that leaves out `exempt` domains and their subdomains.
    pub(super) fn new(exempt: &[String]) -> LinkDomains {
        LinkDomains {
            exempt: exempt
                .iter()
                .map(|e| e.trim().trim_end_matches('.').to_lowercase())
                .filter(|e| !e.is_empty())
                .collect(),
            domains: BTreeSet::new(),
            hosts: HashSet::new(),
            authorities: Vec::new(),
            read: 0,
            left_out: false,
        }
    }

    /// Whether no further link will be read.
    fn full(&self) -> bool {
        self.read >= MAX_LINKS_READ || self.domains.len() >= MAX_LINK_DOMAINS
    }

    /// Adds the links written out in `text`.
    #[cfg(test)]
    pub(super) fn add_text(&mut self, text: &str) {
        self.add_text_within(text, &mut super::Budget::unlimited());
    }

    /// Adds the links written out in `text`, as far as `budget` allows.
    pub(super) fn add_text_within(&mut self, text: &str, budget: &mut super::Budget) {
        let mut rest = text;
        while !self.full() {
            let Some((start, after)) = find_link(rest) else {
                return;
            };
            if !budget.spend_octets(start) {
                return;
            }
            rest = &rest[after..];
            self.add_authority(authority(rest));
        }
    }

    /// Adds one link target (an HTML `href`); anything but an `http(s)` link is ignored.
    pub(super) fn add_url(&mut self, url: &str) {
        if self.full() {
            return;
        }
        let url = url.trim_start();
        if let Some((0, after)) = find_link(url) {
            self.add_authority(authority(&url[after..]));
        }
    }

    /// Adds the host of one link's `authority`.
    fn add_authority(&mut self, authority: &str) {
        self.read += 1;
        if self.authorities.iter().any(|a| a == authority) {
            return;
        }
        if self.authorities.len() < MAX_AUTHORITIES {
            self.authorities.push(authority.to_string());
        }
        let Some(host) = host_of(authority) else {
            return;
        };
        if self.hosts.contains(&*host) {
            return;
        }
        if let Some(domain) = registered_domain(&host) {
            if is_exempt(&host, &domain, &self.exempt) {
                self.left_out = true;
            } else {
                self.domains.insert(domain);
            }
        }
        self.hosts.insert(host.into_owned());
    }

    /// Whether the message links somewhere, and only to exempt domains.
    pub(super) fn only_exempt(&self) -> bool {
        self.left_out && self.domains.is_empty()
    }

    /// The distinct registered domains, sorted.
    pub(super) fn finish(self) -> Vec<String> {
        self.domains.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_found_in_any_case() {
        assert_eq!(find_link("see HTTPS://x.example"), Some((4, 12)));
        assert_eq!(find_link("a http://b"), Some((2, 9)));
        assert_eq!(find_link("ftp://x.example and mailto:x@y"), None);
        assert_eq!(find_link("://"), None);
    }

    #[test]
    fn hosts_lose_user_port_path_and_case() {
        assert_eq!(
            host("Track.Example.COM/c/8f3k2j?u=123").as_deref(),
            Some("track.example.com")
        );
        assert_eq!(
            host("user:pw@mail.example.org:8080/x").as_deref(),
            Some("mail.example.org")
        );
        assert_eq!(host("example.net.").as_deref(), Some("example.net"));
        assert_eq!(host("example.net)").as_deref(), Some("example.net"));
        assert_eq!(host("192.0.2.7:80/x").as_deref(), Some("192.0.2.7"));
        assert_eq!(host("[2001:DB8::1]:443/").as_deref(), Some("2001:db8::1"));
        assert_eq!(host("BÜCHER.example/").as_deref(), Some("bücher.example"));
        assert_eq!(host("/path"), None);
        assert_eq!(host("a..b"), None);
        assert_eq!(host("%65xample.com"), None);
        assert_eq!(host("[not-ip]/"), None);
    }

    #[test]
    fn registered_domains_follow_the_public_suffix_list() {
        let r = |h: &str| registered_domain(h);
        assert_eq!(r("www.example.com").as_deref(), Some("example.com"));
        assert_eq!(r("a.b.c.example.com").as_deref(), Some("example.com"));
        assert_eq!(r("shop.example.co.uk").as_deref(), Some("example.co.uk"));
        assert_eq!(r("example.co.uk").as_deref(), Some("example.co.uk"));
        assert_eq!(r("x.city.kawasaki.jp").as_deref(), Some("city.kawasaki.jp"));
        assert_eq!(r("me.github.io").as_deref(), Some("me.github.io"));
        assert_eq!(
            r("xn--bcher-kva.example").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(r("192.0.2.7").as_deref(), Some("192.0.2.7"));
        assert_eq!(r("2001:db8::1").as_deref(), Some("2001:db8::1"));
        assert_eq!(r("co.uk"), None);
        assert_eq!(r("localhost"), None);
    }

    #[test]
    fn domains_are_distinct_sorted_and_exempt_ones_left_out() {
        let mut d = LinkDomains::new(&["Example.ORG.".to_string(), "links.example.net".into()]);
        d.add_text("https://www.b.example.com/x http://a.example.com https://B.EXAMPLE.com/y");
        d.add_text("https://example.org https://news.example.org/ https://links.example.net/t");
        d.add_text("https://other.example.net/");
        d.add_url(" https://shop.example.co.uk/?a=1");
        d.add_url("mailto:x@example.info");
        d.add_url("javascript:go('https://hidden.example.info')");
        assert_eq!(d.finish(), ["example.co.uk", "example.com", "example.net"]);
    }

    #[test]
    fn a_message_linking_only_to_exempt_domains_is_told_apart() {
        let exempt = ["example.org".to_string(), "news.example.net".into()];
        let mut d = LinkDomains::new(&exempt);
        assert!(!d.only_exempt(), "no link at all");
        d.add_text("https://www.example.org/a https://lists.news.example.net/b");
        assert!(d.only_exempt());
        d.add_text("https://other.example.net/");
        assert!(!d.only_exempt());
        assert_eq!(d.finish(), ["example.net"]);
    }

    #[test]
    fn domains_are_bounded() {
        let mut d = LinkDomains::new(&[]);
        let text: String = (0..100)
            .map(|i| format!("https://d{i}.example{i}.com/ "))
            .collect();
        d.add_text(&text);
        assert_eq!(d.finish().len(), MAX_LINK_DOMAINS);
    }
}
