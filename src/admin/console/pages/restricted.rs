//! Restricted keys with their evidence, newest first, paged; each with a release button.

use std::fmt::Write as _;

use serde_json::Value;

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::paging::{self, Page, PAGE_SIZE};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};

/// The longest evidence value shown, in characters.
const EVIDENCE_CHARS: usize = 400;

/// The evidence of a restriction as a definition list: one entry per field, each value
/// as compact JSON (strings as they are), cut and escaped.
pub fn evidence(v: &Value) -> String {
    let mut out = String::from("<dl class=\"evidence\">");
    match v {
        Value::Object(fields) if !fields.is_empty() => {
            for (k, v) in fields {
                let text = match (k.as_str(), v) {
                    (_, Value::String(s)) => s.clone(),
                    ("refusals", r) if r.is_object() => refusals_text(r),
                    ("held_by_node", Value::Object(nodes)) => nodes
                        .iter()
                        .map(|(n, c)| format!("{n} {c}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    (_, other) => other.to_string(),
                };
                let _ = write!(
                    out,
                    "<dt>{}</dt><dd>{}</dd>",
                    html::text(k, 60),
                    html::text(&text, EVIDENCE_CHARS)
                );
            }
        }
        Value::Null => out.push_str("<dt>evidence</dt><dd class=\"muted\">none</dd>"),
        Value::Object(_) => out.push_str("<dt>evidence</dt><dd class=\"muted\">none</dd>"),
        other => {
            let _ = write!(
                out,
                "<dt>evidence</dt><dd>{}</dd>",
                html::text(&other.to_string(), EVIDENCE_CHARS)
            );
        }
    }
    out.push_str("</dl>");
    out
}

/// A `refusals` object in words: `upstream 3 (rcpt 3, data 0); floodgate: LIMIT ACTION N, …`.
fn refusals_text(r: &Value) -> String {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let up = &r["upstream"];
    let mut own = Vec::new();
    for (limit, actions) in r["floodgate"].as_object().into_iter().flatten() {
        for (action, count) in actions.as_object().into_iter().flatten() {
            own.push(format!("{limit} {action} {}", n(count)));
        }
    }
    format!(
        "upstream {} (rcpt {}, data {}); floodgate: {}",
        n(&up["rcpt"]) + n(&up["data"]),
        n(&up["rcpt"]),
        n(&up["data"]),
        if own.is_empty() {
            "none".to_string()
        } else {
            own.join(", ")
        }
    )
}

/// `GET /console/restricted`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let mut list = match c.state.restrictions_now().await {
        Ok(l) => l,
        Err(e) => return error_page(503, &e.to_string(), shell),
    };
    list.sort_by(|a, b| b.since_us.cmp(&a.since_us).then_with(|| a.key.cmp(&b.key)));
    let pg = Page::parse(req.param("page"), PAGE_SIZE).clamp(list.len());
    let mut b = String::with_capacity(16 * 1024);
    let _ = write!(
        b,
        "<p class=\"muted\">Restricted: {}, newest first. Releasing a key also resets \
         the records of the limit that restricted it.</p>",
        list.len()
    );
    if shell.actions {
        b.push_str(html::NOSCRIPT);
    }
    b.push_str(
        "<table id=\"restricted\"><thead><tr><th>key</th><th>limit</th><th>since</th>\
         <th>until</th><th>rate / limit</th><th>by, why</th><th>evidence</th><th></th>\
         </tr></thead><tbody>",
    );
    for r in &list[pg.range(list.len())] {
        let rate = match r.rate {
            Some(v) => format!("{} / {}", html::num(v), html::text(&r.limit_text, 60)),
            None => String::new(),
        };
        let _ = write!(
            b,
            "<tr data-row><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}<br><small>{}</small></td><td>{}</td><td>",
            html::key_link(&r.key),
            html::text(&r.limit, 60),
            super::when(r.since_us),
            r.until_us
                .map_or_else(|| "until released".into(), super::when),
            rate,
            html::text(&r.by, html::CELL_CHARS),
            html::text(&r.reason, html::CELL_CHARS),
            evidence(&r.evidence)
        );
        if shell.actions {
            let _ = write!(
                b,
                "<input class=\"reason\" placeholder=\"why release\" aria-label=\"reason\">{}",
                html::action_button(
                    "Release",
                    &html::url("/console/act/release", &[("key", &r.key)]),
                    "Release now?",
                    true
                )
            );
        }
        b.push_str("</td></tr>");
    }
    if list.is_empty() {
        b.push_str("<tr><td colspan=\"8\" class=\"muted\">no key is restricted</td></tr>");
    }
    b.push_str("</tbody></table>");
    b.push_str(&paging::links(
        "/console/restricted",
        &[],
        pg,
        Some(list.len()),
        false,
    ));
    html_response(
        200,
        html::page("Restricted keys", Nav::Restricted, shell, &b),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_and_nodes_read_as_words() {
        let e = evidence(&json!({
            "refusals": {"upstream": {"rcpt": 3, "data": 1},
                         "floodgate": {"per-user": {"defer": 4, "restricted": 2}}},
            "held": 5,
            "held_by_node": {"mx1": 3, "mx2": 2},
        }));
        assert!(
            e.contains("<dd>upstream 4 (rcpt 3, data 1); floodgate: per-user defer 4, per-user restricted 2</dd>"),
            "{e}"
        );
        assert!(e.contains("<dt>held</dt><dd>5</dd>"), "{e}");
        assert!(e.contains("<dd>mx1 3, mx2 2</dd>"), "{e}");
    }

    #[test]
    fn evidence_is_escaped_and_cut() {
        let long = "<i>".repeat(1000);
        let e = evidence(&json!({"client_ips": ["10.0.0.1"], "subjects": [long], "n": 3}));
        assert!(
            e.contains("<dt>client_ips</dt><dd>[&quot;10.0.0.1&quot;]</dd>"),
            "{e}"
        );
        assert!(e.contains("<dt>n</dt><dd>3</dd>"), "{e}");
        assert!(!e.contains("<i>"), "{e}");
        assert!(e.contains("characters, cut"), "{e}");
        assert!(evidence(&Value::Null).contains("none"));
        assert!(evidence(&json!({})).contains("none"));
        assert!(evidence(&json!("<x>")).contains("&quot;&lt;x&gt;&quot;"));
    }
}
