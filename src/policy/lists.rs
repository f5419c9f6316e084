//! Named lists (`[lists]`): CIDR blocks, user names, addresses and domains, each entry with
//! an optional value (a per-key limit, for instance).
//!
//! One entry a line in a file (`#` starts a comment), or inline strings:
//! `<entry> [<value>]`. An entry that parses as an IP address or CIDR block matches client
//! addresses (the longest block wins); any other entry matches text, case-insensitively.
//! Addresses are looked up as `local@domain`, then `local@` (that local part at any domain),
//! then `domain`, then `@domain`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::config::Cidr;

/// One named list.
#[derive(Debug, Default, Clone)]
pub struct NamedList {
    cidrs: Vec<(Cidr, Option<Arc<str>>)>,
    text: HashMap<String, Option<Arc<str>>>,
}

/// Why a list entry was refused; `line` is 1-based within its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ListError {
    /// 1-based line (file) or entry number (inline).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl NamedList {
    /// Adds one entry line (`entry [value]`); blank lines and `#` comments are skipped.
    pub fn add_line(&mut self, line: &str, number: usize) -> Result<(), ListError> {
        let content = line.split('#').next().unwrap_or("");
        let lead = content.len() - content.trim_start().len();
        let content = content.trim();
        if content.is_empty() {
            return Ok(());
        }
        let mut words = content.split_whitespace();
        let entry = words.next().unwrap_or("");
        let value: Option<Arc<str>> = words.next().map(Arc::from);
        if let Some(extra) = words.next() {
            let col = content.find(extra).unwrap_or(0) + lead + 1;
            return Err(ListError {
                line: number,
                column: col,
                message: format!("unexpected {extra:?}: an entry is `<entry> [<value>]`"),
            });
        }
        let looks_ip = entry.contains(':') && !entry.contains('@')
            || entry.bytes().next().is_some_and(|b| b.is_ascii_digit())
                && entry
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b'.' || b == b'/');
        if looks_ip {
            let cidr: Cidr = entry
                .parse()
                .map_err(|e: crate::config::CidrError| ListError {
                    line: number,
                    column: lead + 1,
                    message: e.to_string(),
                })?;
            self.cidrs.push((cidr, value));
        } else {
            self.text.insert(entry.to_lowercase(), value);
        }
        Ok(())
    }

    /// Builds a list from text, one entry a line.
    pub fn from_text(text: &str) -> Result<NamedList, ListError> {
        let mut l = NamedList::default();
        for (i, line) in text.lines().enumerate() {
            l.add_line(line, i + 1)?;
        }
        l.sort();
        Ok(l)
    }

    /// Keeps CIDR blocks longest first so the first match is the most specific.
    pub fn sort(&mut self) {
        self.cidrs
            .sort_by_key(|(c, _)| std::cmp::Reverse(c.prefix()));
    }

    /// Every value given in the list.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.cidrs
            .iter()
            .filter_map(|(_, v)| v.as_deref())
            .chain(self.text.values().filter_map(|v| v.as_deref()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.cidrs.len() + self.text.len()
    }

    /// True when the list has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most specific block holding `ip`: `Some(value)` when listed.
    pub fn lookup_ip(&self, ip: IpAddr) -> Option<Option<&str>> {
        self.cidrs
            .iter()
            .find(|(c, _)| c.contains(ip))
            .map(|(_, v)| v.as_deref())
    }

    /// A text entry equal to `s` (case-insensitive).
    pub fn lookup_text(&self, s: &str) -> Option<Option<&str>> {
        self.text.get(&s.to_lowercase()).map(|v| v.as_deref())
    }

    /// An account (the folded login, see [`super::identity`]): its entry, or, when the
    /// account is a login of the default `realm` that was written without it, the entry of
    /// the bare login (`alice` in the list is the account `alice@example.org`).
    pub fn lookup_account(&self, account: &str, realm: Option<&str>) -> Option<Option<&str>> {
        self.lookup_text(account).or_else(|| {
            let (login, r) = account.rsplit_once('@')?;
            let realm = realm?;
            if r.eq_ignore_ascii_case(realm) {
                self.lookup_text(login)
            } else {
                None
            }
        })
    }

    /// An address: exact, then `local@`, then `domain`, then `@domain`.
    pub fn lookup_address(&self, addr: &str) -> Option<Option<&str>> {
        let lower = addr.to_lowercase();
        if let Some(v) = self.text.get(&lower) {
            return Some(v.as_deref());
        }
        let (local, domain) = lower.rsplit_once('@')?;
        let tries = [
            format!("{local}@"),
            domain.to_string(),
            format!("@{domain}"),
        ];
        tries
            .iter()
            .find_map(|k| self.text.get(k))
            .map(|v| v.as_deref())
    }
}

/// All named lists of a config.
#[derive(Debug, Default, Clone)]
pub struct Lists {
    lists: HashMap<String, NamedList>,
    login_realm: Option<String>,
}

impl Lists {
    /// Sets the realm of logins written without one (`[identity] default_realm`), for
    /// [`NamedList::lookup_account`].
    pub fn set_login_realm(&mut self, realm: Option<String>) {
        self.login_realm = realm;
    }

    /// The realm of logins written without one, if any.
    pub fn login_realm(&self) -> Option<&str> {
        self.login_realm.as_deref()
    }

    /// Adds a list under `name`.
    pub fn insert(&mut self, name: &str, list: NamedList) {
        self.lists.insert(name.to_string(), list);
    }

    /// The list called `name`.
    pub fn get(&self, name: &str) -> Option<&NamedList> {
        self.lists.get(name)
    }

    /// Whether a list called `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.lists.contains_key(name)
    }

    /// Names and sizes, sorted by name.
    pub fn summary(&self) -> Vec<(String, usize)> {
        let mut v: Vec<_> = self
            .lists
            .iter()
            .map(|(n, l)| (n.clone(), l.len()))
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entries_values_and_lookups() {
        let l = NamedList::from_text(
            "# bulk senders\n10.0.0.0/8 100\n10.1.2.0/24 5000 # mail hub\n2001:db8::/32\n\
             Alice\npostmaster@\nexample.org 7\n@sub.example.net\nbob@example.com 3\n",
        )
        .unwrap();
        assert_eq!(l.len(), 8);
        assert_eq!(l.lookup_ip("10.1.2.3".parse().unwrap()), Some(Some("5000")));
        assert_eq!(l.lookup_ip("10.9.2.3".parse().unwrap()), Some(Some("100")));
        assert_eq!(l.lookup_ip("2001:db8::1".parse().unwrap()), Some(None));
        assert_eq!(l.lookup_ip("192.0.2.1".parse().unwrap()), None);
        assert_eq!(l.lookup_text("alice"), Some(None));
        assert_eq!(l.lookup_address("PostMaster@any.org"), Some(None));
        assert_eq!(l.lookup_address("x@example.org"), Some(Some("7")));
        assert_eq!(l.lookup_address("x@sub.example.net"), Some(None));
        assert_eq!(l.lookup_address("bob@EXAMPLE.com"), Some(Some("3")));
        assert_eq!(l.lookup_address("carol@example.com"), None);
    }

    #[test]
    fn bad_entries_say_where() {
        let e = NamedList::from_text("10.0.0.0/8\n  10.0.0.0/40 3\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
        assert!(e.message.contains("prefix"), "{e}");
        let e = NamedList::from_text("a b c\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 5));
        let e = NamedList::from_text("1.2.3.999\n").unwrap_err();
        assert_eq!(e.line, 1);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,60}") {
            let _ = NamedList::from_text(&s);
        }

        #[test]
        fn listed_addresses_are_found(a in any::<u32>(), p in 0u8..=32) {
            let ip = std::net::Ipv4Addr::from(a);
            let l = NamedList::from_text(&format!("{ip}/{p} v")).unwrap();
            prop_assert_eq!(l.lookup_ip(IpAddr::V4(ip)), Some(Some("v")));
        }
    }

    #[test]
    fn an_account_of_the_default_realm_finds_its_bare_login() {
        let l = NamedList::from_text("alice\nBob@Example.org\n").unwrap();
        let realm = Some("example.org");
        assert!(l.lookup_account("alice@example.org", realm).is_some());
        assert!(l.lookup_account("bob@example.org", realm).is_some());
        assert!(l.lookup_account("alice@example.org", None).is_none());
        assert!(l.lookup_account("alice@other.net", realm).is_none());
        assert!(l.lookup_account("carol@example.org", realm).is_none());
        assert!(l.lookup_account("alice", realm).is_some());
    }
}
