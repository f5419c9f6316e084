//! A restriction's evidence in alert mail: plain sentences and aligned lists, every count
//! with its noun in the right number, nothing as JSON.

use serde_json::Value;

use super::{one_line, text};
use crate::figures::count;

/// Most items of one list in the mail.
const LIST_MAX: usize = 20;

/// The word for what floodgate's action did to an event.
fn done(action: &str) -> String {
    match action {
        "defer" => "deferred".into(),
        "deny" => "denied".into(),
        "disconnect" => "disconnected".into(),
        "restricted" => "refused while restricted".into(),
        other => format!("refused ({})", one_line(other)),
    }
}

/// The refusals of an evidence in one sentence: floodgate's by limit and action, then
/// upstream's.
pub fn refusals(r: &Value) -> String {
    let Some(obj) = r.as_object() else {
        // A bare count (an older notice).
        return r.as_u64().map_or_else(|| "none".into(), |n| n.to_string());
    };
    let mut parts = Vec::new();
    let own = obj.get("floodgate").and_then(Value::as_object);
    let mut total = 0;
    let mut limits = Vec::new();
    for (limit, actions) in own.into_iter().flatten() {
        let mut each = Vec::new();
        for (action, n) in actions.as_object().into_iter().flatten() {
            let n = n.as_u64().unwrap_or(0);
            total += n;
            each.push(format!("{n} {}", done(action)));
        }
        limits.push(format!("{} {}", one_line(limit), each.join(", ")));
    }
    if total > 0 {
        parts.push(format!(
            "floodgate refused {} ({})",
            count(total, "event"),
            limits.join("; ")
        ));
    }
    let up = |k: &str| obj.get("upstream").and_then(|u| u[k].as_u64()).unwrap_or(0);
    let (rcpt, data) = (up("rcpt"), up("data"));
    if rcpt + data > 0 {
        let mut said = Vec::new();
        if rcpt > 0 {
            said.push(count(rcpt, "recipient"));
        }
        if data > 0 {
            said.push(count(data, "message"));
        }
        parts.push(format!("upstream refused {}", said.join(" and ")));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("; ")
    }
}

/// `[name, n]` pairs (or plain values) as lines indented by four spaces: the names padded
/// to one width, the counts right-aligned with their `noun`.
pub fn aligned(items: &[Value], noun: &str) -> Vec<String> {
    let rows: Vec<(String, Option<u64>)> = items
        .iter()
        .take(LIST_MAX)
        .map(|i| match i.as_array() {
            Some(p) if p.len() == 2 => (text(&p[0]), p[1].as_u64()),
            _ => (text(i), None),
        })
        .collect();
    let width = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let digits = rows
        .iter()
        .filter_map(|(_, c)| c.map(|c| c.to_string().len()))
        .max()
        .unwrap_or(0);
    let mut out: Vec<String> = rows
        .into_iter()
        .map(|(name, c)| match c {
            Some(c) => {
                let words = count(c, noun);
                let word = words.split_once(' ').map_or("", |(_, w)| w);
                format!("    {name:<width$}  {c:>digits$} {word}")
            }
            None => format!("    {name}"),
        })
        .collect();
    if items.len() > LIST_MAX {
        out.push(format!("    and {} more", items.len() - LIST_MAX));
    }
    out
}

/// The evidence's lines: its figures, then its lists.
pub fn lines(e: &Value) -> Vec<String> {
    let n = |k: &str| e[k].as_u64().unwrap_or(0);
    let mut messages = format!("{} relayed", n("messages"));
    if e["offered"].is_u64() {
        messages.push_str(&format!(", {} offered", n("offered")));
    }
    let mut rows = vec![
        ("Messages", messages),
        ("Recipients", format!("{} relayed", n("recipients"))),
        ("Held now", count(n("held"), "message")),
        ("Refusals", refusals(&e["refusals"])),
    ];
    if !e["first_over"].is_null() && e.get("first_over").is_some() {
        rows.push(("First over", text(&e["first_over"])));
    }
    let mut out = vec![format!(
        "What this node saw of the key since {}:",
        text(&e["since"])
    )];
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0) + 1;
    for (l, v) in rows {
        out.push(format!("  {:<width$} {v}", format!("{l}:")));
    }
    let with_counts = e["offered_by_client"].as_array().filter(|a| !a.is_empty());
    let mut list = |title: &str, items: Option<&Vec<Value>>, noun: &str| {
        if let Some(items) = items.filter(|a| !a.is_empty()) {
            out.push(format!("  {title}:"));
            out.extend(aligned(items, noun));
        }
    };
    match with_counts {
        Some(a) => list("Client addresses (messages offered)", Some(a), "message"),
        None => list("Client addresses", e["client_ips"].as_array(), ""),
    }
    list(
        "Recipient domains (recipients relayed)",
        e["top_recipient_domains"].as_array(),
        "recipient",
    );
    list("Subjects", e["subjects"].as_array(), "");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_read_as_a_sentence() {
        let r = json!({"upstream": {"rcpt": 3, "data": 1},
            "floodgate": {"per-user": {"defer": 8, "restricted": 1}}});
        assert_eq!(
            refusals(&r),
            "floodgate refused 9 events (per-user 8 deferred, 1 refused while restricted); \
             upstream refused 3 recipients and 1 message"
        );
        let none = json!({"upstream": {"rcpt": 0, "data": 0}, "floodgate": {}});
        assert_eq!(refusals(&none), "none");
        assert_eq!(refusals(&json!(4)), "4");
        assert_eq!(refusals(&Value::Null), "none");
    }

    #[test]
    fn lists_are_aligned_with_plurals() {
        let items = vec![json!(["gmail.example", 700]), json!(["a.example", 1])];
        assert_eq!(
            aligned(&items, "recipient"),
            [
                "    gmail.example  700 recipients",
                "    a.example        1 recipient"
            ]
        );
        let many: Vec<Value> = (0..25).map(|i| json!(format!("s{i}"))).collect();
        let lines = aligned(&many, "");
        assert_eq!(lines.len(), LIST_MAX + 1);
        assert_eq!(lines[LIST_MAX], "    and 5 more");
        assert_eq!(lines[0], "    s0");
    }
}
