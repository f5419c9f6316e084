//! Restricted keys with their evidence, newest first, paged; each with a release button.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::admin::console::evidence;
use crate::admin::console::figures;
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::paging::{self, Page, PAGE_SIZE};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};

/// The evidence of a restriction as tables, by shape (see [`evidence::table`]).
pub fn evidence(v: &Value) -> String {
    evidence::table(v, &BTreeMap::new())
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
    let held = figures::held_counts(c).await.unwrap_or_default();
    b.push_str(
        "<table id=\"restricted\" class=\"stack\"><thead><tr><th>key</th><th>limit</th><th>since</th>\
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
            "<tr data-row><td data-label=\"key\">{}<br><small><a href=\"{}\">{} held now</a>\
             </small></td><td data-label=\"limit\">{}</td>\
             <td data-label=\"since\">{}</td><td data-label=\"until\">{}</td>\
             <td data-label=\"rate / limit\">{}</td><td data-label=\"by, why\">{}<br><small>{}</small></td>\
             <td data-label=\"evidence\" class=\"evidence-cell\">{}</td><td class=\"buttons\">",
            html::key_link(&r.key),
            html::url("/console/held", &[("key", &r.key)]),
            held.get(&r.key).copied().unwrap_or(0),
            html::text(&r.limit, 60),
            super::when(r.since_us),
            r.until_us
                .map_or_else(|| "when released".into(), super::when),
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
    fn refusals_and_nodes_are_nested_tables() {
        let e = evidence(&json!({
            "refusals": {"upstream": {"rcpt": 3, "data": 1},
                         "floodgate": {"per-user": {"defer": 4, "restricted": 2}}},
            "held": 5,
            "held_by_node": {"mx1": 3, "mx2": 2},
        }));
        // Every name and count is there, each number in its own cell.
        for (name, n) in [
            ("rcpt", 3),
            ("data", 1),
            ("defer", 4),
            ("restricted", 2),
            ("mx1", 3),
            ("mx2", 2),
            ("held", 5),
        ] {
            assert!(
                e.contains(&format!(">{name}</th><td class=\"n\">{n}</td>")),
                "{name} {n}: {e}"
            );
        }
        for name in ["upstream", "floodgate", "per-user", "held by node"] {
            assert!(e.contains(&format!(">{name}</th>")), "{name}: {e}");
        }
    }

    #[test]
    fn evidence_is_escaped_and_cut() {
        let long = "<i>".repeat(1000);
        let e = evidence(&json!({"client_ips": ["10.0.0.1"], "subjects": [long], "n": 3}));
        assert!(
            e.contains("<td data-label=\"address\">10.0.0.1</td>"),
            "{e}"
        );
        assert!(
            e.contains("<th scope=\"row\">n</th><td class=\"n\">3</td>"),
            "{e}"
        );
        assert!(!e.contains("<i>"), "{e}");
        assert!(e.contains("characters, cut"), "{e}");
        assert!(evidence(&Value::Null).contains("none"));
        assert!(evidence(&json!({})).contains("No evidence"));
        assert!(evidence(&json!("<x>")).contains("&lt;x&gt;"));
    }
}
