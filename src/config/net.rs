//! CIDR blocks for trusted proxies and lists.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::de::{self, Deserializer};
use serde::Deserialize;

/// An address block such as `192.0.2.0/24` or `2001:db8::/32`; a bare address is a /32 or /128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a CIDR text was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CidrError {
    /// Not an address.
    #[error("{0:?} is not an IP address or CIDR block")]
    Address(String),
    /// Prefix length too long for the family, or not a number.
    #[error("{0:?} has a bad prefix length")]
    Prefix(String),
}

impl Cidr {
    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this block (an IPv4-mapped IPv6 address matches IPv4 blocks).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = mask32(self.prefix);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = mask128(self.prefix);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

fn mask128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix))
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Address(s.to_string()))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let p: u8 = p.parse().map_err(|_| CidrError::Prefix(s.to_string()))?;
                if p > max {
                    return Err(CidrError::Prefix(s.to_string()));
                }
                p
            }
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn contains() {
        let c: Cidr = "192.0.2.0/24".parse().unwrap();
        assert!(c.contains("192.0.2.77".parse().unwrap()));
        assert!(!c.contains("192.0.3.1".parse().unwrap()));
        assert!(c.contains("::ffff:192.0.2.1".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!v6.contains("192.0.2.1".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn errors() {
        assert_eq!(
            "1.2.3.4/33".parse::<Cidr>(),
            Err(CidrError::Prefix("1.2.3.4/33".into()))
        );
        assert_eq!(
            "example/8".parse::<Cidr>(),
            Err(CidrError::Address("example/8".into()))
        );
        assert!("1.2.3.4/x".parse::<Cidr>().is_err());
    }

    proptest! {
        #[test]
        fn block_contains_its_network(a in any::<u32>(), p in 0u8..=32) {
            let ip = std::net::Ipv4Addr::from(a);
            let c: Cidr = format!("{ip}/{p}").parse().unwrap();
            prop_assert!(c.contains(IpAddr::V4(ip)));
        }
        #[test]
        fn never_panics(s in ".{0,40}") { let _ = s.parse::<Cidr>(); }
    }
}
