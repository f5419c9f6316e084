//! floodgate's own `Received:` trace field (RFC 5321 §4.4), put on top of a relayed
//! message so its trail shows the client hop: what XCLIENT cannot tell upstream (the
//! client's TLS) and what a PROXY header does not carry (its HELO, its name).
//!
//! The layout is Postfix's, which log and spam-filter parsers already read:
//!
//! ```text
//! Received: from HELO (NAME [ADDR])
//!     (using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384)
//!     (Authenticated sender: USER)
//!     by HOSTNAME (floodgate) with ESMTPSA;
//!     Wed, 25 Nov 2026 16:21:19 +0000
//! ```
//!
//! Continuation lines start with a tab. `with` is the RFC 3848 protocol type (`SMTP`,
//! `ESMTP`, `ESMTPS`, `ESMTPA`, `ESMTPSA`).
//! Every line ends in CRLF, none starts with `.`, and no line is longer than 998 octets,
//! so the bytes go into the DATA stream as they are.

use std::fmt::Write as _;
use std::net::IpAddr;

/// What the Received line says about one message's client.
#[derive(Debug, Clone, Copy)]
pub struct ReceivedInfo<'a> {
    /// The client's HELO/EHLO argument.
    pub helo: Option<&'a str>,
    /// The client's forward-confirmed name.
    pub name: Option<&'a str>,
    /// The client's address.
    pub addr: IpAddr,
    /// floodgate's host name.
    pub by: &'a str,
    /// The client said EHLO (not HELO).
    pub ehlo: bool,
    /// TLS protocol version and cipher suite (IANA names) when the client used TLS.
    pub tls: Option<(&'a str, &'a str)>,
    /// The client authenticated.
    pub authenticated: bool,
    /// The authenticated user, when it is to be shown.
    pub user: Option<&'a str>,
    /// When the message was received, seconds since the Unix epoch.
    pub time: i64,
}

/// Longest HELO, name or user written as is (a domain is at most 255 octets).
const FIELD_MAX: usize = 255;

/// The whole `Received:` field, folded, each line ending in CRLF.
pub fn received_header(info: &ReceivedInfo) -> Vec<u8> {
    let helo = info.helo.filter(|h| plain_helo(h)).unwrap_or("unknown");
    let name = info
        .name
        .filter(|n| n.len() <= FIELD_MAX && plain_helo(n) && !n.starts_with('['))
        .unwrap_or("unknown");
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        "Received: from {helo} ({name} [{}])\r\n",
        address_literal(info.addr)
    );
    if let Some((version, cipher)) = info.tls {
        let _ = write!(
            out,
            "\t(using {} with cipher {})\r\n",
            comment_text(version, 32),
            comment_text(cipher, 64)
        );
    }
    if let Some(user) = info.user.filter(|_| info.authenticated) {
        let _ = write!(
            out,
            "\t(Authenticated sender: {})\r\n",
            comment_text(user, FIELD_MAX)
        );
    }
    let by = if plain_helo(info.by) && !info.by.starts_with('[') {
        info.by
    } else {
        "floodgate"
    };
    let _ = write!(
        out,
        "\tby {by} (floodgate) with {};\r\n\t{}\r\n",
        protocol(info.ehlo, info.tls.is_some(), info.authenticated),
        rfc5322_date(info.time)
    );
    out.into_bytes()
}

/// The RFC 3848 protocol type.
pub fn protocol(ehlo: bool, tls: bool, authenticated: bool) -> &'static str {
    match (ehlo, tls, authenticated) {
        (false, _, _) => "SMTP",
        (true, false, false) => "ESMTP",
        (true, true, false) => "ESMTPS",
        (true, false, true) => "ESMTPA",
        (true, true, true) => "ESMTPSA",
    }
}

/// A HELO argument fit to appear as it is: a domain or an address literal, at most 255
/// octets of letters, digits and `-._:[]`.
fn plain_helo(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= FIELD_MAX
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
}

/// `a.b.c.d` or `IPv6:...` (RFC 5321 §4.1.3), IPv4-mapped addresses as IPv4.
fn address_literal(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("IPv6:{v6}"),
    }
}

/// Text safe inside a comment: printable ASCII, `(`, `)` and `\` escaped as quoted pairs,
/// anything else as `?`, cut to `max` characters.
fn comment_text(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars().take(max) {
        match c {
            '(' | ')' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out
}

/// RFC 5322 §3.3 date-time in UTC: `Wed, 25 Nov 2026 16:21:19 +0000`.
pub fn rfc5322_date(secs: i64) -> String {
    // The Unix epoch as a civil date-time; times beyond the years -9999 to 9999 are clamped.
    jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0)
        .saturating_add(jiff::SignedDuration::from_secs(secs))
        .strftime("%a, %d %b %Y %H:%M:%S +0000")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn info<'a>() -> ReceivedInfo<'a> {
        ReceivedInfo {
            helo: Some("pc.example"),
            name: Some("localhost"),
            addr: "127.0.0.1".parse().unwrap(),
            by: "fg.example",
            ehlo: true,
            tls: None,
            authenticated: false,
            user: None,
            time: 1_795_624_879, // Wed, 25 Nov 2026 16:41:19 +0000
        }
    }

    fn text(i: &ReceivedInfo) -> String {
        String::from_utf8(received_header(i)).unwrap()
    }

    #[test]
    fn plain_esmtp() {
        assert_eq!(
            text(&info()),
            "Received: from pc.example (localhost [127.0.0.1])\r\n\
             \tby fg.example (floodgate) with ESMTP;\r\n\
             \tWed, 25 Nov 2026 16:41:19 +0000\r\n"
        );
    }

    #[test]
    fn tls_auth_and_user() {
        let i = ReceivedInfo {
            tls: Some(("TLSv1.3", "TLS_AES_256_GCM_SHA384")),
            authenticated: true,
            user: Some("alice"),
            ..info()
        };
        assert_eq!(
            text(&i),
            "Received: from pc.example (localhost [127.0.0.1])\r\n\
             \t(using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384)\r\n\
             \t(Authenticated sender: alice)\r\n\
             \tby fg.example (floodgate) with ESMTPSA;\r\n\
             \tWed, 25 Nov 2026 16:41:19 +0000\r\n"
        );
        // The user only when shown.
        let hidden = ReceivedInfo { user: None, ..i };
        assert!(!text(&hidden).contains("Authenticated sender"));
        assert!(text(&hidden).contains("with ESMTPSA;"));
    }

    #[test]
    fn protocols() {
        assert_eq!(protocol(false, true, true), "SMTP");
        assert_eq!(protocol(true, false, false), "ESMTP");
        assert_eq!(protocol(true, true, false), "ESMTPS");
        assert_eq!(protocol(true, false, true), "ESMTPA");
        assert_eq!(protocol(true, true, true), "ESMTPSA");
    }

    #[test]
    fn unknowns_ipv6_and_odd_text() {
        let i = ReceivedInfo {
            helo: Some("my pc (home)"),
            name: None,
            addr: "2001:db8::1".parse().unwrap(),
            authenticated: true,
            user: Some("bob (x)\\y\u{e9}\r\n"),
            ehlo: false,
            ..info()
        };
        let t = text(&i);
        assert!(
            t.starts_with("Received: from unknown (unknown [IPv6:2001:db8::1])\r\n"),
            "{t}"
        );
        assert!(
            t.contains("\t(Authenticated sender: bob \\(x\\)\\\\y???)\r\n"),
            "{t}"
        );
        assert!(t.contains("with SMTP;"));
        let mapped = ReceivedInfo {
            addr: "::ffff:192.0.2.1".parse().unwrap(),
            helo: Some("[192.0.2.1]"),
            ..info()
        };
        assert!(text(&mapped).starts_with("Received: from [192.0.2.1] (localhost [192.0.2.1])"));
    }

    #[test]
    fn dates() {
        assert_eq!(rfc5322_date(0), "Thu, 01 Jan 1970 00:00:00 +0000");
        assert_eq!(rfc5322_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 +0000");
        assert_eq!(
            rfc5322_date(1_795_624_879),
            "Wed, 25 Nov 2026 16:41:19 +0000"
        );
        assert_eq!(rfc5322_date(-1), "Wed, 31 Dec 1969 23:59:59 +0000");
    }

    proptest! {
        /// Whatever the client sent, the field is CRLF-terminated lines of printable ASCII
        /// (tab for folding), the first a Received field, the others folded, none over
        /// 998 octets, and its parentheses balance.
        #[test]
        fn always_a_wellformed_field(
            helo in proptest::option::of("\\PC{0,300}"),
            name in proptest::option::of("\\PC{0,300}"),
            user in proptest::option::of("\\PC{0,400}"),
            by in "\\PC{0,40}",
            ehlo in any::<bool>(),
            tls in any::<bool>(),
            auth in any::<bool>(),
            v6 in any::<bool>(),
            time in 0i64..4_102_444_800,
        ) {
            let addr: IpAddr = if v6 { "2001:db8::5".parse().unwrap() } else { "192.0.2.5".parse().unwrap() };
            let i = ReceivedInfo {
                helo: helo.as_deref(),
                name: name.as_deref(),
                addr,
                by: &by,
                ehlo,
                tls: tls.then_some(("TLSv1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")),
                authenticated: auth,
                user: user.as_deref(),
                time,
            };
            let bytes = received_header(&i);
            prop_assert!(bytes.starts_with(b"Received: from "));
            prop_assert!(bytes.ends_with(b"\r\n"));
            let t = String::from_utf8(bytes).unwrap();
            for (n, line) in t.split_terminator("\r\n").enumerate() {
                prop_assert!(line.len() <= 998);
                prop_assert!(line.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)), "{:?}", line);
                prop_assert!(n == 0 || line.starts_with('\t'));
            }
            // Balanced comments: escaped parentheses do not count.
            let mut depth = 0i32;
            let mut esc = false;
            for c in t.chars() {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '(') => depth += 1,
                    (false, ')') => { depth -= 1; prop_assert!(depth >= 0); }
                    _ => {}
                }
            }
            prop_assert_eq!(depth, 0);
        }
    }
}
