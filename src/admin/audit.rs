//! The audit log (`[admin] audit`): one JSON line per admin action, appended to a file
//! opened `O_APPEND` (created mode 0600) for each line, so a rotated file is followed:
//!
//! ```json
//! {"time":"2025-01-02T03:04:05.000000Z","who":"token:alice","action":"release","target":"bob","reason":"password changed","result":"ok"}
//! ```
//!
//! `who` is the [`Actor`] (`token:NAME` or `user:NAME`); `action` one of [`ACTIONS`];
//! `target` the key, the held message's id, or (for a console selection refused before
//! any message was touched) the ids it selected, or `null` (reload); `reason` the reason given or `null`; `result` `ok`,
//! `refused: WHY` (the request was refused: a 4xx) or `error: WHY` (it failed: a 5xx).
//! A held action writes one line per message, with two more fields: `key` (the key the
//! message was held for, so that a key's incident page finds what became of its mail) and,
//! for a release, `ref` (the reference the released message's trace header names in place
//! of the reason, unless `[hold] reason_in_header` is on). A line that cannot be written is logged and
//! counted (`floodgate_audit_write_errors_total`); the action goes on regardless.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::actor::Actor;
use super::http::Response;

/// The actions the audit log records.
pub const ACTIONS: [&str; 10] = [
    "release",
    "restrict",
    "held_release",
    "held_delete",
    "reset",
    "reload",
    "campaign_held_release",
    "campaign_held_delete",
    "campaign_release",
    "campaign",
];

/// The audit log's file.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    /// The audit log at `path`, created (mode 0600) now if missing, so a path that cannot
    /// be written is found at start.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        append(path, b"")?;
        Ok(AuditLog { path: path.into() })
    }

    /// Where it is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `line` (one JSON object) and a newline in one write.
    pub fn write(&self, line: &str) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        append(&self.path, &bytes)
    }
}

fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// One audit line (without its newline): at `time_us` (microseconds since the epoch),
/// `who` did `action` on `target` for `reason`, with `result`; the fields in that order.
pub fn line(
    time_us: i64,
    who: &Actor,
    action: &str,
    target: &Value,
    reason: Option<&str>,
    result: &str,
) -> String {
    let text = |v: &str| Value::from(v).to_string();
    format!(
        "{{\"time\":{},\"who\":{},\"action\":{},\"target\":{target},\"reason\":{},\"result\":{}}}",
        text(&crate::time::rfc3339(time_us)),
        text(&who.to_string()),
        text(action),
        reason.map_or_else(|| "null".into(), text),
        text(result),
    )
}

/// [`line()`] with more fields after `result` (their values JSON), in the order given.
pub fn line_with(
    time_us: i64,
    who: &Actor,
    action: &str,
    target: &Value,
    reason: Option<&str>,
    result: &str,
    more: &[(&str, Value)],
) -> String {
    let mut l = line(time_us, who, action, target, reason, result);
    l.pop();
    for (name, v) in more {
        l.push_str(&format!(",{}:{v}", Value::from(*name)));
    }
    l.push('}');
    l
}

/// The reference of the `n`th message of a release asked at `time_us`: what the trace
/// header of a released message names, and its audit line's `ref`.
pub fn reference(time_us: i64, n: usize) -> String {
    format!("{time_us:x}-{n}")
}

/// The most bytes read from the end of the audit log for one key's history.
pub const ABOUT_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Whether audit line `l` is about `key`: an action on the key itself (its restriction, its
/// release, a reset, its held mail as a whole) or on a message held for it.
pub fn is_about(l: &Value, key: &str) -> bool {
    l["target"] == key || l["key"] == key
}

/// The lines of the audit log at `path` about `key` (see [`is_about`]), oldest first, from
/// at most the last `max_bytes` of the file (a line cut by that start is left out); a line
/// that does not parse is skipped. A missing file has none.
pub fn about(path: &Path, key: &str, max_bytes: u64) -> std::io::Result<Vec<Value>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max_bytes);
    f.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    f.take(max_bytes).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.split('\n');
    if start > 0 {
        lines.next();
    }
    Ok(lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| is_about(v, key))
        .collect())
}

/// The `result` of an answer: `ok` (2xx), `refused: WHY` (4xx), `error: WHY` (otherwise),
/// WHY being the answer's `error` text.
pub fn result_of(r: &Response) -> String {
    if (200..300).contains(&r.status) {
        return "ok".into();
    }
    let why = serde_json::from_slice::<Value>(&r.body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("status {}", r.status));
    if (400..500).contains(&r.status) {
        format!("refused: {why}")
    } else {
        format!("error: {why}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_line_format() {
        let l = line(
            1_735_787_045_000_000,
            &Actor::Token("alice".into()),
            "release",
            &json!("bob@example.org"),
            Some("password \"changed\"\nnow"),
            "ok",
        );
        assert_eq!(
            l,
            "{\"time\":\"2025-01-02T03:04:05.000000Z\",\"who\":\"token:alice\",\"action\":\"release\",\
             \"target\":\"bob@example.org\",\"reason\":\"password \\\"changed\\\"\\nnow\",\"result\":\"ok\"}"
        );
        let v: Value = serde_json::from_str(&line(
            0,
            &Actor::User("root".into()),
            "reload",
            &Value::Null,
            None,
            "error: bad config",
        ))
        .unwrap();
        assert_eq!(v["who"], "user:root");
        assert_eq!(v["time"], "1970-01-01T00:00:00.000000Z");
        assert!(v["target"].is_null() && v["reason"].is_null());
        assert_eq!(v["result"], "error: bad config");
        // One line, whatever the text holds.
        assert!(!l.contains('\n'));
        let k = line_with(
            0,
            &Actor::Token("ops".into()),
            "held_release",
            &json!("id-1"),
            Some("ok"),
            "ok",
            &[("key", json!("bob\"x")), ("ref", json!(reference(255, 3)))],
        );
        let v: Value = serde_json::from_str(&k).unwrap();
        assert_eq!(v["key"], "bob\"x");
        assert_eq!(v["ref"], "ff-3");
        assert!(
            k.ends_with(",\"key\":\"bob\\\"x\",\"ref\":\"ff-3\"}"),
            "{k}"
        );
    }

    #[test]
    fn results_from_answers() {
        assert_eq!(result_of(&Response::json(200, &json!({}))), "ok");
        assert_eq!(
            result_of(&Response::error(400, "say why")),
            "refused: say why"
        );
        assert_eq!(
            result_of(&Response::error(409, "still restricted")),
            "refused: still restricted"
        );
        assert_eq!(
            result_of(&Response::error(503, "store down")),
            "error: store down"
        );
        assert_eq!(
            result_of(&Response::text(500, "text/plain", "x".into())),
            "error: status 500"
        );
    }

    #[test]
    fn a_keys_lines_from_the_end_of_the_log() {
        let d = tempfile::TempDir::new().unwrap();
        let p = d.path().join("audit.jsonl");
        assert!(about(&p, "bob", 1000).unwrap().is_empty());
        let log = AuditLog::open(&p).unwrap();
        let who = Actor::Token("ops".into());
        log.write(&line(1, &who, "restrict", &json!("bob"), Some("x"), "ok"))
            .unwrap();
        log.write(&line(2, &who, "restrict", &json!("alice"), None, "ok"))
            .unwrap();
        log.write("not json").unwrap();
        let held = line_with(
            3,
            &who,
            "held_delete",
            &json!("id-9"),
            Some("spam"),
            "ok",
            &[("key", json!("bob"))],
        );
        log.write(&held).unwrap();
        let bob = about(&p, "bob", ABOUT_MAX_BYTES).unwrap();
        assert_eq!(bob.len(), 2, "{bob:?}");
        assert_eq!(bob[0]["action"], "restrict");
        assert_eq!(bob[1]["target"], "id-9");
        // Only the tail is read: the first line, cut, is left out.
        let tail = about(&p, "bob", held.len() as u64 + 5).unwrap();
        assert_eq!(tail.len(), 1, "{tail:?}");
        assert_eq!(tail[0]["action"], "held_delete");
    }

    #[test]
    fn appends_to_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::TempDir::new().unwrap();
        let p = d.path().join("audit.jsonl");
        let log = AuditLog::open(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        log.write("{\"a\":1}").unwrap();
        log.write("{\"a\":2}").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
        // A path that cannot be created is an error at open.
        assert!(AuditLog::open(&d.path().join("no/such/dir")).is_err());
    }
}
