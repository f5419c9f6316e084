//! The daily digest of alert mail (`[alerts] mail_digest`): the restrictions in force and
//! those made or released in the last 24 hours, the held mail waiting per key, and the keys
//! nearest their limits. The facts come from a [`DigestSource`] (the admin side, which
//! reads the store and the hold spool); the text is made here.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use super::mail::{compose, key_link, one_line, OutMail};
use crate::policy::alert::mail::MailSettings;
use crate::time::rfc3339;

/// How many keys the digest lists against their limits.
pub const TOP_KEYS: usize = 10;

/// One key against one of its limits.
#[derive(Clone, Debug, PartialEq)]
pub struct TopLine {
    /// The key as stored (the database key).
    pub key: String,
    /// The limit's name.
    pub limit: String,
    /// The rate or level now.
    pub value: f64,
    /// The limit.
    pub limit_value: f64,
    /// The limit's period as text.
    pub period: String,
}

/// What the digest reports, as read when it is made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DigestFacts {
    /// The restrictions in force, each as `policy::alert::restriction_json` gives it.
    pub restricted: Vec<Value>,
    /// Held messages waiting, per key (most first).
    pub held: Vec<(String, u64)>,
    /// The keys nearest their limits, nearest first (at most [`TOP_KEYS`]).
    pub top: Vec<TopLine>,
}

/// Why the digest's facts could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the digest's facts: {0}")]
pub struct DigestError(pub String);

/// A future of the digest's facts.
pub type FactsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<DigestFacts, DigestError>> + Send + 'a>>;

/// Reads the digest's facts.
pub trait DigestSource: Send + Sync {
    /// The facts now.
    fn facts(&self) -> FactsFuture<'_>;
}

const DAY_US: i64 = 86_400_000_000;

/// The digest mail of `f` and the release notices of the last day (`released`, oldest
/// first), made at `now_us`.
pub fn digest_mail(
    f: &DigestFacts,
    released: &[Value],
    m: &MailSettings,
    host: &str,
    now_us: i64,
) -> OutMail {
    let since = rfc3339(now_us - DAY_US);
    let made: Vec<&Value> = f
        .restricted
        .iter()
        .filter(|r| r["since"].as_str().is_some_and(|s| s >= since.as_str()))
        .collect();
    let held: u64 = f.held.iter().map(|(_, n)| n).sum();
    let mut body = vec![
        format!(
            "floodgate on {}: the day to {}.",
            one_line(host),
            rfc3339(now_us)
        ),
        String::new(),
        format!(
            "Restrictions in force: {} ({} made in the last 24 hours)",
            f.restricted.len(),
            made.len()
        ),
    ];
    for r in &f.restricted {
        let s = |k: &str| r[k].as_str().map_or("-".to_string(), one_line);
        let until = r["until"]
            .as_str()
            .map_or("until released".into(), one_line);
        body.push(format!(
            "  {}  limit {}  since {}  {}",
            s("key"),
            s("limit"),
            s("since"),
            if r["until"].is_null() {
                until
            } else {
                format!("until {until}")
            }
        ));
        if let Some(l) = r["key"].as_str().and_then(|k| key_link(m, k)) {
            body.push(format!("    {l}"));
        }
    }
    body.push(String::new());
    body.push(format!("Released in the last 24 hours: {}", released.len()));
    for r in released {
        let s = |k: &str| r[k].as_str().map_or("-".to_string(), one_line);
        body.push(format!(
            "  {}  limit {}  by {}  reason: {}",
            s("key"),
            s("limit"),
            s("by"),
            s("reason")
        ));
    }
    body.push(String::new());
    body.push(format!("Held mail waiting: {held} messages"));
    for (k, n) in &f.held {
        body.push(format!("  {}: {n}", one_line(k)));
    }
    body.push(String::new());
    body.push("Keys nearest their limits (nearest first):".into());
    if f.top.is_empty() {
        body.push("  none".into());
    }
    for t in &f.top {
        let pct = if t.limit_value > 0.0 {
            format!("{:.0} %", 100.0 * t.value / t.limit_value)
        } else {
            "-".into()
        };
        body.push(format!(
            "  {pct:>6}  {}  {}  {} of {} per {}",
            one_line(&t.key),
            one_line(&t.limit),
            (t.value * 10.0).round() / 10.0,
            t.limit_value,
            one_line(&t.period)
        ));
    }
    body.push(String::new());
    body.push(
        "This message was sent automatically by floodgate ([alerts] mail_digest); replies \
         are not read."
            .into(),
    );
    let subject = format!(
        "floodgate: daily digest of {host} ({} restricted, {held} held)",
        f.restricted.len()
    );
    compose(m, host, &subject, &body, now_us)
}

/// When the digest is due: it remembers the local date of the last digest (or of the
/// setting's start, when that was past the time of day already).
#[derive(Debug, Default)]
pub struct DigestClock {
    time: Option<jiff::civil::Time>,
    last: Option<jiff::civil::Date>,
}

impl DigestClock {
    /// Whether the digest at `time` (`None`: none) is due at local time `now`; a new or
    /// changed time is first due at its next occurrence, never at once.
    pub fn due(&mut self, time: Option<jiff::civil::Time>, now: jiff::civil::DateTime) -> bool {
        if time != self.time {
            self.time = time;
            self.last = time.and_then(|t| (now.time() >= t).then(|| now.date()));
            return false;
        }
        let Some(t) = time else {
            return false;
        };
        if now.time() >= t && self.last != Some(now.date()) {
            self.last = Some(now.date());
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    #[test]
    fn the_digest_is_due_once_a_day_at_its_time_never_at_start() {
        let mut c = DigestClock::default();
        let t = Some(jiff::civil::time(8, 0, 0, 0));
        // Started at 09:00: not today.
        assert!(!c.due(t, date(2025, 3, 1).at(9, 0, 0, 0)));
        assert!(!c.due(t, date(2025, 3, 1).at(23, 59, 0, 0)));
        assert!(!c.due(t, date(2025, 3, 2).at(7, 59, 59, 0)));
        assert!(c.due(t, date(2025, 3, 2).at(8, 0, 0, 0)));
        assert!(!c.due(t, date(2025, 3, 2).at(8, 0, 30, 0)), "once a day");
        // Missed while asleep: due when the day's time has passed.
        assert!(c.due(t, date(2025, 3, 4).at(10, 0, 0, 0)));
        // Started before the time: due the same day.
        let mut c = DigestClock::default();
        assert!(!c.due(t, date(2025, 3, 1).at(7, 0, 0, 0)));
        assert!(c.due(t, date(2025, 3, 1).at(8, 1, 0, 0)));
        // Switched off.
        assert!(!c.due(None, date(2025, 3, 5).at(8, 1, 0, 0)));
        assert!(!c.due(None, date(2025, 3, 6).at(8, 1, 0, 0)));
    }

    #[test]
    fn the_digest_lists_restrictions_releases_held_and_top_keys() {
        let m = MailSettings {
            to: vec!["postmaster@uni.test".into()],
            from: None,
            digest: None,
            public_url: Some("https://fg.uni.test".into()),
        };
        let now = 1_764_091_060_000_000;
        let f = DigestFacts {
            restricted: vec![
                serde_json::json!({"key": "carol", "limit": "user-recipients-day",
                    "since": rfc3339(now - 3_600_000_000), "until": null}),
                serde_json::json!({"key": "dave\r\nBcc: x", "limit": "per-user",
                    "since": rfc3339(now - 3 * DAY_US), "until": rfc3339(now + DAY_US)}),
            ],
            held: vec![("carol".into(), 12), ("dave".into(), 1)],
            top: vec![TopLine {
                key: "1d/per_rcpt/alice".into(),
                limit: "user-recipients-day".into(),
                value: 973.04,
                limit_value: 1000.0,
                period: "1d".into(),
            }],
        };
        let released =
            [serde_json::json!({"key": "bob", "limit": "per-user", "by": "admin", "reason": "ok"})];
        let mail = digest_mail(&f, &released, &m, "mx.uni.test", now);
        let text = String::from_utf8(mail.message).unwrap();
        for want in [
            "Subject: floodgate: daily digest of mx.uni.test (2 restricted, 13 held)\r\n",
            "Restrictions in force: 2 (1 made in the last 24 hours)\r\n",
            "  carol  limit user-recipients-day  since 2025-11-25T16:17:40.000000Z  until released\r\n",
            "    https://fg.uni.test/console/key?k=carol\r\n",
            "  dave  Bcc: x  limit per-user",
            "Released in the last 24 hours: 1\r\n  bob  limit per-user  by admin  reason: ok\r\n",
            "Held mail waiting: 13 messages\r\n  carol: 12\r\n  dave: 1\r\n",
            "    97 %  1d/per_rcpt/alice  user-recipients-day  973 of 1000 per 1d\r\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(!text.contains("\r\nBcc:"), "{text}");
    }
}
