//! PROXY protocol v1 and v2 (HAProxy `proxy-protocol.txt`): reading the
//! header a load balancer puts in front of a connection, and writing a v2
//! header towards upstream.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use thiserror::Error;

/// The 12-octet v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Longest v1 header, CRLF included.
pub const V1_MAX: usize = 107;
/// Largest v2 header accepted, the 16-octet fixed part and TLVs included.
pub const V2_MAX: usize = 4096;

/// Addresses carried by a PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The original client; `None` for LOCAL / UNKNOWN / unsupported families
    /// (then the socket's own peer address applies).
    pub source: Option<SocketAddr>,
    /// The address the client connected to; `None` as for `source`.
    pub destination: Option<SocketAddr>,
}

impl ProxyHeader {
    const UNKNOWN: ProxyHeader = ProxyHeader {
        source: None,
        destination: None,
    };
}

/// Why a PROXY header was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProxyHeaderError {
    /// The bytes are neither a v1 nor a v2 header.
    #[error("not a PROXY protocol header")]
    NotProxy,
    /// A v1 line longer than 107 octets.
    #[error("PROXY v1 header longer than 107 octets")]
    V1TooLong,
    /// A malformed v1 line.
    #[error("malformed PROXY v1 header")]
    V1Syntax,
    /// A v2 version nibble other than 2.
    #[error("unsupported PROXY v2 version")]
    V2Version,
    /// A v2 command other than LOCAL or PROXY.
    #[error("unsupported PROXY v2 command")]
    V2Command,
    /// A v2 family/protocol byte that is invalid or not a stream.
    #[error("unsupported PROXY v2 address family or protocol")]
    V2Family,
    /// A v2 header longer than the cap.
    #[error("PROXY v2 header longer than {V2_MAX} octets")]
    V2TooLong,
    /// The v2 length is too short for its address family.
    #[error("PROXY v2 address block truncated")]
    V2Truncated,
    /// The v2 TLVs do not fill the header exactly.
    #[error("malformed PROXY v2 TLV")]
    V2Tlv,
}

/// Parses a PROXY header at the start of `buf`.
///
/// `Ok(None)`: need more bytes. `Ok(Some((header, consumed)))`: the header
/// occupied the first `consumed` octets. `Err`: anything malformed, including
/// a v1 line over 107 octets and a v2 header over [`V2_MAX`].
pub fn parse_proxy_header(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyHeaderError> {
    const V1_PREFIX: &[u8] = b"PROXY ";
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] {
        if n < V2_SIGNATURE.len() {
            return Ok(None);
        }
        return parse_v2(buf);
    }
    let n = buf.len().min(V1_PREFIX.len());
    if buf[..n] == V1_PREFIX[..n] {
        if n < V1_PREFIX.len() {
            return Ok(None);
        }
        return parse_v1(buf);
    }
    Err(ProxyHeaderError::NotProxy)
}

fn parse_v1(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyHeaderError> {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX {
            Err(ProxyHeaderError::V1TooLong)
        } else {
            Ok(None)
        };
    };
    if lf == 0 || buf[lf - 1] != b'\r' {
        return Err(ProxyHeaderError::V1Syntax);
    }
    let line = std::str::from_utf8(&buf[..lf - 1]).map_err(|_| ProxyHeaderError::V1Syntax)?;
    let words: Vec<&str> = line.split(' ').collect();
    let header = match words.as_slice() {
        ["PROXY", "UNKNOWN", ..] => ProxyHeader::UNKNOWN,
        ["PROXY", fam @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let v6 = *fam == "TCP6";
            let ip = |s: &str| -> Result<IpAddr, ProxyHeaderError> {
                let ip = if v6 {
                    IpAddr::V6(
                        s.parse::<Ipv6Addr>()
                            .map_err(|_| ProxyHeaderError::V1Syntax)?,
                    )
                } else {
                    IpAddr::V4(
                        s.parse::<Ipv4Addr>()
                            .map_err(|_| ProxyHeaderError::V1Syntax)?,
                    )
                };
                Ok(ip)
            };
            ProxyHeader {
                source: Some(SocketAddr::new(ip(src)?, port(sport)?)),
                destination: Some(SocketAddr::new(ip(dst)?, port(dport)?)),
            }
        }
        _ => return Err(ProxyHeaderError::V1Syntax),
    };
    Ok(Some((header, lf + 1)))
}

/// A decimal port 0..=65535 without leading zeros.
fn port(s: &str) -> Result<u16, ProxyHeaderError> {
    let ok = !s.is_empty()
        && s.len() <= 5
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    if !ok {
        return Err(ProxyHeaderError::V1Syntax);
    }
    s.parse().map_err(|_| ProxyHeaderError::V1Syntax)
}

fn parse_v2(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyHeaderError> {
    if buf.len() < 16 {
        // Check what we already have so garbage fails fast.
        if let Some(&vc) = buf.get(12) {
            check_ver_cmd(vc)?;
        }
        return Ok(None);
    }
    let cmd = check_ver_cmd(buf[12])?;
    let fam = buf[13];
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let total = 16 + len;
    if total > V2_MAX {
        return Err(ProxyHeaderError::V2TooLong);
    }
    if buf.len() < total {
        return Ok(None);
    }
    let body = &buf[16..total];
    if cmd == 0 {
        // LOCAL: a health check or the proxy's own connection; the address
        // block, if any, must be ignored.
        return Ok(Some((ProxyHeader::UNKNOWN, total)));
    }
    let (header, addr_len) = match fam {
        0x00 => (ProxyHeader::UNKNOWN, 0),
        0x11 => {
            if body.len() < 12 {
                return Err(ProxyHeaderError::V2Truncated);
            }
            let a = |i: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    body[i],
                    body[i + 1],
                    body[i + 2],
                    body[i + 3],
                ))
            };
            let p = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
            let h = ProxyHeader {
                source: Some(SocketAddr::new(a(0), p(8))),
                destination: Some(SocketAddr::new(a(4), p(10))),
            };
            (h, 12)
        }
        0x21 => {
            if body.len() < 36 {
                return Err(ProxyHeaderError::V2Truncated);
            }
            let a = |i: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&body[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            let p = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
            let h = ProxyHeader {
                source: Some(SocketAddr::new(a(0), p(32))),
                destination: Some(SocketAddr::new(a(16), p(34))),
            };
            (h, 36)
        }
        // AF_UNIX stream: no IP addresses to use.
        0x31 => {
            if body.len() < 216 {
                return Err(ProxyHeaderError::V2Truncated);
            }
            (ProxyHeader::UNKNOWN, 216)
        }
        _ => return Err(ProxyHeaderError::V2Family),
    };
    // UNSPEC carries no address block; everything after it is TLVs.
    check_tlvs(&body[addr_len..])?;
    Ok(Some((header, total)))
}

/// Returns the command (0 LOCAL, 1 PROXY) of a version/command byte.
fn check_ver_cmd(vc: u8) -> Result<u8, ProxyHeaderError> {
    if vc >> 4 != 2 {
        return Err(ProxyHeaderError::V2Version);
    }
    match vc & 0x0f {
        c @ (0 | 1) => Ok(c),
        _ => Err(ProxyHeaderError::V2Command),
    }
}

/// TLVs: type (1), length (2, big-endian), value; they must fill `tlvs` exactly.
fn check_tlvs(mut tlvs: &[u8]) -> Result<(), ProxyHeaderError> {
    while !tlvs.is_empty() {
        if tlvs.len() < 3 {
            return Err(ProxyHeaderError::V2Tlv);
        }
        let len = usize::from(u16::from_be_bytes([tlvs[1], tlvs[2]]));
        tlvs = tlvs.get(3 + len..).ok_or(ProxyHeaderError::V2Tlv)?;
    }
    Ok(())
}

/// A v2 PROXY header (command PROXY, TCP) for `source` → `destination`.
/// Mixed families are written as IPv6, with the IPv4 side mapped
/// (`::ffff:a.b.c.d`).
pub fn encode_proxy_v2(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(52);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(0x11);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            out.push(0x21);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests;
