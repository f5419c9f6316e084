//! The ledger file's lines (pure: serialisation and parsing).
//!
//! ```text
//! floodgate-postfix-held 1
//! {"held":{"queue_id":"4Q9kTq1wXMz7Lf","key":"alice","limit":"per_user","reason":"…","time":1764000000,"sender":"alice@example.org","recipients":["bob@example.net"],"size":2048,"client":"192.0.2.7","user":"alice"}}
//! {"done":{"queue_id":"4Q9kTq1wXMz7Lf","how":"released","time":1764000100,"by":"root"}}
//! ```
//!
//! The first line names the format's version; each line after it is one JSON object: a
//! message floodgate told Postfix to hold (`held`), or the end of one (`done`: released,
//! deleted, or gone from Postfix's hold queue behind floodgate's back). Lines are only
//! appended; compaction rewrites the file with one line per message still held and the
//! recent ends. A last line without its newline is a write a crash cut short and is not
//! read.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::postfix::queue::is_queue_id;

/// The first line of every ledger file.
pub const MAGIC: &str = "floodgate-postfix-held 1";

/// Longest line read: a message with many long recipients fits; anything longer is damage.
pub const MAX_LINE: usize = 1 << 20;

/// One message floodgate told Postfix to hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerEntry {
    /// Postfix's queue id (what `postsuper` and `postcat -q` take).
    pub queue_id: String,
    /// The key of the limit that held it.
    pub key: String,
    /// The limit that held it.
    pub limit: String,
    /// Why, as the limit's text says it.
    pub reason: String,
    /// When it was held (seconds since the Unix epoch).
    pub time: u64,
    /// The envelope sender (empty for the null sender).
    pub sender: String,
    /// The envelope recipients.
    pub recipients: Vec<String>,
    /// Its size in octets, as far as known when it was held (0 when not known yet).
    pub size: u64,
    /// The client's address; `None` for mail handed to the local `sendmail`.
    pub client: Option<IpAddr>,
    /// The authenticated user or the submitting local user, if any.
    pub user: Option<String>,
}

/// How a held message left Postfix's hold queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum How {
    /// Released through floodgate (`postsuper -H`).
    Released,
    /// Deleted through floodgate (`postsuper -d ID hold`).
    Deleted,
    /// No longer in the hold queue: released or deleted with Postfix's own commands.
    Gone,
}

impl How {
    /// The word for people and the audit: `released`, `deleted`, `gone`.
    pub fn as_str(self) -> &'static str {
        match self {
            How::Released => "released",
            How::Deleted => "deleted",
            How::Gone => "gone",
        }
    }
}

/// The end of a held message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Done {
    /// Postfix's queue id.
    pub queue_id: String,
    /// How it ended.
    pub how: How,
    /// When (seconds since the Unix epoch).
    pub time: u64,
    /// Who asked for it (the admin actor), when someone did.
    pub by: Option<String>,
}

/// One line of the ledger after its first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Line {
    /// A message held.
    Held(LedgerEntry),
    /// A held message's end.
    Done(Done),
}

impl Line {
    /// The queue id the line is about.
    pub fn queue_id(&self) -> &str {
        match self {
            Line::Held(e) => &e.queue_id,
            Line::Done(d) => &d.queue_id,
        }
    }

    /// The line as written, with its newline.
    pub fn encode(&self) -> String {
        let mut s = serde_json::to_string(self).expect("a ledger line always serialises");
        s.push('\n');
        s
    }
}

/// What is wrong with a ledger file.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LineError {
    /// The first line is not [`MAGIC`].
    #[error("not a floodgate Postfix hold ledger (first line {0:?}, expected {MAGIC:?})")]
    Magic(String),
    /// A line that does not read.
    #[error("line {line}: {reason}")]
    Bad {
        /// Its number (1-based).
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Reads one line (without its newline).
pub fn parse_line(text: &str, number: usize) -> Result<Line, LineError> {
    let bad = |reason: String| LineError::Bad {
        line: number,
        reason,
    };
    if text.len() > MAX_LINE {
        return Err(bad(format!("longer than {MAX_LINE} octets")));
    }
    let line: Line = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if !is_queue_id(line.queue_id()) {
        return Err(bad(format!(
            "{:?} is not a Postfix queue id",
            line.queue_id()
        )));
    }
    Ok(line)
}

/// Reads a whole ledger file: its lines in order. Empty text is an empty ledger; a last line
/// without its newline (a cut-short write) is left out.
pub fn parse(text: &[u8]) -> Result<Vec<Line>, LineError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let whole = match text.iter().rposition(|&b| b == b'\n') {
        Some(end) => &text[..=end],
        None => &text[..0],
    };
    let mut lines = whole.split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    if first != MAGIC.as_bytes() {
        if whole.is_empty() && MAGIC.as_bytes().starts_with(text) {
            return Ok(Vec::new());
        }
        return Err(LineError::Magic(
            String::from_utf8_lossy(&first[..first.len().min(80)]).into_owned(),
        ));
    }
    let mut out = Vec::new();
    for (i, raw) in lines.enumerate() {
        if raw.is_empty() {
            continue;
        }
        let number = i + 2;
        let text = std::str::from_utf8(raw).map_err(|_| LineError::Bad {
            line: number,
            reason: "not UTF-8".into(),
        })?;
        out.push(parse_line(text, number)?);
    }
    Ok(out)
}

/// The text of a ledger holding `lines`.
pub fn encode(lines: &[Line]) -> String {
    let mut s = String::with_capacity(MAGIC.len() + 1 + lines.len() * 200);
    s.push_str(MAGIC);
    s.push('\n');
    for l in lines {
        s.push_str(&l.encode());
    }
    s
}

#[cfg(test)]
mod tests;
