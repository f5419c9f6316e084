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

use crate::policy::alert::MessageRecord;

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
pub fn line(t: &MessageRecord<'_>) -> String {
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

/// Reads the message lines of `key` in the event log at `path` backwards from its end,
/// newest first, at most `max_bytes` bytes, handing each to `each` until it answers
/// `false`; returns the bytes read and whether the read reached the start of the file.
fn scan(
    path: &Path,
    key: &str,
    max_bytes: u64,
    mut each: impl FnMut(MessageLine<'static>) -> bool,
) -> std::io::Result<(u64, bool)> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let quoted = serde_json::to_string(key).unwrap_or_default();
    let needle = format!("\"key\":{quoted}");
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut read = 0u64;
    let mut pos = len;
    // The start of the line the previous chunk began inside.
    let mut carry: Vec<u8> = Vec::new();
    while pos > 0 && read < max_bytes {
        let n = CHUNK.min(pos).min(max_bytes - read);
        pos -= n;
        let mut buf = vec![0u8; n as usize];
        f.read_exact_at(&mut buf, pos)?;
        read += n;
        buf.extend_from_slice(&carry);
        let mut lines = buf.split(|&b| b == b'\n');
        // The first piece may be the end of a line that starts earlier in the file.
        let first = if pos > 0 { lines.next() } else { None };
        let whole: Vec<&[u8]> = lines.collect();
        for raw in whole.iter().rev() {
            if let Some(l) = parse_of(raw, key, &finder) {
                if !each(l) {
                    return Ok((read, false));
                }
            }
        }
        carry = first.map(<[u8]>::to_vec).unwrap_or_default();
    }
    Ok((read, pos == 0))
}

/// The last `max` message lines of `key` in the event log at `path`, newest first, reading
/// backwards from the end at most `max_bytes` bytes.
pub fn recent(path: &Path, key: &str, max: usize, max_bytes: u64) -> std::io::Result<Recent> {
    recent_page(path, key, 0, max, max_bytes).map(|(r, _)| r)
}

/// The message lines of `key` after the newest `skip`, at most `max`, newest first, reading
/// at most `max_bytes` bytes from the end; and whether older ones were found past them.
pub fn recent_page(
    path: &Path,
    key: &str,
    skip: usize,
    max: usize,
    max_bytes: u64,
) -> std::io::Result<(Recent, bool)> {
    let mut out = Recent::default();
    let (mut seen, mut more) = (0usize, false);
    let (read, whole_file) = scan(path, key, max_bytes, |l| {
        seen += 1;
        if seen <= skip {
            return true;
        }
        if out.messages.len() == max {
            more = true;
            return false;
        }
        out.messages.push(l);
        true
    })?;
    out.read = read;
    // Stopped on an older line: the file was not read to its start.
    out.whole_file = whole_file && !more;
    Ok((out, more))
}

/// What the event log says was relayed for a key in a window of time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Relayed {
    /// The messages relayed in the window, oldest first.
    pub messages: Vec<MessageLine<'static>>,
    /// Bytes of the log read.
    pub read: u64,
    /// Whether the read reached the window's start (a line of the key older than it, or
    /// the start of the file): nothing of the window was left unread.
    pub complete: bool,
}

/// The messages of `key` the event log at `path` shows relayed (`verdict` `relayed …`)
/// from `from` to `to` (seconds since the epoch, both included), reading backwards from the
/// end at most `max_bytes` bytes.
pub fn relayed_between(
    path: &Path,
    key: &str,
    from: f64,
    to: f64,
    max_bytes: u64,
) -> std::io::Result<Relayed> {
    let mut out = Relayed::default();
    let mut older = false;
    let (read, whole_file) = scan(path, key, max_bytes, |l| {
        if l.t < from {
            older = true;
            return false;
        }
        if l.t <= to && l.verdict.starts_with("relayed") {
            out.messages.push(l);
        }
        true
    })?;
    out.messages.reverse();
    out.read = read;
    out.complete = older || whole_file;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx<'a>(key: &'a str, subject: &'a str, rcpts: &'a [String]) -> MessageRecord<'a> {
        MessageRecord {
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
        let t = MessageRecord {
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
        let t = MessageRecord {
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

    #[test]
    fn pages_go_back_and_a_window_finds_what_was_relayed() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("events.jsonl");
        let r = vec!["b@example.net".to_string(), "c@example.org".to_string()];
        let mut log = String::new();
        for i in 0..120 {
            let s = format!("s{i}");
            let verdict = if i % 3 == 0 { "held" } else { "relayed 250" };
            let t = MessageRecord {
                time_us: 1_000_000_000 + i64::from(i) * 1_000_000,
                verdict,
                ..tx("alice", &s, &r)
            };
            log += &line(&t);
            log.push('\n');
            log += &line(&tx("bob", &s, &r));
            log.push('\n');
        }
        std::fs::write(&path, &log).unwrap();
        let subjects = |r: &Recent| -> Vec<String> {
            r.messages
                .iter()
                .map(|m| m.subject.clone().unwrap().into_owned())
                .collect()
        };
        let (p1, more) = recent_page(&path, "alice", 0, 50, u64::MAX).unwrap();
        assert!(more && !p1.whole_file);
        assert_eq!(subjects(&p1)[0], "s119");
        let (p3, more) = recent_page(&path, "alice", 100, 50, u64::MAX).unwrap();
        assert!(!more && p3.whole_file);
        assert_eq!(subjects(&p3).len(), 20);
        assert_eq!(subjects(&p3)[19], "s0");
        let (past, more) = recent_page(&path, "alice", 500, 50, u64::MAX).unwrap();
        assert!(past.messages.is_empty() && !more);
        // Seconds 1000 + 10 ..= 1000 + 19: 10 messages, 3 of them held (12, 15, 18).
        let w = relayed_between(&path, "alice", 1010.0, 1019.0, u64::MAX).unwrap();
        let got: Vec<_> = w
            .messages
            .iter()
            .map(|m| m.subject.clone().unwrap())
            .collect();
        assert_eq!(got, ["s10", "s11", "s13", "s14", "s16", "s17", "s19"]);
        assert!(w.complete);
        let none = relayed_between(&path, "alice", 5000.0, 6000.0, u64::MAX).unwrap();
        assert!(none.messages.is_empty() && none.complete);
        // Bounded in bytes: the window's start not reached.
        let cut = relayed_between(&path, "alice", 1010.0, 1019.0, 4096).unwrap();
        assert!(!cut.complete && cut.read == 4096);
    }
}
