//! The text of alert mail (`[alerts] mail_to`): one short plain-text message per notice,
//! from the null sender, saying what happened in words with the notice's evidence and, with
//! `[admin] public_url`, a link to the key's page in the web console.
//!
//! Every header field is built here from values that may come from clients (keys, subjects,
//! user names): line breaks and tabs become spaces, other controls and format characters
//! (a right-to-left override, a zero-width space) are shown as `\u{202e}`
//! ([`super::markup::reveal`]), non-ASCII text is an RFC 2047 encoded
//! word, long fields are folded, so no value can end a field or start another.

use std::fmt::Write;

use base64::Engine;
use serde_json::Value;

use crate::figures::count;
use crate::policy::alert::mail::MailSettings;
use crate::policy::alert::Notice;

/// One mail to send: the envelope recipients and the message (CRLF lines, not
/// dot-stuffed); the envelope sender is always the null sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutMail {
    /// The envelope recipients.
    pub to: Vec<String>,
    /// The subject, as in the header (before encoding), for the log.
    pub subject: String,
    /// Header section and body.
    pub message: Vec<u8>,
}

/// The longest value of one body line or header field, in characters; longer ones are cut.
pub const MAX_VALUE: usize = 400;

/// `s` on one line: CR, LF and TAB become spaces, other hidden characters are shown as
/// `\u{…}` ([`super::markup::reveal`]), at most [`MAX_VALUE`] characters (cut with `…`).
pub fn one_line(s: &str) -> String {
    let mut out: String = flat(s).chars().take(MAX_VALUE + 1).collect();
    if out.chars().count() > MAX_VALUE {
        out = out.chars().take(MAX_VALUE - 1).collect();
        out.push('…');
    }
    out
}

/// One header field `Name: value`, CRLF-terminated: the value on one line (see
/// [`one_line`]), as RFC 2047 encoded words when it is not ASCII, folded before 78
/// characters where it has spaces.
pub fn header_field(name: &str, value: &str) -> String {
    let value = one_line(value);
    let words: Vec<String> = if value.is_ascii() {
        value.split(' ').map(str::to_string).collect()
    } else {
        encoded_words(&value)
    };
    let mut out = format!("{name}:");
    let mut line_len = out.len();
    for w in words.iter().filter(|w| !w.is_empty()) {
        if line_len + 1 + w.len() > 78 && line_len > name.len() + 1 {
            out.push_str("\r\n");
            line_len = 0;
        }
        out.push(' ');
        out.push_str(w);
        line_len += 1 + w.len();
    }
    out.push_str("\r\n");
    out
}

/// `text` as RFC 2047 `B` encoded words of at most 39 octets of UTF-8 each (whole
/// characters), every one under 76 characters.
fn encoded_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in text.chars() {
        if chunk.len() + c.len_utf8() > 39 {
            words.push(std::mem::take(&mut chunk));
        }
        chunk.push(c);
    }
    if !chunk.is_empty() {
        words.push(chunk);
    }
    words
        .iter()
        .map(|w| {
            format!(
                "=?utf-8?B?{}?=",
                base64::engine::general_purpose::STANDARD.encode(w.as_bytes())
            )
        })
        .collect()
}

/// The link to `key`'s page in the console, when `public_url` is set.
pub fn key_link(m: &MailSettings, key: &str) -> Option<String> {
    let base = m.public_url.as_ref()?;
    let mut k = String::new();
    for &b in key.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            k.push(b as char);
        } else {
            let _ = write!(k, "%{b:02X}");
        }
    }
    Some(format!("{base}/console/key?k={k}"))
}

/// The message of `subject` and `body` (lines without line ends) to `m`'s recipients, from
/// `m`'s sender or `MAILER-DAEMON@host`, dated `now_us`.
pub fn compose(
    m: &MailSettings,
    host: &str,
    subject: &str,
    body: &[String],
    now_us: i64,
) -> OutMail {
    let host = one_line(host).replace(' ', "");
    let from = m
        .from
        .clone()
        .unwrap_or_else(|| format!("MAILER-DAEMON@{host}"));
    let to: Vec<String> = m.to.iter().map(|a| format!("<{a}>,")).collect();
    let mut to = to.join(" ");
    to.pop();
    let mut head = String::new();
    head.push_str(&header_field("From", &format!("floodgate <{from}>")));
    head.push_str(&header_field("To", &to));
    head.push_str(&header_field("Subject", subject));
    head.push_str(&header_field(
        "Date",
        &crate::smtp::received::rfc5322_date(now_us.div_euclid(1_000_000)),
    ));
    head.push_str(&header_field(
        "Message-ID",
        &format!("<floodgate.alert.{now_us}.{}@{host}>", next_serial()),
    ));
    head.push_str("Auto-Submitted: auto-generated\r\n");
    head.push_str("X-Auto-Response-Suppress: All\r\n");
    head.push_str("MIME-Version: 1.0\r\n");
    head.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    head.push_str("Content-Transfer-Encoding: 8bit\r\n\r\n");
    let mut message = head.into_bytes();
    for line in body {
        message.extend_from_slice(one_line_body(line).as_bytes());
        message.extend_from_slice(b"\r\n");
    }
    OutMail {
        to: m.to.clone(),
        subject: one_line(subject),
        message,
    }
}

/// A body line: line breaks and tabs become spaces, other hidden characters are shown.
fn one_line_body(s: &str) -> String {
    flat(s).chars().take(900).collect()
}

/// `s` with line breaks and tabs as spaces and every other hidden character shown.
fn flat(s: &str) -> String {
    super::markup::reveal(s)
        .chars()
        .map(|c| {
            if matches!(c, '\t' | '\r' | '\n') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// A number distinct for every message of this process (the Message-ID's uniqueness).
fn next_serial() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A JSON value as text: strings without quotes, `null` as `-`, numbers rounded to 0.1.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => one_line(s),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{}", (f * 10.0).round() / 10.0),
            _ => n.to_string(),
        },
        other => one_line(&other.to_string()),
    }
}

/// `Label: value` lines, the labels padded to one width.
fn table(rows: &[(&str, String)]) -> Vec<String> {
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0) + 1;
    rows.iter()
        .map(|(l, v)| format!("{:<width$} {}", format!("{l}:"), v, width = width))
        .collect()
}

const FOOTER: &str = "This message was sent automatically by floodgate; replies are not read.";

/// The mail of one notice.
pub fn notice_mail(n: &Notice, m: &MailSettings, host: &str, now_us: i64) -> OutMail {
    let (subject, body) = match n {
        Notice::Alert(a) => {
            let subject = format!("floodgate: {} over {}", a.key, a.limit);
            let mut body = vec![
                format!(
                    "floodgate on {} saw the key {} cross the limit {}.",
                    one_line(host),
                    one_line(&a.key),
                    one_line(&a.limit)
                ),
                String::new(),
            ];
            let mut rows = vec![
                ("Key", one_line(&a.key)),
                ("Limit", one_line(&a.limit)),
                (
                    "Rate",
                    format!(
                        "{} against {} per {}",
                        (a.rate * 10.0).round() / 10.0,
                        one_line(&a.limit_value),
                        one_line(&a.period)
                    ),
                ),
                (
                    "Action",
                    format!(
                        "{}, at the {} stage",
                        one_line(&a.action),
                        one_line(&a.stage)
                    ),
                ),
                ("First at", a.first_at.clone()),
                ("Client", a.client_ip.clone().unwrap_or_else(|| "-".into())),
                ("User", a.user.as_deref().map_or("-".into(), one_line)),
            ];
            if a.suppressed > 0 {
                rows.push((
                    "Suppressed",
                    format!("{} alerts before this one (max_per_minute)", a.suppressed),
                ));
            }
            if let Some(l) = key_link(m, &a.key) {
                rows.push(("Console", l));
            }
            body.extend(table(&rows));
            (subject, body)
        }
        Notice::Suppressed(s) => (
            format!("floodgate: {} alerts suppressed", s.suppressed),
            vec![
                format!(
                    "floodgate on {} did not deliver {} alerts between {} and {}: more than \
                     [alerts] max_per_minute came in that minute.",
                    one_line(host),
                    s.suppressed,
                    s.from,
                    s.to
                ),
                "Each alert is in floodgate's log (target floodgate::alert).".into(),
            ],
        ),
        Notice::Restriction(v) if is_spool_notice(v) => spool_mail(v, host),
        Notice::Restriction(v) if v["event"] == "floodgate.campaign" => campaign_mail(v, m, host),
        Notice::Restriction(v) => restriction_mail(v, m, host),
    };
    let mut body = body;
    body.push(String::new());
    body.push(FOOTER.into());
    compose(m, host, &subject, &body, now_us)
}

/// Whether `v` is the hold spool's notice (`floodgate.spool_full`, `floodgate.spool_failed`).
fn is_spool_notice(v: &Value) -> bool {
    v["event"]
        .as_str()
        .is_some_and(|e| e.starts_with("floodgate.spool_"))
}

/// The subject and body of the hold spool's notice: a message that was to be held was
/// deferred (451) instead, because the spool is full or cannot be written.
fn spool_mail(v: &Value, host: &str) -> (String, Vec<String>) {
    let full = v["event"] == "floodgate.spool_full";
    let subject = if full {
        format!("floodgate: hold spool full on {}", one_line(host))
    } else {
        format!("floodgate: hold spool not writable on {}", one_line(host))
    };
    let mut body = vec![
        format!(
            "floodgate on {} could not hold a message and deferred it (451): {}.",
            one_line(host),
            if full {
                "the hold spool is full (its limits, or its disk or quota)"
            } else {
                "the hold spool cannot be written"
            }
        ),
        "Messages of restricted keys and of hold limits are deferred until there is room: \
         release or delete held mail (floodgate held list), or raise [hold] max_messages or \
         max_bytes."
            .into(),
        String::new(),
    ];
    body.extend(table(&[
        ("Spool", text(&v["dir"])),
        (
            "Limits",
            format!(
                "{} messages, {} bytes",
                text(&v["max_messages"]),
                text(&v["max_bytes"])
            ),
        ),
        ("Error", text(&v["error"])),
        (
            "Deferred",
            format!("key {} (limit {})", text(&v["key"]), text(&v["limit"])),
        ),
    ]));
    body.push(String::new());
    body.push("(At most one such mail a minute from this node.)".into());
    (subject, body)
}

/// The subject and body of a campaign's notice: one message sent from several accounts,
/// the accounts it restricted.
fn campaign_mail(v: &Value, m: &MailSettings, host: &str) -> (String, Vec<String>) {
    let accounts = v["accounts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let count_of = v["account_count"].as_u64().unwrap_or(accounts.len() as u64);
    let update = v["update"] == true;
    let subject = format!(
        "floodgate: campaign from {} ({}){}",
        count(count_of, "account"),
        text(&v["limit"]),
        if update { ", update" } else { "" }
    );
    let mut body = vec![
        format!(
            "floodgate on {} saw one message sent from {}, over the limit {}: \
             its copies are taken by the limit's action; the accounts whose own part is \
             evidence (several copies, or many recipients) are restricted until released.{}",
            one_line(host),
            count(count_of, "account"),
            text(&v["limit"]),
            if update {
                " An update: the campaign goes on (one such mail a period at most)."
            } else {
                ""
            }
        ),
        String::new(),
    ];
    let links: Vec<String> = v["link_domains"]
        .as_array()
        .map(|a| a.iter().map(text).collect())
        .unwrap_or_default();
    body.extend(table(&[
        ("Message key", text(&v["message_key"])),
        ("Subject", text(&v["subject"])),
        (
            "Links",
            if links.is_empty() {
                "none".into()
            } else {
                links.join(", ")
            },
        ),
        (
            "Copies",
            format!(
                "{} to {}",
                count(v["copies"].as_u64().unwrap_or(0), "copy"),
                count(v["recipients"].as_u64().unwrap_or(0), "recipient")
            ),
        ),
        (
            "Rate",
            format!("{} against {}", text(&v["rate"]), text(&v["limit_value"])),
        ),
    ]));
    body.push(String::new());
    body.push("Accounts:".into());
    let shown: Vec<&Value> = accounts.iter().take(50).collect();
    let width = shown
        .iter()
        .map(|a| text(&a["key"]).chars().count())
        .max()
        .unwrap_or(0);
    for a in shown {
        let n = |k: &str| a[k].as_u64().unwrap_or(0);
        let client = if a["client_ip"].is_null() {
            String::new()
        } else {
            format!(" from {}", text(&a["client_ip"]))
        };
        body.push(format!(
            "  {:<width$}  {} to {}{client}{}",
            text(&a["key"]),
            count(n("copies"), "copy"),
            count(n("recipients"), "recipient"),
            if a["restricted"] == true {
                ", restricted now"
            } else {
                ""
            }
        ));
        if let Some(url) = key_link(m, &text(&a["key"])) {
            body.push(format!("    {url}"));
        }
    }
    let listed = accounts.len().min(50) as u64;
    if count_of > listed {
        body.push(format!("  and {} more", count_of - listed));
    }
    body.push(String::new());
    body.push("floodgate campaigns lists the campaign with its held messages.".into());
    (subject, body)
}

/// The subject and body of a restriction or release notice.
fn restriction_mail(v: &Value, m: &MailSettings, host: &str) -> (String, Vec<String>) {
    let key = text(&v["key"]);
    let limit = text(&v["limit"]);
    let released = v["event"] == "floodgate.released";
    let e = &v["evidence"];
    let held = e["held"].as_u64().unwrap_or(0);
    let (subject, first) = if released {
        (
            format!("floodgate: {key} released ({})", text(&v["by"])),
            format!(
                "floodgate on {} released the key {key}: its restriction ended and the \
                 records of the limit {limit} for it were reset, so it may send mail again.",
                one_line(host)
            ),
        )
    } else {
        (
            format!("floodgate: {key} restricted ({limit})"),
            format!(
                "floodgate on {} restricted the key {key}: its mail is refused or held until \
                 the restriction ends.",
                one_line(host)
            ),
        )
    };
    let mut rows = vec![
        ("Key", key.clone()),
        ("Limit", limit),
        (
            "Rate",
            if v["rate"].is_null() {
                "not measured (restricted by hand)".into()
            } else {
                format!("{} against {}", text(&v["rate"]), text(&v["limit_value"]))
            },
        ),
        ("Since", text(&v["since"])),
    ];
    if !released {
        let ends = if v["until"].is_null() {
            "when released".into()
        } else {
            text(&v["until"])
        };
        rows.push(("Ends", ends));
    }
    rows.push(("By", text(&v["by"])));
    rows.push(("Reason", text(&v["reason"])));
    if let Some(l) = key_link(m, v["key"].as_str().unwrap_or_default()) {
        rows.push(("Console", l));
    }
    let mut body = vec![first, String::new()];
    if released && e.is_object() {
        body.push(if held == 0 {
            "No mail of this key is held.".into()
        } else {
            format!(
                "Its held mail was not released: {} still held (release or delete them: \
                 floodgate held list --key {key}).",
                count(held, "message")
            )
        });
        body.push(String::new());
    }
    body.extend(table(&rows));
    if e.is_object() {
        body.push(String::new());
        body.extend(evidence::lines(e));
    }
    (subject, body)
}

mod evidence;

#[cfg(test)]
mod tests;
