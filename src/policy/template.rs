//! Templates: text with Exim-named variables (`${authenticated_id}`, `$sender_rate`), used for
//! keys and reply messages.
//!
//! Grammar: `$$` is a literal `$`; `$name` or `${name}` is a variable; `${client_ip/24}` and
//! `${client_ip/24/64}` give the client's network (IPv4 prefix, then IPv6 prefix; an IPv6
//! client keeps /128 when only one is given). Anything else after `$` is an error, so a typo
//! never silently becomes key text.

use std::fmt::Write as _;
use std::net::IpAddr;

/// A template variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    /// `authenticated_id` / `user`: the authenticated user: the name of an AUTH upstream
    /// answered 235, folded into its account (`[identity]`); empty before (never the name
    /// of a failed attempt).
    User,
    /// `auth_attempted_id`: the name the client gave in its latest AUTH exchange, accepted
    /// or not, folded like a login: a name the client chose, for the limits on failed AUTH; empty before the
    /// first exchange and in the check that precedes each one.
    AuthAttempt,
    /// `sender_host_address` / `client_ip`, optionally as a network.
    ClientIp {
        /// IPv4 prefix length (32: the address itself).
        v4: u8,
        /// IPv6 prefix length (128: the address itself).
        v6: u8,
    },
    /// `sender_helo_name` / `helo`.
    Helo,
    /// `sender_address`: the envelope sender.
    Sender,
    /// `sender_address_domain` / `sender_domain`.
    SenderDomain,
    /// `recipient`: the recipient being judged.
    Recipient,
    /// `local_part`: the recipient's local part.
    LocalPart,
    /// `domain`: the recipient's domain.
    Domain,
    /// `header_from`: the address in the header From.
    HeaderFrom,
    /// `header_from_domain`.
    HeaderFromDomain,
    /// `listener`: the listener's name.
    Listener,
    /// `message_size`.
    MessageSize,
    /// `recipients_count`.
    RecipientsCount,
    /// `sender_rate`: the computed rate (or bucket level).
    SenderRate,
    /// `sender_rate_limit`: the limit as written.
    SenderRateLimit,
    /// `sender_rate_period`: the period as written.
    SenderRatePeriod,
    /// `retry_after`: whole seconds until the event would pass.
    RetryAfter,
    /// `limit_name`: the `name` of the limit.
    LimitName,
    /// `primary_hostname`: floodgate's `[server] hostname`.
    Hostname,
    /// `restricted_since`: when the key's restriction began (RFC 3339, UTC; restricted
    /// answers only).
    RestrictedSince,
    /// `restricted_until`: when it ends (RFC 3339, UTC), or `released` when it has no end
    /// (so that `until ${restricted_until}` reads `until released`).
    RestrictedUntil,
    /// `fingerprint`: the message's near-duplicate fingerprint, one value per band (stage
    /// message only; a message key, see [`Var::is_message_key`]).
    Fingerprint,
    /// `link_domain`: each registered domain the message's text links to (a message key).
    LinkDomain,
    /// `subject_shape`: the Subject with digits and random tokens masked (a message key).
    SubjectShape,
}

impl Var {
    /// Every variable name the grammar accepts, with its variable.
    pub const NAMES: &'static [(&'static str, Var)] = &[
        ("authenticated_id", Var::User),
        ("user", Var::User),
        ("auth_attempted_id", Var::AuthAttempt),
        ("sender_host_address", Var::ClientIp { v4: 32, v6: 128 }),
        ("client_ip", Var::ClientIp { v4: 32, v6: 128 }),
        ("sender_helo_name", Var::Helo),
        ("helo", Var::Helo),
        ("sender_address", Var::Sender),
        ("sender", Var::Sender),
        ("sender_address_domain", Var::SenderDomain),
        ("sender_domain", Var::SenderDomain),
        ("recipient", Var::Recipient),
        ("local_part", Var::LocalPart),
        ("domain", Var::Domain),
        ("recipient_domain", Var::Domain),
        ("header_from", Var::HeaderFrom),
        ("header_from_domain", Var::HeaderFromDomain),
        ("listener", Var::Listener),
        ("message_size", Var::MessageSize),
        ("recipients_count", Var::RecipientsCount),
        ("sender_rate", Var::SenderRate),
        ("sender_rate_limit", Var::SenderRateLimit),
        ("sender_rate_period", Var::SenderRatePeriod),
        ("retry_after", Var::RetryAfter),
        ("limit_name", Var::LimitName),
        ("primary_hostname", Var::Hostname),
        ("restricted_since", Var::RestrictedSince),
        ("restricted_until", Var::RestrictedUntil),
        ("fingerprint", Var::Fingerprint),
        ("link_domain", Var::LinkDomain),
        ("subject_shape", Var::SubjectShape),
    ];

    fn by_name(name: &str) -> Option<Var> {
        Var::NAMES.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }

    /// Whether the variable is a message key: computed from the whole message at the end
    /// of data, with any number of values (none, one, or one per band or domain). A key
    /// template with one expands once per value.
    pub fn is_message_key(self) -> bool {
        matches!(self, Var::Fingerprint | Var::LinkDomain | Var::SubjectShape)
    }
}

/// Why a template was refused; `at` is the byte offset in the template text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {})", at + 1)]
pub struct TemplateError {
    /// Byte offset of the problem.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(String),
    Var(Var),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Template {
    parts: Vec<Part>,
    text: String,
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'
}

impl Template {
    /// Whether the template reads the header From (`$header_from`, `$header_from_domain`).
    pub fn reads_header_from(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(Var::HeaderFrom | Var::HeaderFromDomain)))
    }

    /// Parses template text.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let b = text.as_bytes();
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut i = 0;
        while i < b.len() {
            let Some(off) = text[i..].find('$') else {
                lit.push_str(&text[i..]);
                break;
            };
            lit.push_str(&text[i..i + off]);
            let at = i + off;
            i = at + 1;
            let err = |message: String| TemplateError { at, message };
            match b.get(i) {
                Some(b'$') => {
                    lit.push('$');
                    i += 1;
                    continue;
                }
                Some(b'{') => {
                    let close = text[i..]
                        .find('}')
                        .ok_or_else(|| err("`${` without a closing `}`".into()))?;
                    let inner = &text[i + 1..i + close];
                    i += close + 1;
                    let var = parse_braced(inner).map_err(|e| err(e.to_string()))?;
                    flush(&mut parts, &mut lit);
                    parts.push(Part::Var(var));
                }
                Some(&c) if is_name_byte(c) => {
                    let end = b[i..]
                        .iter()
                        .position(|&c| !is_name_byte(c))
                        .map_or(b.len(), |p| i + p);
                    let name = &text[i..end];
                    let var = Var::by_name(name)
                        .ok_or_else(|| err(format!("unknown variable `${name}`")))?;
                    i = end;
                    flush(&mut parts, &mut lit);
                    parts.push(Part::Var(var));
                }
                _ => {
                    return Err(err(
                        "`$` must be followed by a variable name (write `$$` for a `$`)".into(),
                    ))
                }
            }
        }
        flush(&mut parts, &mut lit);
        Ok(Template {
            parts,
            text: text.to_string(),
        })
    }

    /// The text as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The variables used, in order.
    pub fn vars(&self) -> impl Iterator<Item = Var> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(*v),
            Part::Lit(_) => None,
        })
    }

    /// The message keys the template uses, in order (see [`Var::is_message_key`]).
    pub fn message_keys(&self) -> impl Iterator<Item = Var> + '_ {
        self.vars().filter(|v| v.is_message_key())
    }

    /// Expands the template once per value of its message key `var`, `value` giving the
    /// other variables; no texts when the message has no value of it.
    pub fn expand_each(
        &self,
        var: Var,
        values: &[String],
        mut value: impl FnMut(Var, &mut String),
    ) -> Vec<String> {
        values
            .iter()
            .map(|one| {
                self.expand(|v, out| {
                    if v == var {
                        out.push_str(one)
                    } else {
                        value(v, out)
                    }
                })
            })
            .collect()
    }

    /// Expands the template; `value` appends a variable's value to the output.
    pub fn expand(&self, mut value: impl FnMut(Var, &mut String)) -> String {
        let mut out = String::with_capacity(self.text.len() + 16);
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Var(v) => value(*v, &mut out),
            }
        }
        out
    }
}

fn flush(parts: &mut Vec<Part>, lit: &mut String) {
    if !lit.is_empty() {
        parts.push(Part::Lit(std::mem::take(lit)));
    }
}

/// Why the inside of a `${...}` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BracedError {
    /// No variable has this name.
    #[error("unknown variable `${{{0}}}`")]
    Unknown(String),
    /// A prefix length after a variable other than `client_ip`.
    #[error("only client_ip takes a prefix length, not `{0}`")]
    NotPrefixed(String),
    /// More than an IPv4 and an IPv6 prefix length.
    #[error("client_ip takes at most two prefix lengths (IPv4, then IPv6)")]
    TooManyPrefixes,
    /// A prefix length that is not a number up to the address length.
    #[error("prefix length `{text}` must be a number from 0 to {max}")]
    BadPrefix {
        /// The prefix length as written.
        text: String,
        /// The largest allowed.
        max: u8,
    },
}

fn parse_braced(inner: &str) -> Result<Var, BracedError> {
    let mut items = inner.split('/');
    let name = items.next().unwrap_or("").trim();
    let var = Var::by_name(name).ok_or_else(|| BracedError::Unknown(name.to_string()))?;
    let prefixes: Vec<&str> = items.collect();
    if prefixes.is_empty() {
        return Ok(var);
    }
    if !matches!(var, Var::ClientIp { .. }) {
        return Err(BracedError::NotPrefixed(name.to_string()));
    }
    if prefixes.len() > 2 {
        return Err(BracedError::TooManyPrefixes);
    }
    let num = |t: &str, max: u8| -> Result<u8, BracedError> {
        t.trim()
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| BracedError::BadPrefix {
                text: t.to_string(),
                max,
            })
    };
    let v4 = num(prefixes[0], 32)?;
    let v6 = match prefixes.get(1) {
        Some(t) => num(t, 128)?,
        None => 128,
    };
    Ok(Var::ClientIp { v4, v6 })
}

/// The text of `ip` under a prefix: the address itself for a full prefix, otherwise the
/// network in CIDR form (`192.0.2.0/24`). IPv4-mapped IPv6 addresses count as IPv4.
pub fn network_text(ip: IpAddr, v4: u8, v6: u8, out: &mut String) {
    let ip = match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        other => other,
    };
    match ip {
        IpAddr::V4(a) if v4 >= 32 => {
            let _ = write!(out, "{a}");
        }
        IpAddr::V4(a) => {
            let mask = if v4 == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(v4))
            };
            let n = std::net::Ipv4Addr::from(u32::from(a) & mask);
            let _ = write!(out, "{n}/{v4}");
        }
        IpAddr::V6(a) if v6 >= 128 => {
            let _ = write!(out, "{a}");
        }
        IpAddr::V6(a) => {
            let mask = if v6 == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(v6))
            };
            let n = std::net::Ipv6Addr::from(u128::from(a) & mask);
            let _ = write!(out, "{n}/{v6}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn show(t: &Template) -> String {
        t.expand(|v, out| {
            let _ = write!(out, "<{v:?}>");
        })
    }

    #[test]
    fn variables_and_literals() {
        let t = Template::parse("u=${authenticated_id} ip=$sender_host_address $$5").unwrap();
        assert_eq!(show(&t), "u=<User> ip=<ClientIp { v4: 32, v6: 128 }> $5");
        assert!(t.vars().next().is_some());
        assert!(Template::parse("all").unwrap().vars().next().is_none());
        assert!(Template::parse("").unwrap().vars().next().is_none());
        let t = Template::parse("${auth_attempted_id}/$user").unwrap();
        assert_eq!(show(&t), "<AuthAttempt>/<User>");
    }

    #[test]
    fn message_keys_expand_once_per_value() {
        let t = Template::parse("fp:${fingerprint}/$user").unwrap();
        assert_eq!(t.message_keys().collect::<Vec<_>>(), [Var::Fingerprint]);
        let values = ["b0:aa".to_string(), "b1:bb".to_string()];
        let out = t.expand_each(Var::Fingerprint, &values, |v, out| {
            assert_eq!(v, Var::User);
            out.push_str("alice")
        });
        assert_eq!(out, ["fp:b0:aa/alice", "fp:b1:bb/alice"]);
        assert!(t.expand_each(Var::Fingerprint, &[], |_, _| {}).is_empty());
        for name in ["link_domain", "subject_shape"] {
            let t = Template::parse(&format!("${{{name}}}")).unwrap();
            assert!(t.vars().next().unwrap().is_message_key());
        }
        assert!(!Var::User.is_message_key());
    }

    #[test]
    fn prefixes() {
        let t = Template::parse("${client_ip/24/64}").unwrap();
        assert_eq!(t.vars().next(), Some(Var::ClientIp { v4: 24, v6: 64 }));
        let t = Template::parse("${client_ip/16}").unwrap();
        assert_eq!(t.vars().next(), Some(Var::ClientIp { v4: 16, v6: 128 }));
        let mut s = String::new();
        network_text("192.0.2.77".parse().unwrap(), 24, 64, &mut s);
        s.push(' ');
        network_text("2001:db8:1:2:3::9".parse().unwrap(), 24, 64, &mut s);
        s.push(' ');
        network_text("::ffff:10.1.2.3".parse().unwrap(), 32, 64, &mut s);
        assert_eq!(s, "192.0.2.0/24 2001:db8:1:2::/64 10.1.2.3");
    }

    #[test]
    fn errors_say_where() {
        let e = Template::parse("abc ${nope}").unwrap_err();
        assert_eq!(e.at, 4);
        assert!(e.message.contains("unknown variable"), "{e}");
        assert!(Template::parse("${user").is_err());
        assert!(Template::parse("$ x").is_err());
        assert!(Template::parse("$").is_err());
        assert!(Template::parse("${user/24}").is_err());
        assert!(Template::parse("${client_ip/33}").is_err());
        assert!(Template::parse("${client_ip/24/129}").is_err());
        assert!(Template::parse("${client_ip/1/2/3}").is_err());
        assert!(Template::parse("$Authenticated_id").is_err());
        assert!(Template::parse("${auth_attempted_id/24}").is_err());
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = Template::parse(&s);
        }

        #[test]
        fn literal_text_round_trips(s in "[^$]{0,40}") {
            let t = Template::parse(&s).unwrap();
            prop_assert!(t.vars().next().is_none());
            prop_assert_eq!(t.expand(|_, _| {}), s);
        }

        #[test]
        fn escaped_dollars_round_trip(s in "[a-z$ ]{0,30}") {
            let escaped = s.replace('$', "$$");
            let t = Template::parse(&escaped).unwrap();
            prop_assert_eq!(t.expand(|_, _| {}), s);
        }

        #[test]
        fn networks_contain_the_address(a in any::<u32>(), p in 0u8..=32) {
            let mut s = String::new();
            network_text(IpAddr::V4(a.into()), p, 128, &mut s);
            let c: crate::config::Cidr = s.parse().unwrap();
            prop_assert!(c.contains(IpAddr::V4(a.into())));
        }
    }
}
