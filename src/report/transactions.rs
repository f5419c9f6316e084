//! Messages in the event log: one `{"event":"message",...}` line per message at the end of
//! its data, with the client, envelope, Subject and floodgate's verdict, and the reader
//! that finds a key's most recent ones by reading the log backwards from its end, bounded
//! in bytes, so a log of any size costs at most that many bytes read.
//!
//! ```json
//! {"event":"message","t":1764099001.5,"key":"alice","client":"192.0.2.7","name":"mx.example.org","user":"alice","sender":"alice@example.org","recipients":["bob@example.net"],"subject":"Hello","verdict":"relayed 250"}
//! ```

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::policy::alert::Transaction;

/// The first characters of every message line.
pub const PREFIX: &[u8] = b"{\"event\":\"message\"";
/// Bytes read from the end of the log per step.
const CHUNK: u64 = 256 * 1024;

/// One message line, as written and as read back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageLine<'a> {
    /// Always `message`.
    #[serde(borrow)]
    pub event: Cow<'a, str>,
    /// Seconds since the Unix epoch.
    pub t: f64,
    /// The key restrictions are kept under (the user, else the client address).
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// The client's address.
    #[serde(default, borrow)]
    pub client: Option<Cow<'a, str>>,
    /// The client's reverse name.
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    /// The authenticated user: the login folded into its account (`[identity]`).
    #[serde(default, borrow)]
    pub user: Option<Cow<'a, str>>,
    /// The login as the client typed it, when the fold changed it (absent otherwise).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub auth_login: Option<Cow<'a, str>>,
    /// The envelope sender.
    #[serde(default, borrow)]
    pub sender: Cow<'a, str>,
    /// The recipients.
    #[serde(default)]
    pub recipients: Vec<String>,
    /// The Subject.
    #[serde(default, borrow)]
    pub subject: Option<Cow<'a, str>>,
    /// What floodgate did.
    #[serde(default, borrow)]
    pub verdict: Cow<'a, str>,
}

/// The event-log line of `t` (without its newline).
pub fn line(t: &Transaction<'_>) -> String {
    use crate::eventlog::{field, key_field};
    // Every free-text field capped (a 3 MB Subject is not written whole).
    let l = MessageLine {
        event: "message".into(),
        t: t.time_us as f64 / 1e6,
        key: key_field(t.key),
        client: t.client.map(|c| c.to_string().into()),
        name: t.name.map(field),
        user: t.user.map(field),
        auth_login: t.login.map(field),
        sender: field(t.sender),
        recipients: t.recipients.iter().map(|r| field(r).into_owned()).collect(),
        subject: t.subject.map(field),
        verdict: field(t.verdict),
    };
    serde_json::to_string(&l).unwrap_or_default()
}

/// A key's most recent messages found in the log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recent {
    /// Newest first.
    pub messages: Vec<MessageLine<'static>>,
    /// Bytes of the log read.
    pub read: u64,
    /// The read reached the start of the file (nothing older was left unread).
    pub whole_file: bool,
}

/// The message line in `raw` when it is one of `key`'s (`needle`: `"key":` and the key as
/// JSON, found before any parsing).
fn parse_of(
    raw: &[u8],
    key: &str,
    needle: &memchr::memmem::Finder<'_>,
) -> Option<MessageLine<'static>> {
    if !raw.starts_with(PREFIX) || needle.find(raw).is_none() {
        return None;
    }
    let l: MessageLine<'_> = serde_json::from_slice(raw).ok()?;
    if l.key != key {
        return None;
    }
    Some(MessageLine {
        event: Cow::Owned(l.event.into_owned()),
        t: l.t,
        key: Cow::Owned(l.key.into_owned()),
        client: l.client.map(|c| Cow::Owned(c.into_owned())),
        name: l.name.map(|c| Cow::Owned(c.into_owned())),
        user: l.user.map(|c| Cow::Owned(c.into_owned())),
        auth_login: l.auth_login.map(|c| Cow::Owned(c.into_owned())),
        sender: Cow::Owned(l.sender.into_owned()),
        recipients: l.recipients,
        subject: l.subject.map(|c| Cow::Owned(c.into_owned())),
        verdict: Cow::Owned(l.verdict.into_owned()),
    })
}

/// The last `max` message lines of `key` in the event log at `path`, newest first, reading
/// backwards from the end at most `max_bytes` bytes.
pub fn recent(path: &Path, key: &str, max: usize, max_bytes: u64) -> std::io::Result<Recent> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let quoted = serde_json::to_string(key).unwrap_or_default();
    let needle = format!("\"key\":{quoted}");
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut out = Recent::default();
    let mut pos = len;
    // The start of the line the previous chunk began inside.
    let mut carry: Vec<u8> = Vec::new();
    while pos > 0 && out.read < max_bytes && out.messages.len() < max {
        let n = CHUNK.min(pos).min(max_bytes - out.read);
        pos -= n;
        let mut buf = vec![0u8; n as usize];
        f.read_exact_at(&mut buf, pos)?;
        out.read += n;
        buf.extend_from_slice(&carry);
        let mut lines = buf.split(|&b| b == b'\n');
        // The first piece may be the end of a line that starts earlier in the file.
        let first = if pos > 0 { lines.next() } else { None };
        let whole: Vec<&[u8]> = lines.collect();
        for raw in whole.iter().rev() {
            if out.messages.len() >= max {
                break;
            }
            if let Some(l) = parse_of(raw, key, &finder) {
                out.messages.push(l);
            }
        }
        carry = first.map(<[u8]>::to_vec).unwrap_or_default();
    }
    out.whole_file = pos == 0;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx<'a>(key: &'a str, subject: &'a str, rcpts: &'a [String]) -> Transaction<'a> {
        Transaction {
            time_us: 1_764_099_001_500_000,
            key,
            client: Some("192.0.2.7".parse().unwrap()),
            name: Some("mx.example.org"),
            user: Some(key),
            login: None,
            sender: "a@example.org",
            recipients: rcpts,
            subject: Some(subject),
            verdict: "relayed 250",
        }
    }

    #[test]
    fn every_free_text_field_is_capped() {
        let long = "x".repeat(3_400_000);
        let r = vec![format!("{long}@example.net")];
        let t = Transaction {
            sender: &long,
            verdict: &long,
            name: Some(&long),
            ..tx(&long, &long, &r)
        };
        let l = line(&t);
        assert!(l.len() < 3_000, "{} bytes", l.len());
        let back: MessageLine<'_> = serde_json::from_str(&l).unwrap();
        assert_eq!(back.subject.unwrap().chars().count(), 200);
        assert_eq!(back.recipients[0].chars().count(), 200);
        // A long key keeps a hash of the whole: two keys stay two.
        let other = format!("{long}y");
        let k2 = line(&tx(&other, "s", &r));
        let back2: MessageLine<'_> = serde_json::from_str(&k2).unwrap();
        assert_ne!(back.key, back2.key);
        assert_eq!(back.key.chars().count(), 200);
    }

    #[test]
    fn lines_start_with_the_event_and_read_back() {
        let r = vec!["b@example.net".to_string()];
        let l = line(&tx("al\"ice", "<hi>", &r));
        assert!(l.as_bytes().starts_with(PREFIX), "{l}");
        let back: MessageLine<'_> = serde_json::from_str(&l).unwrap();
        assert_eq!(back.key, "al\"ice");
        assert_eq!(back.subject.as_deref(), Some("<hi>"));
        assert_eq!(back.recipients, r);
        assert_eq!(back.t, 1_764_099_001.5);
        assert!(!l.contains("auth_login"), "{l}");
    }

    #[test]
    fn the_login_as_typed_goes_beside_the_account() {
        let r = vec!["b@example.net".to_string()];
        let t = Transaction {
            login: Some("ALICE"),
            ..tx("alice", "hi", &r)
        };
        let l = line(&t);
        assert!(
            l.contains("\"user\":\"alice\",\"auth_login\":\"ALICE\""),
            "{l}"
        );
        let back: MessageLine<'_> = serde_json::from_str(&l).unwrap();
        assert_eq!(back.auth_login.as_deref(), Some("ALICE"));
    }

    #[test]
    fn reads_one_keys_newest_first_and_bounded() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("events.jsonl");
        let r = vec!["b@example.net".to_string()];
        let mut log = String::new();
        for i in 0..2000 {
            let s = format!("s{i}");
            log += &line(&tx(if i % 2 == 0 { "alice" } else { "alice2" }, &s, &r));
            log.push('\n');
            log += "{\"t\":1.0,\"limit\":\"l\",\"key\":\"alice\",\"count\":1}\n";
        }
        std::fs::write(&path, &log).unwrap();
        let got = recent(&path, "alice", 3, u64::MAX).unwrap();
        let subjects: Vec<_> = got
            .messages
            .iter()
            .map(|m| m.subject.clone().unwrap())
            .collect();
        assert_eq!(subjects, ["s1998", "s1996", "s1994"]);
        assert!(!got.whole_file && got.read < log.len() as u64);
        // All of them: the whole file, in chunks, no line lost at a chunk's edge.
        let all = recent(&path, "alice", 10_000, u64::MAX).unwrap();
        assert_eq!(all.messages.len(), 1000);
        assert!(all.whole_file);
        assert_eq!(all.read, log.len() as u64);
        // Bounded in bytes: only the end is read.
        let some = recent(&path, "alice", 10_000, 4096).unwrap();
        assert_eq!(some.read, 4096);
        assert!(!some.messages.is_empty() && some.messages.len() < 30);
        assert!(!some.whole_file);
        assert!(recent(&dir.path().join("none"), "alice", 1, 10).is_err());
    }
}
