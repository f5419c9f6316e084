//! One account, one key: a login folded as the SASL back-end folds it (`[identity]`), once,
//! where the session learns it, so that every key, list lookup, restriction, notice and
//! `unique=` value of the account sees the same name.
//!
//! **Case.** `login_fold = "lowercase"` lowercases the ASCII letters `A`–`Z` and nothing
//! else. That is what Dovecot's `%L` modifier does (`auth_username_format = %Lu`, its
//! default): `str_lcase` lowers byte by byte with `i_tolower`, ASCII only, so `ÄLICE` and
//! `äLICE` stay two accounts there. A Unicode lowercase (`str::to_lowercase`) would merge
//! accounts the back-end keeps apart, and count one person's mail against another's.
//!
//! **Realm.** With `default_realm`, a login without an `@` is the realm's account, as
//! Dovecot's `auth_default_realm` makes it: `alice` is keyed `alice@example.org`, the same
//! key as a login `alice@example.org`.
//!
//! **Keys an admin types** (`release`, `restrict`, `inspect`, `reset`, `held … --key`, the
//! console's key search) are folded by [`Identity::admin_key`]: the case fold only (a key
//! can be a domain or an address, so no realm is appended), and not for an IP address or
//! CIDR block (already in floodgate's own spelling of it, whatever the admin typed).

use std::borrow::Cow;
use std::net::IpAddr;

use crate::config::{IdentityConfig, LoginFold};

/// `[identity]` compiled: the fold of every login.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// How the case is folded.
    pub fold: LoginFold,
    /// The realm of a login without one, already in the fold's case.
    pub default_realm: Option<String>,
}

impl Identity {
    /// `[identity]` as written, compiled (the config checked the realm).
    pub fn compile(c: &IdentityConfig) -> Identity {
        let fold = c.login_fold;
        Identity {
            fold,
            default_realm: c
                .default_realm
                .as_ref()
                .map(|r| fold_case(fold, r.get_ref()).into_owned()),
        }
    }

    /// The account a login names: the login as the back-end folds it. Borrowed when the
    /// login is already in that form.
    pub fn fold<'a>(&self, login: &'a str) -> Cow<'a, str> {
        let folded = fold_case(self.fold, login);
        match &self.default_realm {
            Some(realm) if !login.is_empty() && !login.contains('@') => {
                Cow::Owned(format!("{folded}@{realm}"))
            }
            _ => folded,
        }
    }

    /// A key typed by an admin, in the form floodgate keeps: the case folded like a
    /// login's (no realm appended: a key can be a domain), an IP address or CIDR block as
    /// typed.
    pub fn admin_key<'a>(&self, key: &'a str) -> Cow<'a, str> {
        if is_address_or_block(key) {
            return Cow::Borrowed(key);
        }
        fold_case(self.fold, key)
    }

    /// How the fold reads in `floodgate check`.
    pub fn describe(&self) -> String {
        let case = match self.fold {
            LoginFold::Lowercase => {
                "login_fold=lowercase: logins are one account whatever the case of their ASCII letters (ALICE, Alice and alice are the key alice)"
            }
            LoginFold::Exact => {
                "login_fold=exact: logins are keyed as typed (Alice and alice are two accounts)"
            }
        };
        let realm = match &self.default_realm {
            Some(r) => format!(
                "; default_realm={r}: a login without @ is the account login@{r} (alice and alice@{r} are one key)"
            ),
            None => "; no default_realm: alice and alice@domain are two accounts".into(),
        };
        format!("identity: {case}{realm}; admin verbs fold the KEY they are given the same way (not an IP address)")
    }
}

/// `s` with its case folded by `fold`.
fn fold_case(fold: LoginFold, s: &str) -> Cow<'_, str> {
    match fold {
        LoginFold::Lowercase if s.bytes().any(|b| b.is_ascii_uppercase()) => {
            Cow::Owned(s.to_ascii_lowercase())
        }
        _ => Cow::Borrowed(s),
    }
}

/// Whether `key` is an IP address or a CIDR block.
fn is_address_or_block(key: &str) -> bool {
    let addr = key.split_once('/').map_or(key, |(a, bits)| {
        if bits.bytes().all(|b| b.is_ascii_digit()) && !bits.is_empty() {
            a
        } else {
            ""
        }
    });
    addr.parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn identity(text: &str) -> Identity {
        let c: IdentityConfig = toml::from_str(text).unwrap();
        Identity::compile(&c)
    }

    #[test]
    fn every_spelling_of_a_login_is_one_account() {
        let id = identity("");
        for login in ["alice", "ALICE", "Alice", "aLiCe"] {
            assert_eq!(id.fold(login), "alice", "{login}");
        }
        assert_eq!(id.fold("Alice@Example.ORG"), "alice@example.org");
        assert!(matches!(id.fold("alice"), Cow::Borrowed(_)));
    }

    #[test]
    fn lowercase_is_ascii_only_as_dovecot_folds() {
        let id = identity("");
        assert_eq!(id.fold("ÄLICE"), "Älice");
        assert_eq!(id.fold("ǅ"), "ǅ");
        assert_ne!(id.fold("ÄLICE"), id.fold("äLICE"));
    }

    #[test]
    fn exact_keeps_spellings_apart() {
        let id = identity("login_fold = \"exact\"");
        assert_eq!(id.fold("Alice"), "Alice");
        assert_ne!(id.fold("Alice"), id.fold("alice"));
        assert_eq!(id.admin_key("ALICE"), "ALICE");
    }

    #[test]
    fn the_default_realm_joins_the_bare_login_and_the_full_one() {
        let id = identity("default_realm = \"Example.org\"");
        assert_eq!(id.fold("Alice"), "alice@example.org");
        assert_eq!(id.fold("alice@EXAMPLE.org"), "alice@example.org");
        assert_eq!(id.fold("alice@other.net"), "alice@other.net");
        assert_eq!(id.fold(""), "");
        let exact = identity("login_fold = \"exact\"\ndefault_realm = \"Example.org\"");
        assert_eq!(exact.fold("Alice"), "Alice@Example.org");
    }

    #[test]
    fn admin_keys_fold_case_but_not_addresses_and_take_no_realm() {
        let id = identity("default_realm = \"example.org\"");
        assert_eq!(id.admin_key("ALICE"), "alice");
        assert_eq!(id.admin_key("Alice@Example.org"), "alice@example.org");
        assert_eq!(id.admin_key("2001:DB8::1"), "2001:DB8::1");
        assert_eq!(id.admin_key("2001:DB8::/32"), "2001:DB8::/32");
        assert_eq!(id.admin_key("192.0.2.7"), "192.0.2.7");
        assert_eq!(id.admin_key("Example.ORG"), "example.org");
        assert_eq!(id.admin_key("ABC/x"), "abc/x");
    }

    #[test]
    fn check_says_what_the_fold_does() {
        let d = identity("default_realm = \"example.org\"").describe();
        assert!(
            d.contains("login_fold=lowercase") && d.contains("alice@example.org"),
            "{d}"
        );
        let d = identity("login_fold = \"exact\"").describe();
        assert!(
            d.contains("login_fold=exact") && d.contains("no default_realm"),
            "{d}"
        );
    }

    proptest! {
        /// Folding twice is folding once, and the folded login has no ASCII capital.
        #[test]
        fn the_fold_is_idempotent(login in "\\PC{0,24}", realm in proptest::option::of("[a-zA-Z]{1,8}\\.[a-z]{2,4}")) {
            let id = Identity::compile(&IdentityConfig {
                login_fold: LoginFold::Lowercase,
                default_realm: realm.map(|r| toml::Spanned::new(0..0, r)),
            });
            let once = id.fold(&login).into_owned();
            prop_assert_eq!(id.fold(&once).into_owned(), once.clone());
            prop_assert!(!once.bytes().any(|b| b.is_ascii_uppercase()));
            prop_assert!(once.starts_with(&login.to_ascii_lowercase()));
        }

        /// Two logins fold alike exactly when they differ in ASCII case only (no realm).
        #[test]
        fn spellings_fold_alike(a in "[a-zA-Z0-9.]{1,10}", b in "[a-zA-Z0-9.]{1,10}") {
            let id = Identity::default();
            prop_assert_eq!(id.fold(&a) == id.fold(&b), a.eq_ignore_ascii_case(&b));
        }
    }
}
