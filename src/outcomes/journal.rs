//! Queued messages and their counted outcomes in the event log, so the index survives a
//! restart:
//!
//! ```json
//! {"event":"queued","t":1764099001.5,"queue_id":"4XyzQ1bCDf","keys":[["bounce-ratio","alice"]],"recipients":["bob@example.org"]}
//! {"event":"outcome","t":1764099060.1,"queue_id":"4XyzQ1bCDf","recipient":"bob@example.org","outcome":"bounced"}
//! ```

use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use super::index::{Index, Queued};
use super::logline::Kind;

fn seconds(time_us: i64) -> f64 {
    time_us as f64 / 1e6
}

/// The event-log line of a queued message.
pub fn queued_line(queue_id: &str, q: &Queued, time_us: i64) -> String {
    serde_json::json!({
        "event": "queued",
        "t": seconds(time_us),
        "queue_id": queue_id,
        "keys": q.keys,
        "recipients": q.recipients,
    })
    .to_string()
}

/// The event-log line of a counted outcome.
pub fn outcome_line(queue_id: &str, recipient: &str, kind: Kind, time_us: i64) -> String {
    serde_json::json!({
        "event": "outcome",
        "t": seconds(time_us),
        "queue_id": queue_id,
        "recipient": recipient,
        "outcome": kind.as_str(),
    })
    .to_string()
}

#[derive(Deserialize)]
struct Line {
    event: String,
    queue_id: String,
    #[serde(default)]
    keys: Vec<(String, String)>,
    #[serde(default)]
    recipients: Vec<String>,
    #[serde(default)]
    recipient: String,
    #[serde(default)]
    outcome: String,
}

/// What a rebuild read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Queued messages put back in the index.
    pub queued: u64,
    /// Counted outcomes put back.
    pub outcomes: u64,
    /// Lines that start like a queued or outcome line but could not be read.
    pub bad: u64,
}

/// Feeds one event-log text (the file's lines, oldest first) into `index`.
pub fn replay(index: &Index, text: impl BufRead) -> Rebuilt {
    let mut r = Rebuilt::default();
    for line in text.lines() {
        let Ok(line) = line else { break };
        // Message lines (the console's recent transactions) are not the index's.
        if !line.starts_with("{\"event\":") || line.starts_with("{\"event\":\"message\"") {
            continue;
        }
        let Ok(l) = serde_json::from_str::<Line>(&line) else {
            r.bad += 1;
            continue;
        };
        match (l.event.as_str(), Kind::parse(&l.outcome)) {
            ("queued", _) => {
                index.insert(
                    &l.queue_id,
                    Queued {
                        keys: l.keys,
                        recipients: l.recipients,
                    },
                );
                r.queued += 1;
            }
            ("outcome", Some(kind)) => {
                index.note(&l.queue_id, &l.recipient, None, kind);
                r.outcomes += 1;
            }
            _ => r.bad += 1,
        }
    }
    r
}

/// Rebuilds `index` from the event log at `path` and its rotated copy `PATH.1` (older
/// first); files that do not exist are skipped.
pub fn rebuild(index: &Index, path: &Path) -> Rebuilt {
    let mut total = Rebuilt::default();
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    for p in [Path::new(&rotated), path] {
        if let Ok(f) = std::fs::File::open(p) {
            let r = replay(index, std::io::BufReader::new(f));
            total.queued += r.queued;
            total.outcomes += r.outcomes;
            total.bad += r.bad;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcomes::index::Noted;

    #[test]
    fn lines_round_trip_through_a_rebuild() {
        let q = Queued {
            keys: vec![("bounce-ratio".into(), "alice".into())],
            recipients: vec!["bob@example.org".into(), "eve@example.org".into()],
        };
        let text = [
            r#"{"t":1.0,"limit":"x","key":"k","count":1}"#.to_string(),
            queued_line("Q1", &q, 1_000_000),
            outcome_line("Q1", "bob@example.org", Kind::Bounced, 2_000_000),
            r#"{"event":"queued","broken":true}"#.to_string(),
        ]
        .join("\n");
        let ix = Index::new(10);
        let r = replay(&ix, text.as_bytes());
        assert_eq!(
            r,
            Rebuilt {
                queued: 1,
                outcomes: 1,
                bad: 1
            }
        );
        // The outcome counted before the restart stays counted.
        assert_eq!(
            ix.note("Q1", "bob@example.org", None, Kind::Bounced),
            Noted::Duplicate
        );
        assert_eq!(
            ix.note("Q1", "eve@example.org", None, Kind::Bounced),
            Noted::Charge(q.keys.clone())
        );
        assert!(queued_line("Q1", &q, 0).starts_with("{\"event\":"));
        assert!(outcome_line("Q1", "b", Kind::Sent, 0).starts_with("{\"event\":"));
    }
}
