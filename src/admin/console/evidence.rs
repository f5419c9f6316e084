//! A restriction's evidence as tables: whatever JSON object [`crate::policy::evidence`]
//! gives, rendered by shape, so that a field added or changed there shows without a change
//! here: a number as a number, a string as text, a list of `[name, count]` pairs as a
//! two-column table, a list of values as a list, an object as a small nested table. The
//! client addresses get the messages each offered (the evidence's `offered_by_client`) and
//! the names the page found for them elsewhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::html;

/// The longest string shown in the evidence, in characters.
pub const VALUE_CHARS: usize = 400;
/// Most items of one list shown.
pub const MAX_ITEMS: usize = 50;
/// How deep nested objects are shown; deeper ones as compact JSON.
const MAX_DEPTH: usize = 4;

/// What the page knows of a client address besides the evidence: its reverse name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Client {
    /// The reverse name, when some message or held file said it.
    pub name: Option<String>,
}

/// A field name for people: `top_recipient_domains` → `top recipient domains`.
fn label(k: &str) -> String {
    k.replace('_', " ")
}

/// One value, by shape.
pub fn value(v: &Value, depth: usize) -> String {
    match v {
        Value::Null => "<span class=\"muted\">none</span>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) => html::num(f),
            None => html::escape(&n.to_string()),
        },
        Value::String(s) => html::text(s, VALUE_CHARS),
        Value::Array(items) if items.is_empty() => "<span class=\"muted\">none</span>".into(),
        Value::Array(items) if items.iter().all(is_pair) => pairs(items),
        Value::Array(items) => {
            let mut out = String::from("<ul class=\"plain\">");
            for i in items.iter().take(MAX_ITEMS) {
                let _ = write!(out, "<li>{}</li>", value(i, depth + 1));
            }
            if items.len() > MAX_ITEMS {
                let _ = write!(
                    out,
                    "<li class=\"muted\">and {} more</li>",
                    items.len() - MAX_ITEMS
                );
            }
            out.push_str("</ul>");
            out
        }
        Value::Object(fields) if depth >= MAX_DEPTH => {
            html::text(&Value::Object(fields.clone()).to_string(), VALUE_CHARS)
        }
        Value::Object(fields) if fields.is_empty() => "<span class=\"muted\">none</span>".into(),
        Value::Object(fields) => {
            let mut out = String::from("<table class=\"nested\"><tbody>");
            for (k, v) in fields {
                let _ = write!(
                    out,
                    "<tr><th scope=\"row\">{}</th><td class=\"{}\">{}</td></tr>",
                    html::text(&label(k), 60),
                    if v.is_number() { "n" } else { "" },
                    value(v, depth + 1)
                );
            }
            out.push_str("</tbody></table>");
            out
        }
    }
}

/// `[name, count]`.
fn is_pair(v: &Value) -> bool {
    matches!(v, Value::Array(p) if p.len() == 2 && p[0].is_string() && p[1].is_number())
}

/// A list of `[name, count]` pairs as a two-column table.
fn pairs(items: &[Value]) -> String {
    let mut out = String::from("<table class=\"nested\"><tbody>");
    for p in items.iter().take(MAX_ITEMS) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
            html::text(p[0].as_str().unwrap_or(""), VALUE_CHARS),
            value(&p[1], MAX_DEPTH)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The client addresses (a list of strings) as a table with their names and the messages
/// each offered (`offered`: address → count).
fn clients(
    ips: &[Value],
    offered: &BTreeMap<&str, u64>,
    known: &BTreeMap<String, Client>,
) -> String {
    if ips.is_empty() {
        return "<span class=\"muted\">none</span>".into();
    }
    let mut out = String::from(
        "<table class=\"nested\" id=\"clients\"><thead><tr><th>address</th><th>reverse name</th>\
         <th class=\"n\">messages offered</th></tr></thead><tbody>",
    );
    // Most messages first, as counted; then the addresses listed without a count.
    let mut rows: Vec<(String, u64)> = ips
        .iter()
        .take(MAX_ITEMS)
        .map(|ip| {
            let text = match ip {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let n = offered.get(text.as_str()).copied().unwrap_or(0);
            (text, n)
        })
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (text, n) in rows {
        let c = known.get(&text).cloned().unwrap_or_default();
        let _ = write!(
            out,
            "<tr><td data-label=\"address\">{}</td><td data-label=\"reverse name\">{}</td>\
             <td class=\"n\" data-label=\"messages offered\">{n}</td></tr>",
            html::text(&text, 80),
            c.name.as_deref().map_or_else(
                || "<span class=\"muted\">not known</span>".into(),
                |n| html::text(n, html::CELL_CHARS)
            ),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The evidence object as a table of its fields (anything else as one value);
/// `known`: the client addresses' names.
pub fn table(v: &Value, known: &BTreeMap<String, Client>) -> String {
    let Value::Object(fields) = v else {
        return format!("<div class=\"evidence-table\">{}</div>", value(v, 0));
    };
    if fields.is_empty() {
        return "<p class=\"muted\">No evidence.</p>".into();
    }
    let offered: BTreeMap<&str, u64> = v["offered_by_client"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p[0].as_str()?, p[1].as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    let mut out = String::from("<table class=\"evidence-table\" id=\"evidence\"><tbody>");
    for (k, v) in fields {
        let shown = match (k.as_str(), v) {
            ("client_ips", Value::Array(ips)) => clients(ips, &offered, known),
            // Shown with the client addresses.
            ("offered_by_client", _) if fields.contains_key("client_ips") => continue,
            _ => value(v, 1),
        };
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td class=\"{}\">{}</td></tr>",
            html::text(&label(k), 60),
            if v.is_number() { "n" } else { "" },
            shown
        );
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes() {
        let mut known = BTreeMap::new();
        known.insert(
            "192.0.2.7".to_string(),
            Client {
                name: Some("mx<1>.example".into()),
            },
        );
        let e = json!({
            "client_ips": ["192.0.2.7", "198.51.100.1"],
            "offered_by_client": [["192.0.2.7", 3]],
            "top_recipient_domains": [["example.com", 4], ["<b>.net", 1]],
            "subjects": ["<script>alert(1)</script>"],
            "messages": 12,
            "refusals": {"upstream": 2, "floodgate": {"rcpt": 1}},
            "held": 3,
            "since": null
        });
        let t = table(&e, &known);
        assert!(
            t.contains("<td data-label=\"address\">192.0.2.7</td>"),
            "{t}"
        );
        assert!(
            t.contains("mx&lt;1&gt;.example") && t.contains(">3</td>"),
            "{t}"
        );
        assert!(t.contains("not known"), "{t}");
        assert!(
            t.contains("<td>example.com</td><td class=\"n\">4</td>"),
            "{t}"
        );
        assert!(t.contains("&lt;b&gt;.net"), "{t}");
        assert!(
            t.contains("<li>&lt;script&gt;alert(1)&lt;/script&gt;</li>"),
            "{t}"
        );
        assert!(
            t.contains("<th scope=\"row\">upstream</th><td class=\"n\">2</td>"),
            "{t}"
        );
        assert!(
            t.contains("<th scope=\"row\">rcpt</th><td class=\"n\">1</td>"),
            "{t}"
        );
        assert!(
            t.contains("<th scope=\"row\">top recipient domains</th>"),
            "{t}"
        );
        assert!(!t.contains("<script>") && !t.contains("<b>"), "{t}");
        assert!(table(&json!({}), &known).contains("No evidence"));
        assert!(table(&json!("x<"), &known).contains("x&lt;"));
        let deep = json!({"a": {"b": {"c": {"d": {"e": 1}}}}});
        assert!(table(&deep, &known).contains("{&quot;e&quot;:1}"));
        let many: Vec<Value> = (0..60).map(|i| json!(format!("s{i}"))).collect();
        assert!(value(&Value::Array(many), 0).contains("and 10 more"));
    }
}
