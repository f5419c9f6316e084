//! The short mail that tells a user their account is restricted (`notify_user`): who gets
//! it, and its text. Pure: the mail is handed to a [`Notifier`], which sends it through
//! upstream from the null sender, off the session path.

use super::action::{restricted_reply, utc_text, var_value};
use super::model::LimitDef;
use super::Facts;
use crate::store::Restriction;

/// One notice to send: the recipient and the message (CRLF lines, not dot-stuffed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserNotice {
    /// The envelope recipient and `To:` (without angle brackets).
    pub to: String,
    /// The restricted key.
    pub key: String,
    /// The restricting limit.
    pub limit: String,
    /// The message: header section and body.
    pub message: Vec<u8>,
}

/// Sends user notices. [`Notifier::notify`] runs on the session path: it must return at
/// once (queue or spawn the work) and never fail the session; a notice that cannot be sent
/// is logged and counted by the implementation.
pub trait Notifier: Send + Sync {
    /// Sends `notice`.
    fn notify(&self, notice: UserNotice);
}

/// Why no notice is sent for a restriction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoticeError {
    /// The template expanded to nothing (e.g. no authenticated user).
    #[error("notify_user gives no address for this session")]
    Empty,
    /// The expanded text cannot be an envelope address.
    #[error("notify_user gives {0:?}, not a mail address")]
    BadAddress(String),
}

/// Whether `a` can be sent as `RCPT TO:<a>`: printable ASCII or UTF-8 without spaces,
/// angle brackets, quotes or control characters, at most 254 octets.
fn plausible_address(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= 254
        && !a.starts_with('@')
        && !a.ends_with('@')
        && a.chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && !matches!(c, '<' | '>' | '"' | '\\'))
}

/// Header field text: one line, no control characters.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The notice of restriction `r` made by limit `def` (with `notify_user`) for the session
/// of `facts`; `Ok(None)` when the limit has no `notify_user`.
pub fn user_notice(
    def: &LimitDef,
    r: &Restriction,
    facts: &Facts,
    hostname: &str,
    date_secs: i64,
) -> Result<Option<UserNotice>, NoticeError> {
    let Some(t) = def.restrict.as_ref().and_then(|x| x.notify.as_ref()) else {
        return Ok(None);
    };
    let to = t.expand(|v, out| var_value(v, facts, Some(def), None, hostname, out));
    let to = to.trim();
    if to.is_empty() {
        return Err(NoticeError::Empty);
    }
    if !plausible_address(to) {
        return Err(NoticeError::BadAddress(to.to_string()));
    }
    let answer = restricted_reply(Some(def), r, facts, hostname);
    let until = r
        .until_us
        .map_or_else(|| "until the postmaster releases it".to_string(), utc_text);
    let rate = r
        .rate
        .map(|v| format!(" (the rate that tripped it: {})", (v * 10.0).round() / 10.0))
        .unwrap_or_default();
    let limit_value = if r.limit_text.is_empty() {
        String::new()
    } else {
        format!(", {}", r.limit_text)
    };
    let held = def.restrict.as_ref().is_some_and(|x| x.hold);
    let meanwhile = if held {
        "Meanwhile the messages you send are accepted but held: they are not delivered \
         unless the postmaster releases them."
    } else {
        "Meanwhile every message you send is refused with the answer above; nothing you \
         send is delivered."
    };
    let body = format!(
        "Your account {key} may not send mail for now: floodgate on {hostname} restricted it\r\n\
         because it sent more than its limit allows. This often means that someone else\r\n\
         knows its password.\r\n\
         \r\n\
         Restricted since: {since}\r\n\
         Restricted until: {until}\r\n\
         Limit:            {limit}{limit_value}{rate}\r\n\
         \r\n\
         Your mail program is told:\r\n\
         \x20 {code} {text}\r\n\
         \r\n\
         {meanwhile}\r\n\
         \r\n\
         If you did not send those messages, change your password and contact your\r\n\
         postmaster as the answer above says.\r\n\
         \r\n\
         This message was sent automatically; replies are not read.\r\n",
        key = one_line(&r.key),
        since = utc_text(r.since_us),
        limit = one_line(&r.limit),
        limit_value = one_line(&limit_value),
        code = answer.code,
        text = one_line(&answer.lines.join(" ")),
    );
    let header = format!(
        "From: floodgate <postmaster@{hostname}>\r\n\
         To: <{to}>\r\n\
         Subject: Your account {key} is restricted from sending mail\r\n\
         Date: {date}\r\n\
         Message-ID: <restricted.{since_us}.{tag}@{hostname}>\r\n\
         Auto-Submitted: auto-generated\r\n\
         X-Auto-Response-Suppress: All\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Transfer-Encoding: 8bit\r\n\
         \r\n",
        hostname = one_line(hostname),
        key = one_line(&r.key),
        date = crate::smtp::received::rfc5322_date(date_secs),
        since_us = r.since_us,
        tag = crate::store::now_micros().rem_euclid(1_000_000_007),
    );
    let mut message = header.into_bytes();
    message.extend_from_slice(body.as_bytes());
    Ok(Some(UserNotice {
        to: to.to_string(),
        key: r.key.clone(),
        limit: r.limit.clone(),
        message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn def(notify: &str, message: Option<&str>) -> LimitDef {
        let message = message.map_or(String::new(), |m| format!("restricted_message = {m:?}\n"));
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n\
             [[limit]]\nname = \"per-user\"\ncount = \"messages\"\n\
             key = \"${{authenticated_id}}\"\nrate = \"5 / 1h\"\nburst = \"5\"\naction = \"restrict\"\n\
             notify_user = {notify:?}\n{message}"
        );
        let c = crate::config::Config::parse(std::path::Path::new("/etc/floodgate/t.toml"), &text)
            .unwrap();
        crate::policy::compile(&c).unwrap().limits[0].clone()
    }

    fn restriction() -> Restriction {
        Restriction {
            key: "alice@example.org".into(),
            limit: "per-user".into(),
            since_us: 1_764_091_060_500_000,
            until_us: None,
            rate: Some(6.04),
            limit_text: "5 / 1h".into(),
            by: "limit per-user on mx".into(),
            reason: "rate".into(),
            evidence: serde_json::Value::Null,
        }
    }

    fn facts(user: Option<&str>) -> Facts {
        Facts {
            user: user.map(str::to_string),
            ..Facts::default()
        }
    }

    #[test]
    fn the_notice_says_what_happened_and_whom_to_ask() {
        let d = def(
            "${authenticated_id}",
            Some("4.7.1 restricted since ${restricted_since} by ${limit_name}; call 555-0100"),
        );
        let n = user_notice(
            &d,
            &restriction(),
            &facts(Some("alice@example.org")),
            "mx.example",
            0,
        )
        .unwrap()
        .unwrap();
        assert_eq!(n.to, "alice@example.org");
        let text = String::from_utf8(n.message).unwrap();
        for want in [
            "To: <alice@example.org>\r\n",
            "Auto-Submitted: auto-generated\r\n",
            "Subject: Your account alice@example.org is restricted from sending mail\r\n",
            "Restricted since: 2025-11-25T17:17:40Z\r\n",
            "Restricted until: until the postmaster releases it\r\n",
            "Limit:            per-user, 5 / 1h (the rate that tripped it: 6)\r\n",
            "450 4.7.1 restricted since 2025-11-25T17:17:40Z by per-user; call 555-0100\r\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // One header section, CRLF lines only.
        assert!(text.contains("\r\n\r\nYour account"));
        assert!(!text.replace("\r\n", "").contains('\n'));
    }

    #[test]
    fn a_timed_restriction_says_until_when() {
        let mut r = restriction();
        r.until_us = Some(r.since_us + 2_000_000);
        let n = user_notice(&def("ops@example.org", None), &r, &facts(None), "mx", 0)
            .unwrap()
            .unwrap();
        let text = String::from_utf8(n.message).unwrap();
        assert!(
            text.contains("Restricted until: 2025-11-25T17:17:42Z\r\n"),
            "{text}"
        );
        assert_eq!(n.to, "ops@example.org");
    }

    #[test]
    fn no_address_no_notice() {
        let d = def("${authenticated_id}", None);
        assert_eq!(
            user_notice(&d, &restriction(), &facts(None), "mx", 0),
            Err(NoticeError::Empty)
        );
        assert_eq!(
            user_notice(&d, &restriction(), &facts(Some("a b>")), "mx", 0),
            Err(NoticeError::BadAddress("a b>".into()))
        );
        let mut plain = def("x@y", None);
        plain.restrict.as_mut().unwrap().notify = None;
        assert_eq!(
            user_notice(&plain, &restriction(), &facts(None), "mx", 0),
            Ok(None)
        );
    }

    proptest! {
        /// Whatever the user name, the notice is either refused or one clean message whose
        /// header lines are single lines.
        #[test]
        fn any_user_gives_a_clean_notice_or_none(user in "\\PC{0,40}") {
            let d = def("${authenticated_id}", None);
            if let Ok(Some(n)) = user_notice(&d, &restriction(), &facts(Some(&user)), "mx", 0) {
                let text = String::from_utf8(n.message).unwrap();
                let head = &text[..text.find("\r\n\r\n").unwrap()];
                prop_assert!(head.split("\r\n").all(|l| l.contains(": ")));
                prop_assert!(plausible_address(&n.to));
            }
        }
    }
}
