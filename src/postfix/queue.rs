//! What Postfix's own commands say of its queue: `postqueue -j` (one JSON object a line,
//! Postfix 3.1 and later) and the `Received:` line Postfix's pickup writes for mail handed
//! to the local `sendmail` (`(Postfix, from userid N)`), which names the local user who
//! submitted it.

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

    proptest! {
        #[test]
        fn any_text_never_panics(text in "\\PC{0,300}") {
            for e in read_listing(&text).flatten() {
                let _ = (e.queue_name(), e.has_plain_id());
            }
            let _ = pickup_userid(&text);
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
