//! Campaigns: message keys whose `restrict_senders` limit was over in the last 7 days, each
//! with its accounts (linking to their incident pages, where a release or a restriction is
//! one form away), copies, recipients, the last copy's Subject and link domains, and the
//! held messages of its accounts.

use std::fmt::Write as _;

use serde_json::Value;

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::Response;

/// At most this many campaigns are shown (the most recently over first).
const SHOWN: usize = 100;
/// At most this many held messages are listed per campaign.
const HELD_SHOWN: usize = 50;

/// One campaign as a section: its heading line, its accounts' table, its held mail.
pub fn section(c: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let links: Vec<String> = c["link_domains"]
        .as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default();
    let mut b = String::new();
    let _ = write!(
        b,
        "<section class=\"campaign\"><h2>{}</h2><p>limit {}, over since {}, last {}: \
         <strong>{}</strong> copies to <strong>{}</strong> recipients from {} accounts. \
         Last Subject: {}. Links: {}.</p>",
        html::text(&s(&c["message_key"]), 80),
        html::text(&s(&c["limit"]), 60),
        html::text(&s(&c["since"]), 40),
        html::text(&s(&c["last"]), 40),
        n(&c["copies"]),
        n(&c["recipients"]),
        c["accounts"].as_array().map_or(0, Vec::len),
        html::text(&s(&c["subject"]), html::CELL_CHARS),
        if links.is_empty() {
            "none".to_string()
        } else {
            html::text(&links.join(", "), html::CELL_CHARS)
        },
    );
    b.push_str(
        "<table class=\"stack\"><thead><tr><th>account</th><th>copies</th><th>recipients</th>\
         <th>client</th><th>last</th><th>restricted</th><th>held</th></tr></thead><tbody>",
    );
    for a in c["accounts"].as_array().into_iter().flatten() {
        let key = s(&a["key"]);
        let _ = write!(
            b,
            "<tr><td data-label=\"account\">{}</td><td data-label=\"copies\" class=\"n\">{}</td>\
             <td data-label=\"recipients\" class=\"n\">{}</td><td data-label=\"client\">{}</td>\
             <td data-label=\"last\">{}</td><td data-label=\"restricted\">{}</td>\
             <td data-label=\"held\"><a href=\"{}\">held mail</a></td></tr>",
            html::key_link(&key),
            n(&a["copies"]),
            n(&a["recipients"]),
            html::text(&s(&a["client_ip"]), 60),
            html::text(&s(&a["last"]), 40),
            if a["restricted"] == true { "yes" } else { "no" },
            html::url("/console/held", &[("key", &key)]),
        );
    }
    b.push_str("</tbody></table>");
    let held = c["held"].as_array().map(Vec::as_slice).unwrap_or_default();
    if held.is_empty() {
        b.push_str("<p class=\"muted\">No message of these accounts is held.</p>");
    } else {
        let _ = write!(
            b,
            "<p>Held messages of these accounts ({}):</p><ul>",
            held.len()
        );
        for h in held.iter().take(HELD_SHOWN) {
            let id = s(&h["id"]);
            let _ = write!(
                b,
                "<li><a href=\"{}\">{}</a> {} — {}</li>",
                html::url(&format!("/console/held/{id}"), &[]),
                html::text(&id, 60),
                html::text(&s(&h["key"]), 60),
                html::text(&s(&h["subject"]), html::CELL_CHARS),
            );
        }
        b.push_str("</ul>");
    }
    b.push_str("</section>");
    b
}

/// `GET /console/campaigns`.
pub async fn page(c: &Console, shell: &Shell<'_>) -> Response {
    let list = match c.state.campaign_list().await {
        Ok(l) => l,
        Err(e) => return error_page(503, &e.to_string(), shell),
    };
    let mut b = String::with_capacity(16 * 1024);
    let _ = write!(
        b,
        "<p class=\"muted\">Campaigns: one message sent from several accounts, over a limit \
         keyed on a message key with <code>restrict_senders</code> in the last 7 days \
         ({}, the most recent first). Each account's page holds its evidence and actions.</p>",
        list.len()
    );
    for c in list.iter().take(SHOWN) {
        b.push_str(&section(c));
    }
    if list.is_empty() {
        b.push_str("<p class=\"muted\">No campaign.</p>");
    }
    html_response(200, html::page("Campaigns", Nav::Campaigns, shell, &b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_campaign_is_escaped_and_links_its_accounts() {
        let c = json!({
            "message_key": "b3:<ab>", "limit": "campaign", "since": "2026-01-01T00:00:00Z",
            "last": "2026-01-01T00:10:00Z", "copies": 4, "recipients": 20,
            "subject": "<script>x</script>", "link_domains": ["evil.example"],
            "accounts": [{"key": "stolen1", "copies": 2, "recipients": 10,
                          "client_ip": "192.0.2.1", "last": "t", "restricted": true}],
            "held": [{"id": "abc", "key": "stolen1", "subject": "s"}],
        });
        let h = section(&c);
        assert!(!h.contains("<script>") && !h.contains("<ab>"), "{h}");
        assert!(h.contains("&lt;script&gt;"), "{h}");
        assert!(h.contains("/console/key/stolen1"), "{h}");
        assert!(h.contains("/console/held?key=stolen1"), "{h}");
        assert!(h.contains("/console/held/abc"), "{h}");
        assert!(h.contains("<strong>4</strong> copies"), "{h}");
        assert!(section(&json!({})).contains("No message"));
    }
}
