//! What Postfix's own commands say of its queue: `postqueue -j` (one JSON object a line,
//! Postfix 3.1 and later) and the `Received:` line Postfix's pickup writes for mail handed
//! to the local `sendmail` (`(Postfix, from userid N)`), which names the local user who
//! submitted it; and `postcat -q`'s print of a queued message.

use serde::Deserialize;
use thiserror::Error;

/// The queue a `postqueue -j` entry was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueName {
    /// `hold`: kept until released (`postsuper -H`) or deleted (`postsuper -d`).
    Hold,
    /// `incoming`, `active`, `deferred`, `maildrop` or another Postfix may add.
    Other,
}

/// One recipient of a queued message, as `postqueue -j` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct QueuedRecipient {
    /// The address.
    pub address: String,
    /// Why delivery was delayed, when Postfix recorded a reason.
    #[serde(default)]
    pub delay_reason: Option<String>,
}

/// One queued message, as `postqueue -j` lists it; members Postfix adds later are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct QueueEntry {
    #[serde(rename = "queue_name")]
    queue: String,
    /// The queue file name (`postsuper` and `postcat -q` take it).
    pub queue_id: String,
    /// When it arrived, in seconds since the epoch.
    pub arrival_time: i64,
    /// Its header and body in octets.
    pub message_size: u64,
    /// The envelope sender (empty for the null sender).
    #[serde(default)]
    pub sender: String,
    /// The recipients still to be delivered.
    #[serde(default)]
    pub recipients: Vec<QueuedRecipient>,
    /// Forced to expire (`postsuper -e`; Postfix 3.5 and later).
    #[serde(default)]
    pub forced_expire: bool,
}

impl QueueEntry {
    /// The queue it was found in.
    pub fn queue_name(&self) -> QueueName {
        if self.queue == "hold" {
            QueueName::Hold
        } else {
            QueueName::Other
        }
    }

    /// Whether the queue id has only the characters Postfix's queue ids have, so that it can
    /// be handed to `postsuper` and `postcat` as one argument.
    pub fn has_plain_id(&self) -> bool {
        is_queue_id(&self.queue_id)
    }
}

/// Whether `id` looks like a Postfix queue id: 5 to 64 ASCII letters and digits (short ids
/// are hex, long ones base 52; both fit), and never `ALL`, which `postsuper` reads as every
/// message of the queue.
pub fn is_queue_id(id: &str) -> bool {
    (5..=64).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric())
        && !id.eq_ignore_ascii_case("all")
}

/// A `postqueue -j` line that is not a queue entry.
#[derive(Debug, Error)]
#[error("postqueue -j line {line}: {source}")]
pub struct QueueLineError {
    /// The line's number (1-based).
    pub line: usize,
    /// What the JSON reader said.
    #[source]
    pub source: serde_json::Error,
}

/// The entries of a `postqueue -j` listing; blank lines are skipped, each bad line is an
/// error of its own (the listing goes on: a queue may change while it is listed).
pub fn read_listing(text: &str) -> impl Iterator<Item = Result<QueueEntry, QueueLineError>> + '_ {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<QueueEntry>(l).map_err(|source| QueueLineError {
                line: i + 1,
                source,
            })
        })
}

/// The local user id in a `Received:` field's value that Postfix's pickup wrote for mail
/// from the local `sendmail`: `by host.example.org (Postfix, from userid 1000)`.
pub fn pickup_userid(received: &str) -> Option<u32> {
    const MARK: &str = "(Postfix, from userid ";
    let at = received.find(MARK)? + MARK.len();
    let rest = &received[at..];
    let end = rest.find(')')?;
    let digits = &rest[..end];
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A queued message as `postcat -q ID` prints it: the header section and the body's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Postcat {
    /// The queue it was read from (`hold`, `deferred`, …), from postcat's section lines.
    pub queue: String,
    /// The header section, lines joined with `\n`, through the last header line.
    pub header_section: String,
    /// Octets of the body as printed (lines and their newlines).
    pub body_size: u64,
}

/// The marker line postcat prints before a part of the queue file: `*** NAME queue/ID ***`.
fn postcat_marker(line: &str) -> Option<(&str, &str)> {
    let inner = line.strip_prefix("*** ")?.strip_suffix(" ***")?;
    let (name, place) = inner.rsplit_once(' ')?;
    let (queue, _id) = place.split_once('/')?;
    Some((name, queue))
}

/// Reads `postcat -q ID`'s output: the part after `*** MESSAGE CONTENTS queue/ID ***` up
/// to the next marker, cut at its first empty line into the header section and the body.
/// `None` when the output has no message contents.
pub fn read_postcat(text: &str) -> Option<Postcat> {
    let mut lines = text.split('\n');
    let queue = lines.by_ref().find_map(|l| match postcat_marker(l) {
        Some(("MESSAGE CONTENTS", q)) => Some(q.to_string()),
        _ => None,
    })?;
    let mut header: Vec<&str> = Vec::new();
    let mut body_size = 0u64;
    let mut in_body = false;
    for l in lines {
        if postcat_marker(l).is_some() {
            break;
        }
        if in_body {
            body_size += l.len() as u64 + 1;
        } else if l.is_empty() {
            in_body = true;
        } else {
            header.push(l);
        }
    }
    Some(Postcat {
        queue,
        header_section: header.join("\n"),
        body_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Two lines as Postfix 3.7's `postqueue -j` prints them.
    const LISTING: &str = concat!(
        r#"{"queue_name": "hold", "queue_id": "4Q9kTq1wXMz7Lf", "arrival_time": 1733540000, "message_size": 2048, "forced_expire": false, "sender": "alice@example.org", "recipients": [{"address": "bob@example.com"}, {"address": "carol@example.net", "delay_reason": "connect to mx: timed out"}]}"#,
        "\n\n",
        r#"{"queue_name": "deferred", "queue_id": "ABC123", "arrival_time": 1733540001, "message_size": 10, "sender": "", "recipients": [], "future_member": {"x": 1}}"#,
        "\n",
    );

    #[test]
    fn a_listing_is_read_entry_by_entry() {
        let entries: Vec<QueueEntry> = read_listing(LISTING).map(Result::unwrap).collect();
        assert_eq!(entries.len(), 2);
        let held = &entries[0];
        assert_eq!(held.queue_name(), QueueName::Hold);
        assert_eq!(held.queue_id, "4Q9kTq1wXMz7Lf");
        assert!(held.has_plain_id());
        assert_eq!(
            (held.arrival_time, held.message_size),
            (1_733_540_000, 2048)
        );
        assert_eq!(held.sender, "alice@example.org");
        assert_eq!(held.recipients[0].delay_reason, None);
        assert_eq!(
            held.recipients[1].delay_reason.as_deref(),
            Some("connect to mx: timed out")
        );
        let other = &entries[1];
        assert_eq!(other.queue_name(), QueueName::Other);
        assert!(!other.forced_expire, "absent before Postfix 3.5");
        assert_eq!(other.sender, "", "the null sender");
    }

    #[test]
    fn a_bad_line_is_its_own_error_and_the_rest_is_read() {
        let text = format!("not json\n{LISTING}{{\"queue_name\": \"hold\"}}\n");
        let results: Vec<_> = read_listing(&text).collect();
        assert_eq!(results.len(), 4);
        let e = results[0].as_ref().unwrap_err();
        assert_eq!(e.line, 1);
        assert!(
            e.to_string().starts_with("postqueue -j line 1: expected"),
            "{e}"
        );
        assert!(results[1].is_ok() && results[2].is_ok());
        let e = results[3].as_ref().unwrap_err();
        assert!(e.to_string().contains("missing field `queue_id`"), "{e}");
    }

    #[test]
    fn queue_ids_are_plain_or_refused() {
        assert!(is_queue_id("4Q9kTq1wXMz7Lf"));
        assert!(is_queue_id("ABC123"));
        for bad in [
            "",
            "-d",
            "ALL",
            "all",
            "AB12",
            "a b c d",
            "x;rm -rf",
            &"A".repeat(65),
        ] {
            assert!(!is_queue_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_pickup_user_is_read_from_received() {
        assert_eq!(
            pickup_userid("by mail.example.org (Postfix, from userid 33)\r\n\tid 4Q9kT; Sat, 7 Dec 2026 03:00:00 +0000 (UTC)"),
            Some(33)
        );
        assert_eq!(
            pickup_userid("from laptop (unknown [192.0.2.7]) by mail (Postfix) with ESMTPSA id X"),
            None
        );
        assert_eq!(pickup_userid("by h (Postfix, from userid )"), None);
        assert_eq!(
            pickup_userid("by h (Postfix, from userid 99999999999)"),
            None
        );
        assert_eq!(pickup_userid("by h (Postfix, from userid 12"), None);
    }

    /// `postcat -q` of a held message, as Postfix 3.8 prints it.
    const POSTCAT: &str = "*** ENVELOPE RECORDS hold/4Q9kTq1wXMz7Lf ***\n\
message_size:             120              90               1               0             120\n\
sender: alice@example.org\n\
recipient: bob@example.net\n\
*** MESSAGE CONTENTS hold/4Q9kTq1wXMz7Lf ***\n\
Received: by mail.example.org (Postfix, from userid 33)\n\
\tid 4Q9kTq1wXMz7Lf; Sat, 7 Dec 2026 03:00:00 +0000 (UTC)\n\
Subject: Invoice\n\
\n\
Hello,\n\
pay.\n\
*** HEADER EXTRACTED hold/4Q9kTq1wXMz7Lf ***\n\
original_recipient: bob@example.net\n\
*** MESSAGE FILE END hold/4Q9kTq1wXMz7Lf ***\n";

    #[test]
    fn postcat_gives_the_header_section_and_the_body_size() {
        let m = read_postcat(POSTCAT).unwrap();
        assert_eq!(m.queue, "hold");
        assert_eq!(
            m.header_section,
            "Received: by mail.example.org (Postfix, from userid 33)\n\
             \tid 4Q9kTq1wXMz7Lf; Sat, 7 Dec 2026 03:00:00 +0000 (UTC)\nSubject: Invoice"
        );
        assert_eq!(m.body_size, "Hello,\npay.\n".len() as u64);
        assert_eq!(
            read_postcat("postcat: fatal: open queue file X: No such file"),
            None
        );
        assert_eq!(read_postcat("*** MESSAGE CONTENTS nowhere ***\n"), None);
        let headers_only =
            read_postcat("*** MESSAGE CONTENTS deferred/ABCDE ***\nSubject: x\n").unwrap();
        assert_eq!(
            (headers_only.queue.as_str(), headers_only.body_size),
            ("deferred", 0)
        );
    }

    proptest! {
        #[test]
        fn any_text_never_panics(text in "\\PC{0,300}") {
            for e in read_listing(&text).flatten() {
                let _ = (e.queue_name(), e.has_plain_id());
            }
            let _ = pickup_userid(&text);
            if let Some(m) = read_postcat(&text) {
                prop_assert!(m.header_section.len() + m.body_size as usize <= text.len());
            }
        }

        #[test]
        fn postcat_reads_back_what_it_printed(queue in "[a-z]{1,10}", headers in prop::collection::vec("[A-Z][a-z]{0,8}: [ -~]{0,30}", 0..5), body in prop::collection::vec("[ -~]{0,40}", 0..5)) {
            let mut text = format!("*** ENVELOPE RECORDS {queue}/ABCDE ***\nsender: a@b\n*** MESSAGE CONTENTS {queue}/ABCDE ***\n");
            for h in &headers {
                text.push_str(h);
                text.push('\n');
            }
            text.push('\n');
            let mut body_size = 0;
            for b in &body {
                text.push_str(b);
                text.push('\n');
                body_size += b.len() as u64 + 1;
            }
            text.push_str(&format!("*** HEADER EXTRACTED {queue}/ABCDE ***\n"));
            let m = read_postcat(&text).unwrap();
            prop_assert_eq!(m.queue, queue);
            prop_assert_eq!(m.header_section, headers.join("\n"));
            prop_assert_eq!(m.body_size, body_size);
        }

        #[test]
        fn written_entries_read_back(id in "[0-9A-Za-z]{6,20}", size in any::<u64>(), t in any::<i64>(), hold in any::<bool>(), rcpts in prop::collection::vec("[a-z]{1,8}@[a-z]{1,8}\\.org", 0..5)) {
            let line = serde_json::json!({
                "queue_name": if hold { "hold" } else { "active" },
                "queue_id": id, "arrival_time": t, "message_size": size, "sender": "s@x.org",
                "recipients": rcpts.iter().map(|a| serde_json::json!({"address": a})).collect::<Vec<_>>(),
            }).to_string();
            let e = read_listing(&line).next().unwrap().unwrap();
            prop_assert_eq!(e.queue_name() == QueueName::Hold, hold);
            prop_assert_eq!(&e.queue_id, &id);
            prop_assert_eq!((e.message_size, e.arrival_time), (size, t));
            prop_assert_eq!(e.recipients.iter().map(|r| r.address.clone()).collect::<Vec<_>>(), rcpts);
        }

        #[test]
        fn any_userid_reads_back(uid in any::<u32>()) {
            let text = format!("by host (Postfix, from userid {uid})");
            prop_assert_eq!(pickup_userid(&text), Some(uid));
        }
    }
}
