//! `[alerts] mail_to`, `mail_from` and `mail_digest`, checked: who gets each alert by mail,
//! from which address, and when the daily digest goes out.

use std::ops::Range;

use toml::Spanned;

use crate::config::{AlertsConfig, Config, ConfigError};

/// Alert mail, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MailSettings {
    /// The recipients (envelope and `To:`), as written.
    pub to: Vec<String>,
    /// The `From:` address; `None`: `MAILER-DAEMON@` floodgate's host name.
    pub from: Option<String>,
    /// The local time of day of the daily digest; `None`: no digest.
    pub digest: Option<jiff::civil::Time>,
    /// `[admin] public_url`: the console's address, for the link to a key's page.
    pub public_url: Option<String>,
}

/// The domains reserved for examples (RFC 2606): mail to them reaches nobody.
pub const EXAMPLE_DOMAINS: [&str; 3] = ["example.org", "example.com", "example.net"];

impl MailSettings {
    /// The recipients at an example domain (`example.org` …, or a subdomain of one).
    pub fn example_recipients(&self) -> Vec<&str> {
        self.to
            .iter()
            .filter(|a| {
                let domain = a
                    .rsplit_once('@')
                    .map_or("", |(_, d)| d)
                    .to_ascii_lowercase();
                EXAMPLE_DOMAINS
                    .iter()
                    .any(|e| domain == *e || domain.ends_with(&format!(".{e}")))
            })
            .map(String::as_str)
            .collect()
    }
}

/// Whether `a` is a plain `local@domain` address floodgate can put in `RCPT TO:<a>` and in a
/// header field as it is: printable ASCII without spaces, quotes, brackets, commas or
/// semicolons, a local part and a domain, at most 254 octets.
pub fn plain_address(a: &str) -> bool {
    let Some((local, domain)) = a.rsplit_once('@') else {
        return false;
    };
    a.len() <= 254
        && !local.is_empty()
        && !domain.is_empty()
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains('@')
        && a.chars().all(|c| {
            c.is_ascii_graphic() && !matches!(c, '<' | '>' | '"' | '\\' | ',' | ';' | '(' | ')')
        })
}

/// `HH:MM` (24-hour clock) as a time of day.
fn time_of_day(text: &str) -> Option<jiff::civil::Time> {
    let (h, m) = text.trim().split_once(':')?;
    let ok = |s: &str| (1..=2).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    if !ok(h) || m.len() != 2 || !ok(m) {
        return None;
    }
    let (h, m) = (h.parse::<i8>().ok()?, m.parse::<i8>().ok()?);
    jiff::civil::Time::new(h, m, 0, 0).ok()
}

/// The mail settings of `a` (`None` without `mail_to`).
pub fn compile(config: &Config, a: &AlertsConfig) -> Result<Option<MailSettings>, ConfigError> {
    let at = |span: Range<usize>, message: String| config.error_at(span, message);
    let need_to = |v: &Option<Spanned<String>>, key: &str| match (v, &a.mail_to) {
        (Some(v), None) => Err(at(
            v.span(),
            format!("[alerts] {key} needs mail_to (the addresses alert mail goes to)"),
        )),
        _ => Ok(()),
    };
    need_to(&a.mail_from, "mail_from")?;
    need_to(&a.mail_digest, "mail_digest")?;
    let Some(to) = &a.mail_to else {
        return Ok(None);
    };
    if to.get_ref().is_empty() {
        return Err(at(
            to.span(),
            "[alerts] mail_to is empty: give at least one address, or remove the key".into(),
        ));
    }
    for addr in to.get_ref() {
        if !plain_address(addr) {
            return Err(at(
                to.span(),
                format!("[alerts] mail_to: {addr:?} is not a mail address (local@domain)"),
            ));
        }
    }
    let from = match &a.mail_from {
        Some(f) if !plain_address(f.get_ref()) => {
            return Err(at(
                f.span(),
                format!(
                    "[alerts] mail_from: {:?} is not a mail address (local@domain)",
                    f.get_ref()
                ),
            ))
        }
        f => f.as_ref().map(|f| f.get_ref().clone()),
    };
    let digest = match &a.mail_digest {
        Some(d) => Some(time_of_day(d.get_ref()).ok_or_else(|| {
            at(
                d.span(),
                format!(
                    "[alerts] mail_digest: {:?} is not a time of day HH:MM (the host's local \
                     time, e.g. \"08:00\")",
                    d.get_ref()
                ),
            )
        })?),
        None => None,
    };
    Ok(Some(MailSettings {
        to: to.get_ref().clone(),
        from,
        digest,
        public_url: config.admin.public_url.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_times() {
        for good in ["postmaster@example.org", "a.b+c@mx", "x@[192.0.2.1]"] {
            assert!(plain_address(good), "{good}");
        }
        for bad in [
            "",
            "postmaster",
            "@x",
            "a@",
            "a b@x",
            "a@x\r\nBcc: y",
            "<a@x>",
            "a@x,b@y",
            "a@.x",
        ] {
            assert!(!plain_address(bad), "{bad:?}");
        }
        assert_eq!(
            time_of_day("08:00"),
            jiff::civil::Time::new(8, 0, 0, 0).ok()
        );
        assert_eq!(time_of_day("7:05"), jiff::civil::Time::new(7, 5, 0, 0).ok());
        for bad in ["24:00", "08:60", "8", "08:0", "-1:00", "08:00:00", "ab:cd"] {
            assert_eq!(time_of_day(bad), None, "{bad}");
        }
    }

    #[test]
    fn example_recipients_are_found() {
        let m = MailSettings {
            to: vec![
                "postmaster@example.org".into(),
                "ops@mail.EXAMPLE.com".into(),
                "me@uni.ac.uk".into(),
                "x@notexample.net".into(),
            ],
            from: None,
            digest: None,
            public_url: None,
        };
        assert_eq!(
            m.example_recipients(),
            ["postmaster@example.org", "ops@mail.EXAMPLE.com"]
        );
    }
}
