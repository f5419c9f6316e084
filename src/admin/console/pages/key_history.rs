//! The incident page's history: what admins did about the key, from the audit log
//! (`[admin] audit`): its restrictions and their ends, resets, and what became of its held
//! mail, each release or delete of many messages at once as one row (who, when, why, how
//! many).

use std::fmt::Write as _;

use serde_json::Value;

use crate::admin::audit;
use crate::admin::console::html;
use crate::admin::console::state::Console;

/// Most rows of history shown (the newest).
pub const ROWS_SHOWN: usize = 100;

/// One row of history: one action, or a run of one person's releases or deletes of held
/// mail with the same reason and result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// When (the first line's time, RFC 3339).
    pub time: String,
    /// When the run ended, when it is more than one line.
    pub until: Option<String>,
    /// Who.
    pub who: String,
    /// The audit action.
    pub action: String,
    /// Why (empty: none given).
    pub reason: String,
    /// `ok`, `refused: …` or `error: …`.
    pub result: String,
    /// Lines in the run (messages, for held mail).
    pub count: usize,
}

/// `lines` (oldest first) as rows, consecutive held-mail lines of one person, action,
/// reason and result made one.
pub fn rows(lines: &[Value]) -> Vec<Row> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out: Vec<Row> = Vec::new();
    for l in lines {
        let row = Row {
            time: s(&l["time"]),
            until: None,
            who: s(&l["who"]),
            action: s(&l["action"]),
            reason: s(&l["reason"]),
            result: s(&l["result"]),
            count: 1,
        };
        let held = row.action.starts_with("held_");
        if let Some(last) = out.last_mut().filter(|last| {
            held && last.action == row.action
                && last.who == row.who
                && last.reason == row.reason
                && last.result == row.result
        }) {
            last.count += 1;
            last.until = Some(row.time);
            continue;
        }
        out.push(row);
    }
    out
}

/// What a row did, in words.
pub fn what(r: &Row) -> String {
    let n = r.count;
    let msgs = if n == 1 {
        "1 held message".to_string()
    } else {
        format!("{n} held messages")
    };
    match r.action.as_str() {
        "held_release" => format!("released {msgs}"),
        "held_delete" => format!("deleted {msgs}"),
        "release" => "ended the restriction".into(),
        "restrict" => "restricted the key".into(),
        "reset" => "reset every limit's records".into(),
        other => other.replace('_', " "),
    }
}

/// The key's history as a table (newest first), or a line saying why there is none.
pub async fn section(c: &Console, key: &str) -> String {
    let Some(log) = &c.state.audit else {
        return "<p class=\"muted\" id=\"no-history-log\">No history: it is read from the \
                audit log, and the configuration has no <code>[admin] audit</code>.</p>"
            .into();
    };
    let (path, k) = (log.path().to_path_buf(), key.to_string());
    let read =
        tokio::task::spawn_blocking(move || audit::about(&path, &k, audit::ABOUT_MAX_BYTES)).await;
    let lines = match read {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => {
            return format!(
                "<p class=\"error\">the audit log could not be read: {}</p>",
                html::text(&e.to_string(), 300)
            )
        }
        Err(e) => return format!("<p class=\"error\">{}</p>", html::escape(&e.to_string())),
    };
    table(&rows(&lines))
}

/// The rows as a table, newest first, at most [`ROWS_SHOWN`].
pub fn table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "<p class=\"muted\" id=\"no-history\">No admin action on this key or its \
                held mail in the audit log.</p>"
            .into();
    }
    let mut out = String::from(
        "<table class=\"stack\" id=\"history\"><thead><tr><th>when</th><th>who</th>\
         <th>what</th><th>why</th><th>result</th></tr></thead><tbody>",
    );
    for r in rows.iter().rev().take(ROWS_SHOWN) {
        let when = match &r.until {
            Some(u) if u.get(..19) != r.time.get(..19) => format!(
                "{}–{}",
                html::text(&r.time, 40),
                html::text(u.get(11..19).unwrap_or(u), 40)
            ),
            _ => html::text(&r.time, 40),
        };
        let _ = write!(
            out,
            "<tr data-row><td data-label=\"when\">{when}</td><td data-label=\"who\">{}</td>\
             <td data-label=\"what\">{}</td><td data-label=\"why\">{}</td>\
             <td data-label=\"result\">{}</td></tr>",
            html::token(&r.who, 80),
            html::escape(&what(r)),
            if r.reason.is_empty() {
                "<span class=\"muted\">none given</span>".into()
            } else {
                html::text(&r.reason, 500)
            },
            html::text(&r.result, 300),
        );
    }
    if rows.len() > ROWS_SHOWN {
        let _ = write!(
            out,
            "<tr><td colspan=\"5\" class=\"muted\">and {} earlier</td></tr>",
            rows.len() - ROWS_SHOWN
        );
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l(t: &str, who: &str, action: &str, reason: &str, result: &str) -> Value {
        json!({"time": t, "who": who, "action": action, "target": "x", "reason": reason,
               "result": result})
    }

    #[test]
    fn runs_of_held_actions_are_one_row() {
        let lines = [
            l(
                "2026-01-01T00:00:00Z",
                "user:root",
                "restrict",
                "phished",
                "ok",
            ),
            l(
                "2026-01-01T00:01:00Z",
                "token:ops",
                "held_delete",
                "spam",
                "ok",
            ),
            l(
                "2026-01-01T00:01:01Z",
                "token:ops",
                "held_delete",
                "spam",
                "ok",
            ),
            l(
                "2026-01-01T00:01:02Z",
                "token:ops",
                "held_delete",
                "spam",
                "ok",
            ),
            l(
                "2026-01-01T00:02:00Z",
                "token:ops",
                "held_release",
                "fine",
                "ok",
            ),
            l(
                "2026-01-01T00:03:00Z",
                "token:ops",
                "release",
                "reset pw",
                "ok",
            ),
            l(
                "2026-01-01T00:03:01Z",
                "token:ops",
                "release",
                "reset pw",
                "ok",
            ),
        ];
        let r = rows(&lines);
        assert_eq!(r.len(), 5, "{r:#?}");
        assert_eq!(what(&r[1]), "deleted 3 held messages");
        assert_eq!(r[1].until.as_deref(), Some("2026-01-01T00:01:02Z"));
        assert_eq!(what(&r[2]), "released 1 held message");
        // Two ends of a restriction are two rows (not held mail).
        assert_eq!(what(&r[3]), "ended the restriction");
        assert_eq!(what(&r[4]), "ended the restriction");
        let t = table(&r);
        assert!(t.find("ended the restriction").unwrap() < t.find("phished").unwrap());
        assert!(t.contains("00:01:00Z–00:01:02"), "{t}");
        // A run within one second shows one time.
        let same = rows(&[
            l("2026-01-01T00:00:00.1Z", "u", "held_delete", "r", "ok"),
            l("2026-01-01T00:00:00.9Z", "u", "held_delete", "r", "ok"),
        ]);
        assert!(!table(&same).contains('–'), "{}", table(&same));
        assert!(table(&[]).contains("No admin action"));
    }

    #[test]
    fn history_text_is_escaped() {
        let r = rows(&[l("t", "token:<x>", "release", "<b>", "refused: <y>")]);
        let t = table(&r);
        assert!(
            !t.contains("<b>") && !t.contains("<x>") && !t.contains("<y>"),
            "{t}"
        );
    }
}
