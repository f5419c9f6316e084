//! Postfix XCLIENT (`XCLIENT_README`): telling upstream who the real client is.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

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

/// A client name as XCLIENT carries it: known, or one of the two placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClientName {
    /// A name (verified for `NAME`, as the PTR record says for `REVERSE_NAME`).
    Known(String),
    /// No name: `[UNAVAILABLE]`.
    #[default]
    Unavailable,
    /// The lookup failed for now (timeout, DNS server failure): `[TEMPUNAVAIL]`.
    TempUnavailable,
}

impl ClientName {
    /// The name, if known.
    pub fn known(&self) -> Option<&str> {
        match self {
            ClientName::Known(n) => Some(n),
            _ => None,
        }
    }

    /// The XCLIENT value: the xtext of the name, or its placeholder.
    pub fn xclient_value(&self) -> String {
        match self {
            ClientName::Known(n) => xtext_encode(n),
            ClientName::Unavailable => UNAVAILABLE.to_string(),
            ClientName::TempUnavailable => TEMPUNAVAIL.to_string(),
        }
    }
}

/// The XCLIENT placeholder for a value that does not exist.
pub const UNAVAILABLE: &str = "[UNAVAILABLE]";
/// The XCLIENT placeholder for a value that could not be found for now.
pub const TEMPUNAVAIL: &str = "[TEMPUNAVAIL]";

/// What floodgate knows about its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XclientAttrs<'a> {
    /// Client IP address.
    pub addr: IpAddr,
    /// Client TCP port.
    pub port: u16,
    /// Forward-confirmed reverse name (`NAME`).
    pub name: &'a ClientName,
    /// Reverse name as the PTR record gives it, unverified (`REVERSE_NAME`).
    pub reverse_name: &'a ClientName,
    /// HELO/EHLO argument; `None` sends `[UNAVAILABLE]`.
    pub helo: Option<&'a str>,
    /// `"SMTP"` or `"ESMTP"`.
    pub proto: &'a str,
    /// The address and port the client connected to (`DESTADDR`, `DESTPORT`).
    pub dest: Option<SocketAddr>,
    /// The SASL login name (`LOGIN`): sent only when set, for a message floodgate
    /// relays on its own (a released held message), never for a relayed session, whose
    /// AUTH upstream checks itself.
    pub login: Option<&'a str>,
}

/// Most octets of an XCLIENT line, CRLF included (RFC 5321 command limit).
pub const XCLIENT_MAX: usize = 512;

/// Whether upstream's XCLIENT list (`Capabilities::xclient`, upper case) can carry the
/// client's address at all: without `ADDR` XCLIENT cannot tell upstream who the client is.
pub fn xclient_carries_addr(supported: &[String]) -> bool {
    supported.iter().any(|s| s.eq_ignore_ascii_case("ADDR"))
}

/// An address as XCLIENT writes it: IPv4 plain (IPv4-mapped IPv6 too), IPv6 as `IPV6:...`.
fn xclient_addr(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("IPV6:{v6}"),
    }
}

/// One XCLIENT command line (with CRLF) carrying only the attributes
/// upstream advertised (`supported`, from `Capabilities::xclient`, any case).
///
/// Order: NAME, REVERSE_NAME, HELO, PROTO, DESTADDR, DESTPORT, PORT, ADDR — ADDR last,
/// because once ADDR is applied the proxy usually loses its XCLIENT authorisation. IPv6 is
/// sent as `IPV6:...`; IPv4-mapped IPv6 as plain IPv4. If the line would exceed 512
/// octets, HELO, then REVERSE_NAME, then NAME are sent as `[UNAVAILABLE]`. LOGIN is never
/// sent: upstream validates AUTH itself. Returns an empty vector when upstream supports
/// none of these attributes.
pub fn xclient_command(attrs: &XclientAttrs, supported: &[String]) -> Vec<u8> {
    let has = |a: &str| supported.iter().any(|s| s.eq_ignore_ascii_case(a));
    let unavailable = ClientName::Unavailable;
    let build = |name: &ClientName, reverse: &ClientName, helo: Option<&str>| -> Vec<u8> {
        let mut parts: Vec<String> = Vec::new();
        if has("NAME") {
            parts.push(format!("NAME={}", name.xclient_value()));
        }
        if has("REVERSE_NAME") {
            parts.push(format!("REVERSE_NAME={}", reverse.xclient_value()));
        }
        if has("HELO") {
            let helo = helo.map_or_else(|| UNAVAILABLE.to_string(), xtext_encode);
            parts.push(format!("HELO={helo}"));
        }
        if has("PROTO") {
            parts.push(format!("PROTO={}", xtext_encode(attrs.proto)));
        }
        if let Some(dest) = attrs.dest {
            if has("DESTADDR") {
                parts.push(format!("DESTADDR={}", xclient_addr(dest.ip())));
            }
            if has("DESTPORT") {
                parts.push(format!("DESTPORT={}", dest.port()));
            }
        }
        if let (Some(login), true) = (attrs.login, has("LOGIN")) {
            parts.push(format!("LOGIN={}", xtext_encode(login)));
        }
        if has("PORT") {
            parts.push(format!("PORT={}", attrs.port));
        }
        if has("ADDR") {
            parts.push(format!("ADDR={}", xclient_addr(attrs.addr)));
        }
        if parts.is_empty() {
            return Vec::new();
        }
        format!("XCLIENT {}\r\n", parts.join(" ")).into_bytes()
    };
    let attempts = [
        (attrs.name, attrs.reverse_name, attrs.helo),
        (attrs.name, attrs.reverse_name, None),
        (attrs.name, &unavailable, None),
    ];
    for (name, reverse, helo) in attempts {
        let line = build(name, reverse, helo);
        if line.len() <= XCLIENT_MAX {
            return line;
        }
    }
    build(&unavailable, &unavailable, None)
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

    /// What Postfix 3.7 lists in `250-XCLIENT`.
    fn postfix() -> Vec<String> {
        "NAME ADDR PROTO HELO REVERSE_NAME PORT LOGIN DESTADDR DESTPORT"
            .split(' ')
            .map(String::from)
            .collect()
    }

    const NONE: ClientName = ClientName::Unavailable;

    fn attrs<'a>(addr: &str, name: &'a ClientName, helo: Option<&'a str>) -> XclientAttrs<'a> {
        XclientAttrs {
            addr: addr.parse().unwrap(),
            port: 40000,
            name,
            reverse_name: name,
            helo,
            proto: "ESMTP",
            dest: None,
            login: None,
        }
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
        let name = ClientName::Known("host.example".into());
        let a = attrs("192.0.2.1", &name, Some("my pc"));
        assert_eq!(
            xclient_command(&a, &all()),
            b"XCLIENT NAME=host.example HELO=my+20pc PROTO=ESMTP PORT=40000 ADDR=192.0.2.1\r\n"
        );
    }

    #[test]
    fn everything_postfix_offers_with_addr_last() {
        let name = ClientName::Known("localhost".into());
        let reverse = ClientName::Known("ptr.example".into());
        let a = XclientAttrs {
            reverse_name: &reverse,
            dest: Some("[2001:db8::25]:587".parse().unwrap()),
            ..attrs("127.0.0.1", &name, Some("pc"))
        };
        assert_eq!(
            String::from_utf8(xclient_command(&a, &postfix())).unwrap(),
            "XCLIENT NAME=localhost REVERSE_NAME=ptr.example HELO=pc PROTO=ESMTP \
             DESTADDR=IPV6:2001:db8::25 DESTPORT=587 PORT=40000 ADDR=127.0.0.1\r\n"
        );
        // Without DESTADDR/DESTPORT/REVERSE_NAME offered, none is sent.
        assert!(!String::from_utf8(xclient_command(&a, &all()))
            .unwrap()
            .contains("DEST"));
    }

    #[test]
    fn placeholders() {
        let temp = ClientName::TempUnavailable;
        let a = XclientAttrs {
            reverse_name: &NONE,
            ..attrs("192.0.2.1", &temp, None)
        };
        let line = String::from_utf8(xclient_command(&a, &postfix())).unwrap();
        assert!(
            line.starts_with(
                "XCLIENT NAME=[TEMPUNAVAIL] REVERSE_NAME=[UNAVAILABLE] HELO=[UNAVAILABLE] "
            ),
            "{line}"
        );
        assert_eq!(ClientName::Known("a b".into()).xclient_value(), "a+20b");
        assert_eq!(ClientName::default(), ClientName::Unavailable);
        assert_eq!(temp.known(), None);
    }

    #[test]
    fn addr_is_what_makes_xclient_useful() {
        assert!(xclient_carries_addr(&postfix()));
        assert!(xclient_carries_addr(&["addr".to_string()]));
        assert!(!xclient_carries_addr(&[
            "NAME".to_string(),
            "HELO".to_string()
        ]));
        assert!(!xclient_carries_addr(&[]));
    }

    #[test]
    fn ipv6_unknowns_and_subset() {
        let a = XclientAttrs {
            proto: "SMTP",
            port: 1,
            ..attrs("2001:db8::1", &NONE, None)
        };
        assert_eq!(
            xclient_command(&a, &["addr".to_string(), "name".to_string()]),
            b"XCLIENT NAME=[UNAVAILABLE] ADDR=IPV6:2001:db8::1\r\n"
        );
        assert!(xclient_command(&a, &["LOGIN".to_string()]).is_empty());
        // LOGIN only when set and offered, before ADDR.
        let with_login = XclientAttrs {
            login: Some("al ice"),
            ..a
        };
        assert_eq!(
            xclient_command(&with_login, &["LOGIN".to_string(), "ADDR".to_string()]),
            b"XCLIENT LOGIN=al+20ice ADDR=IPV6:2001:db8::1\r\n"
        );
        assert_eq!(
            xclient_command(&with_login, &["addr".to_string()]),
            b"XCLIENT ADDR=IPV6:2001:db8::1\r\n"
        );
        assert!(xclient_command(&a, &[]).is_empty());
    }

    #[test]
    fn mapped_ipv4_is_plain() {
        let a = XclientAttrs {
            dest: Some("[::ffff:192.0.2.25]:25".parse().unwrap()),
            ..attrs("::ffff:192.0.2.9", &NONE, None)
        };
        assert_eq!(
            xclient_command(&a, &["ADDR".to_string(), "DESTADDR".to_string()]),
            b"XCLIENT DESTADDR=192.0.2.25 ADDR=192.0.2.9\r\n"
        );
    }

    #[test]
    fn stays_within_512() {
        let helo = "h".repeat(600);
        let name = ClientName::Known("n".repeat(250));
        let a = XclientAttrs {
            reverse_name: &NONE,
            ..attrs("192.0.2.1", &name, Some(&helo))
        };
        let line = String::from_utf8(xclient_command(&a, &all())).unwrap();
        assert!(line.len() <= XCLIENT_MAX);
        assert!(line.contains("HELO=[UNAVAILABLE]") && line.contains(name.known().unwrap()));
        let name = ClientName::Known("n".repeat(600));
        let a = XclientAttrs { name: &name, ..a };
        let line = String::from_utf8(xclient_command(&a, &all())).unwrap();
        assert!(line.len() <= XCLIENT_MAX);
        assert!(line.contains("NAME=[UNAVAILABLE]") && line.ends_with("ADDR=192.0.2.1\r\n"));
        // A long unverified name goes before the verified one.
        let long = ClientName::Known("r".repeat(300));
        let short = ClientName::Known(format!("{}.example", "o".repeat(200)));
        let a = XclientAttrs {
            name: &short,
            reverse_name: &long,
            ..a
        };
        let line = String::from_utf8(xclient_command(&a, &postfix())).unwrap();
        assert!(line.len() <= XCLIENT_MAX);
        assert!(
            line.contains(&format!(
                "NAME={} REVERSE_NAME=[UNAVAILABLE]",
                short.known().unwrap()
            )),
            "{line}"
        );
    }

    proptest! {
        /// Whatever the names and HELO, the line fits, ends in CRLF, has no other CR or LF,
        /// and ends with the client's address.
        #[test]
        fn line_is_bounded_and_clean(
            name in "\\PC{0,300}",
            helo in "\\PC{0,600}",
            v6 in any::<bool>(),
        ) {
            let name = ClientName::Known(name);
            let addr = if v6 { "2001:db8::7" } else { "198.51.100.7" };
            let a = attrs(addr, &name, Some(&helo));
            let line = xclient_command(&a, &postfix());
            prop_assert!(line.len() <= XCLIENT_MAX);
            prop_assert!(line.ends_with(b"\r\n"));
            let body = &line[..line.len() - 2];
            prop_assert!(!body.contains(&b'\r') && !body.contains(&b'\n'));
            let text = String::from_utf8(line.clone()).unwrap();
            prop_assert!(text.trim_end().ends_with(addr), "{}", text);
        }
    }
}
