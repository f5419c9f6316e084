//! Postfix XCLIENT (`XCLIENT_README`): telling upstream who the real client is.

use std::fmt::Write as _;
use std::net::IpAddr;

/// RFC 3461 §4 xtext: printable ASCII except `+` and `=` as is, every other
/// octet (of the UTF-8 form) as `+XX` with upper-case hex.
pub fn xtext_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if (b'!'..=b'~').contains(&b) && b != b'+' && b != b'=' {
            out.push(b as char);
        } else {
            let _ = write!(out, "+{b:02X}");
        }
    }
    out
}

/// What floodgate knows about its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XclientAttrs<'a> {
    /// Client IP address.
    pub addr: IpAddr,
    /// Client TCP port.
    pub port: u16,
    /// Verified reverse name; `None` sends `[UNAVAILABLE]`.
    pub name: Option<&'a str>,
    /// HELO/EHLO argument; `None` sends `[UNAVAILABLE]`.
    pub helo: Option<&'a str>,
    /// `"SMTP"` or `"ESMTP"`.
    pub proto: &'a str,
}

/// Most octets of an XCLIENT line, CRLF included (RFC 5321 command limit).
pub const XCLIENT_MAX: usize = 512;

/// One XCLIENT command line (with CRLF) carrying only the attributes
/// upstream advertised (`supported`, from `Capabilities::xclient`, any case).
///
/// Order: NAME, HELO, PROTO, PORT, ADDR — ADDR last, because once ADDR is
/// applied the proxy usually loses its XCLIENT authorisation. IPv6 is sent as
/// `IPV6:...`; IPv4-mapped IPv6 as plain IPv4. If the line would exceed 512
/// octets, HELO and then NAME are sent as `[UNAVAILABLE]`. LOGIN is never
/// sent: upstream validates AUTH itself. Returns an empty vector when
/// upstream supports none of these attributes.
pub fn xclient_command(attrs: &XclientAttrs, supported: &[String]) -> Vec<u8> {
    let has = |a: &str| supported.iter().any(|s| s.eq_ignore_ascii_case(a));
    let value = |v: Option<&str>| v.map_or_else(|| "[UNAVAILABLE]".to_string(), xtext_encode);
    let addr = match attrs.addr.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("IPV6:{v6}"),
    };
    let build = |name: String, helo: String| -> Vec<u8> {
        let mut parts: Vec<String> = Vec::new();
        if has("NAME") {
            parts.push(format!("NAME={name}"));
        }
        if has("HELO") {
            parts.push(format!("HELO={helo}"));
        }
        if has("PROTO") {
            parts.push(format!("PROTO={}", xtext_encode(attrs.proto)));
        }
        if has("PORT") {
            parts.push(format!("PORT={}", attrs.port));
        }
        if has("ADDR") {
            parts.push(format!("ADDR={addr}"));
        }
        if parts.is_empty() {
            return Vec::new();
        }
        format!("XCLIENT {}\r\n", parts.join(" ")).into_bytes()
    };
    let line = build(value(attrs.name), value(attrs.helo));
    if line.len() <= XCLIENT_MAX {
        return line;
    }
    let line = build(value(attrs.name), value(None));
    if line.len() <= XCLIENT_MAX {
        return line;
    }
    build(value(None), value(None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 3461 xtext decoding, for the round-trip property.
    fn xtext_decode(s: &str) -> Vec<u8> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'+' {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        out
    }

    proptest! {
        #[test]
        fn xtext_round_trip(s in "\\PC{0,30}") {
            let e = xtext_encode(&s);
            prop_assert!(e.bytes().all(|b| (b'!'..=b'~').contains(&b) && b != b'='));
            prop_assert_eq!(xtext_decode(&e), s.as_bytes());
        }
    }

    fn all() -> Vec<String> {
        ["NAME", "ADDR", "PORT", "PROTO", "HELO", "LOGIN"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn xtext() {
        assert_eq!(xtext_encode("mail.example.org"), "mail.example.org");
        assert_eq!(xtext_encode("a+b=c d"), "a+2Bb+3Dc+20d");
        assert_eq!(xtext_encode("é\u{1}"), "+C3+A9+01");
        assert_eq!(xtext_encode(""), "");
    }

    #[test]
    fn full_ipv4() {
        let a = XclientAttrs {
            addr: "192.0.2.1".parse().unwrap(),
            port: 40000,
            name: Some("host.example"),
            helo: Some("my pc"),
            proto: "ESMTP",
        };
        assert_eq!(
            xclient_command(&a, &all()),
            b"XCLIENT NAME=host.example HELO=my+20pc PROTO=ESMTP PORT=40000 ADDR=192.0.2.1\r\n"
        );
    }

    #[test]
    fn ipv6_unknowns_and_subset() {
        let a = XclientAttrs {
            addr: "2001:db8::1".parse().unwrap(),
            port: 1,
            name: None,
            helo: None,
            proto: "SMTP",
        };
        assert_eq!(
            xclient_command(&a, &["addr".to_string(), "name".to_string()]),
            b"XCLIENT NAME=[UNAVAILABLE] ADDR=IPV6:2001:db8::1\r\n"
        );
        assert!(xclient_command(&a, &["LOGIN".to_string()]).is_empty());
        assert!(xclient_command(&a, &[]).is_empty());
    }

    #[test]
    fn mapped_ipv4_is_plain() {
        let a = XclientAttrs {
            addr: "::ffff:192.0.2.9".parse().unwrap(),
            port: 1,
            name: None,
            helo: None,
            proto: "SMTP",
        };
        assert_eq!(
            xclient_command(&a, &["ADDR".to_string()]),
            b"XCLIENT ADDR=192.0.2.9\r\n"
        );
    }

    #[test]
    fn stays_within_512() {
        let helo = "h".repeat(600);
        let name = "n".repeat(250);
        let a = XclientAttrs {
            addr: "192.0.2.1".parse().unwrap(),
            port: 2,
            name: Some(&name),
            helo: Some(&helo),
            proto: "ESMTP",
        };
        let line = String::from_utf8(xclient_command(&a, &all())).unwrap();
        assert!(line.len() <= XCLIENT_MAX);
        assert!(line.contains("HELO=[UNAVAILABLE]") && line.contains(&name));
        let name = "n".repeat(600);
        let a = XclientAttrs {
            name: Some(&name),
            ..a
        };
        let line = String::from_utf8(xclient_command(&a, &all())).unwrap();
        assert!(line.len() <= XCLIENT_MAX);
        assert!(line.contains("NAME=[UNAVAILABLE]") && line.ends_with("ADDR=192.0.2.1\r\n"));
    }
}
