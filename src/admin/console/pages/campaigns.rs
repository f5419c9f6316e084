//! Campaigns: message keys whose `restrict_senders` limit was over in the last 7 days, each
//! with its accounts (linking to their incident pages, where a release or a restriction is
//! one form away), copies, recipients, the last copy's Subject and link domains, and the
//! held messages of its accounts.

use std::fmt::Write as _;

use serde_json::Value;

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};

/// At most this many campaigns are shown (the most recently over first).
const SHOWN: usize = 100;
/// At most this many held messages are listed per campaign.
const HELD_SHOWN: usize = 50;

/// The campaign-wide action forms of campaign `id`: each with a reason, as the admin API's
/// `POST /v1/campaigns/act` (each message and restriction audited on its own, the
/// campaign's action too); `reason`: what a refused form kept.
pub fn actions(
    id: &str,
    held: usize,
    restricted: usize,
    shell: &Shell<'_>,
    reason: &str,
) -> String {
    let form = |op: &str, confirm: &str, label: &str| {
        format!(
            "<form class=\"act-form\" method=\"post\" action=\"/console/act/campaign\" \
             id=\"campaign-{op}\">{}<input type=\"hidden\" name=\"id\" value=\"{}\">\
             <input type=\"hidden\" name=\"op\" value=\"{op}\">\
             <label>Reason <input name=\"reason\" required placeholder=\"why\" value=\"{}\">\
             </label>{confirm}<button type=\"submit\">{label}</button></form>",
            html::csrf_field(shell),
            html::attr(id),
            html::attr(reason)
        )
    };
    let mut out = String::from("<div class=\"incident-actions\">");
    if held > 0 {
        out.push_str(&form(
            "release-held",
            if restricted > 0 {
                html::CONFIRM_FIELD
            } else {
                ""
            },
            &format!("Release all {held} held"),
        ));
        out.push_str(&form("delete-held", "", &format!("Delete all {held} held")));
    }
    if restricted > 0 {
        out.push_str(&form(
            "release",
            "",
            if restricted == 1 {
                "End the restriction"
            } else {
                "End every restriction"
            },
        ));
    }
    out.push_str("</div>");
    out
}

/// One campaign as one entry: its totals, Subject and link domains, its accounts, the
/// campaign-wide actions, its held mail folded.
pub fn section(c: &Value, shell: &Shell<'_>, reason: &str) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let links: Vec<String> = c["link_domains"]
        .as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default();
    let accounts = c["accounts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let restricted = accounts.iter().filter(|a| a["restricted"] == true).count();
    let held = c["held"].as_array().map(Vec::as_slice).unwrap_or_default();
    let id = s(&c["message_key"]);
    let subject = s(&c["subject"]);
    let mut b = String::new();
    let _ = write!(
        b,
        "<section class=\"campaign\" data-campaign=\"{}\"><h2>{}</h2>\
         <dl class=\"summary\"><div><dt>copies</dt><dd class=\"copies\">{}</dd></div>\
         <div><dt>recipients</dt><dd>{}</dd></div><div><dt>accounts</dt><dd class=\"accounts\">{} \
         ({restricted} restricted)</dd></div><div><dt>held now</dt><dd>{}</dd></div>\
         <div><dt>link domains</dt><dd>{}</dd></div><div><dt>over since, last</dt><dd>{}, {}</dd></div>\
         </dl><p class=\"muted\">Campaign <span class=\"tok\">{}</span>, limit {}.</p>",
        html::attr(&id),
        if subject.is_empty() {
            "<span class=\"muted\">no Subject</span>".into()
        } else {
            html::text(&subject, html::CELL_CHARS)
        },
        n(&c["copies"]),
        n(&c["recipients"]),
        accounts.len(),
        held.len(),
        if links.is_empty() {
            "none".to_string()
        } else {
            html::text(&links.join(", "), html::CELL_CHARS)
        },
        html::text(&super::whole_seconds(&s(&c["since"])), 40),
        html::text(&super::whole_seconds(&s(&c["last"])), 40),
        html::text(&id, 80),
        html::text(&s(&c["limit"]), 60),
    );
    if shell.actions {
        b.push_str(&actions(&id, held.len(), restricted, shell, reason));
    }
    b.push_str(
        "<table class=\"stack\"><thead><tr><th>account</th><th class=\"n\">copies</th>\
         <th class=\"n\">recipients</th><th>client</th><th>last</th><th>restricted</th>\
         <th>held</th></tr></thead><tbody>",
    );
    for a in accounts {
        let key = s(&a["key"]);
        let mine = held.iter().filter(|h| h["key"] == key.as_str()).count();
        let _ = write!(
            b,
            "<tr><td data-label=\"account\">{}</td><td data-label=\"copies\" class=\"n\">{}</td>\
             <td data-label=\"recipients\" class=\"n\">{}</td><td data-label=\"client\">{}</td>\
             <td data-label=\"last\">{}</td><td data-label=\"restricted\">{}</td>\
             <td data-label=\"held\"><a href=\"{}\">{mine} held</a></td></tr>",
            html::key_link(&key),
            n(&a["copies"]),
            n(&a["recipients"]),
            html::text(&s(&a["client_ip"]), 60),
            html::text(&super::whole_seconds(&s(&a["last"])), 40),
            if a["restricted"] == true { "yes" } else { "no" },
            html::url("/console/held", &[("key", &key)]),
        );
    }
    b.push_str("</tbody></table>");
    if held.is_empty() {
        b.push_str("<p class=\"muted\">No message of these accounts is held.</p>");
    } else {
        let _ = write!(
            b,
            "<details class=\"section\"><summary>Held messages of these accounts ({})</summary><ul>",
            held.len()
        );
        for h in held.iter().take(HELD_SHOWN) {
            let id = s(&h["id"]);
            let _ = write!(
                b,
                "<li>{} {} — {}</li>",
                html::held_link(&id),
                html::token(&s(&h["key"]), 60),
                html::text(&s(&h["subject"]), html::CELL_CHARS),
            );
        }
        if held.len() > HELD_SHOWN {
            let _ = write!(
                b,
                "<li class=\"muted\">and {} more (see each account's held mail)</li>",
                held.len() - HELD_SHOWN
            );
        }
        b.push_str("</ul></details>");
    }
    b.push_str("</section>");
    b
}

/// `GET /console/campaigns[?c=ID]`: every campaign, or the one `c` names.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let list = match c.state.campaign_list().await {
        Ok(l) => l,
        Err(e) => return error_page(503, &e.to_string(), shell),
    };
    let only = req.param("c").filter(|v| !v.is_empty());
    let mut b = String::with_capacity(16 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    let _ = write!(
        b,
        "<p class=\"muted\">Campaigns: one message sent from several accounts, over a limit \
         keyed on a message key with <code>restrict_senders</code> in the last 7 days \
         ({}, the most recent first), each once with its accounts. The actions act on every \
         account of the campaign; each account's page holds its own evidence and actions.</p>",
        list.len()
    );
    let reason = req.param("reason").unwrap_or("");
    let shown: Vec<&Value> = list
        .iter()
        .filter(|v| only.is_none_or(|o| v["message_key"] == o))
        .take(SHOWN)
        .collect();
    if only.is_some() {
        b.push_str("<p><a href=\"/console/campaigns\">every campaign</a></p>");
    }
    for v in &shown {
        b.push_str(&section(v, shell, reason));
    }
    if shown.is_empty() {
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
        let shell = Shell {
            csrf: Some("c0"),
            actions: true,
            host: "h",
        };
        let h = section(&c, &shell, "kept <r>");
        assert!(!h.contains("<script>") && !h.contains("<ab>"), "{h}");
        assert!(h.contains("&lt;script&gt;"), "{h}");
        assert!(h.contains("/console/key/stolen1"), "{h}");
        assert!(h.contains("/console/held?key=stolen1"), "{h}");
        assert!(h.contains("/console/held/abc"), "{h}");
        assert!(h.contains("<dd class=\"copies\">4</dd>"), "{h}");
        // One entry, its actions with the kept reason, the box for restricted accounts.
        assert!(h.contains("id=\"campaign-release-held\""), "{h}");
        assert!(h.contains("id=\"campaign-delete-held\""), "{h}");
        assert!(h.contains("End the restriction"), "{h}");
        assert!(h.contains("release though restricted"), "{h}");
        assert!(h.contains("value=\"kept &lt;r&gt;\""), "{h}");
        let ro = section(&c, &Shell::default(), "");
        assert!(!ro.contains("<form"), "{ro}");
        assert!(section(&json!({}), &shell, "").contains("No message"));
    }
}
