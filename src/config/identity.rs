//! `[identity]` as written: how the SASL back-end names an account, so that one account is
//! one key (the fold itself is `policy::identity`'s).

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

/// How the back-end compares logins (`login_fold`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LoginFold {
    /// ASCII letters lowercased, as Dovecot's default `auth_username_format = %Lu`.
    #[default]
    Lowercase,
    /// The login as typed: for a back-end where `Alice` and `alice` are two accounts.
    Exact,
}

impl LoginFold {
    /// The config word (`lowercase`, `exact`).
    pub fn as_str(self) -> &'static str {
        match self {
            LoginFold::Lowercase => "lowercase",
            LoginFold::Exact => "exact",
        }
    }
}

/// `[identity]` as written.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// How logins are folded before they become keys (`lowercase` by default).
    #[serde(default)]
    pub login_fold: LoginFold,
    /// The realm a login without one belongs to (Dovecot's `auth_default_realm`):
    /// `alice` is the account `alice@REALM`.
    #[serde(default)]
    pub default_realm: Option<Spanned<String>>,
}

impl IdentityConfig {
    /// Checks `default_realm`: a domain name (ASCII letters, digits and hyphens in
    /// dot-separated labels); the problem and where it is written otherwise.
    pub fn check(&self) -> Result<(), (Range<usize>, String)> {
        let Some(realm) = &self.default_realm else {
            return Ok(());
        };
        match realm_problem(realm.get_ref()) {
            None => Ok(()),
            Some(why) => Err((
                realm.span(),
                format!(
                    "[identity] default_realm {:?} is not a domain: {why} (write it as the back-end appends it, e.g. \"example.org\")",
                    realm.get_ref()
                ),
            )),
        }
    }
}

/// What makes `realm` no domain name, if anything.
fn realm_problem(realm: &str) -> Option<&'static str> {
    if realm.is_empty() {
        return Some("it is empty (leave default_realm out for none)");
    }
    if realm.contains('@') {
        return Some("a realm is what follows the @, without it");
    }
    if realm.len() > 253 {
        return Some("it is longer than 253 characters");
    }
    for label in realm.split('.') {
        if label.is_empty() {
            return Some("it has an empty label (a leading, trailing or double dot)");
        }
        if label.len() > 63 {
            return Some("a label is longer than 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Some("only ASCII letters, digits, hyphens and dots belong in it");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some("a label starts or ends with a hyphen");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<IdentityConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn defaults_to_lowercase_without_a_realm() {
        let c = parse("").unwrap();
        assert_eq!(c.login_fold, LoginFold::Lowercase);
        assert!(c.default_realm.is_none());
        assert!(c.check().is_ok());
    }

    #[test]
    fn words_read_back() {
        for f in [LoginFold::Lowercase, LoginFold::Exact] {
            let c = parse(&format!("login_fold = \"{}\"", f.as_str())).unwrap();
            assert_eq!(c.login_fold, f);
        }
    }

    #[test]
    fn an_unknown_fold_names_the_words() {
        let e = parse("login_fold = \"upper\"").unwrap_err().to_string();
        assert!(e.contains("lowercase") && e.contains("exact"), "{e}");
    }

    #[test]
    fn realms_are_domains() {
        for good in [
            "example.org",
            "EXAMPLE.org",
            "mail-1.example.ac.uk",
            "localdomain",
        ] {
            let c = parse(&format!("default_realm = {good:?}")).unwrap();
            assert!(c.check().is_ok(), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("@example.org", "without it"),
            ("example..org", "empty label"),
            (".example.org", "empty label"),
            ("exa mple.org", "ASCII letters"),
            ("-example.org", "hyphen"),
            ("exämple.org", "ASCII letters"),
        ] {
            let c = parse(&format!("default_realm = {bad:?}")).unwrap();
            let (span, message) = c.check().unwrap_err();
            assert!(message.contains(why), "{bad}: {message}");
            assert!(message.contains("[identity] default_realm"), "{message}");
            assert!(!span.is_empty());
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(parse("realm = \"example.org\"").is_err());
    }
}
