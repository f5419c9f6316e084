//! One key's last hour, read from the event log (`[report] events`).
//!
//! The event log already has every evaluation of every limit with its key, written off the
//! session path; keeping a per-key history in memory as well would mean a map insert per
//! message and a bound that forgets exactly the keys nobody expected. So the key page reads
//! the end of the log: at most [`MAX_TAIL`] bytes, lines of the key only (found with a
//! substring search before any JSON is parsed), summed per limit and minute.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Deserialize;

use super::history::{minute_of, MINUTES};

/// The most bytes read from the end of the event log for one key page.
pub const MAX_TAIL: u64 = 32 * 1024 * 1024;

/// One key's evaluations per limit and minute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyHistory {
    /// Per limit (by name): the amount offered per minute over the hour, oldest first.
    pub limits: BTreeMap<String, Vec<f64>>,
    /// Bytes of the log read.
    pub read: u64,
    /// The read reached back to the start of the file (nothing older was skipped).
    pub whole_file: bool,
}

#[derive(Deserialize)]
struct Line<'a> {
    t: f64,
    #[serde(borrow)]
    limit: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    key: std::borrow::Cow<'a, str>,
    count: f64,
}

/// Sums the evaluations of `key` in `buf` (whole JSON lines of the event log) per limit
/// and minute of the hour ending at minute `now`. Lines of other keys, other events and
/// lines that do not parse are skipped.
pub fn sum_lines(buf: &[u8], key: &str, now: i64) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let Ok(quoted) = serde_json::to_string(key) else {
        return out;
    };
    let needle = format!("\"key\":{quoted}");
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let first = now - MINUTES as i64 + 1;
    for line in buf.split(|&b| b == b'\n') {
        if line.starts_with(b"{\"event\":") || finder.find(line).is_none() {
            continue;
        }
        let Ok(l) = serde_json::from_slice::<Line<'_>>(line) else {
            continue;
        };
        if l.key != key || !l.t.is_finite() {
            continue;
        }
        let m = minute_of((l.t * 1e6) as i64);
        if !(first..=now).contains(&m) {
            continue;
        }
        let slot = out
            .entry(l.limit.into_owned())
            .or_insert_with(|| vec![0.0; MINUTES]);
        slot[(m - first) as usize] += l.count;
    }
    out
}

/// Reads `key`'s last hour before minute `now` from the event log at `path`.
pub fn read(path: &Path, key: &str, now: i64) -> std::io::Result<KeyHistory> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(MAX_TAIL);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(MAX_TAIL).read_to_end(&mut buf)?;
    // Started inside a line: drop its end.
    let body = if start > 0 {
        memchr::memchr(b'\n', &buf).map_or(&buf[..0], |i| &buf[i + 1..])
    } else {
        &buf[..]
    };
    Ok(KeyHistory {
        limits: sum_lines(body, key, now),
        read: buf.len() as u64,
        whole_file: start == 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MIN: i64 = 29_000_000;

    fn line(min_ago: i64, limit: &str, key: &str, count: f64) -> String {
        let t = (NOW_MIN - min_ago) as f64 * 60.0 + 1.5;
        format!(
            "{{\"t\":{t:.6},\"limit\":{},\"key\":{},\"count\":{count}}}\n",
            serde_json::to_string(limit).unwrap(),
            serde_json::to_string(key).unwrap()
        )
    }

    #[test]
    fn sums_one_key_per_limit_and_minute() {
        let mut log = String::new();
        log += &line(0, "per-user", "alice", 1.0);
        log += &line(0, "per-user", "alice", 2.0);
        log += &line(1, "per-rcpt", "alice", 3.0);
        log += &line(0, "per-user", "alice2", 100.0);
        log += &line(0, "per-user", "Alice", 100.0);
        log += &line(60, "per-user", "alice", 100.0);
        log += &line(-1, "per-user", "alice", 100.0);
        log += "{\"event\":\"queued\",\"key\":\"alice\",\"t\":1}\n";
        log += "{\"t\":oops,\"key\":\"alice\"}\n";
        let h = sum_lines(log.as_bytes(), "alice", NOW_MIN);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h["per-user"][59], 3.0);
        assert_eq!(h["per-user"].iter().sum::<f64>(), 3.0);
        assert_eq!(h["per-rcpt"][58], 3.0);
    }

    #[test]
    fn keys_needing_json_escapes() {
        let key = "we\"ird\\key\u{1}<b>";
        let log = line(2, "l", key, 4.0) + &line(2, "l", "we", 1.0);
        let h = sum_lines(log.as_bytes(), key, NOW_MIN);
        assert_eq!(h["l"][57], 4.0);
    }

    #[test]
    fn reads_only_the_tail_of_a_file() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, line(0, "l", "k", 1.0).repeat(3)).unwrap();
        let h = read(&path, "k", NOW_MIN).unwrap();
        assert!(h.whole_file);
        assert_eq!(h.limits["l"][59], 3.0);
        assert!(read(&dir.path().join("nope"), "k", NOW_MIN).is_err());
    }
}
