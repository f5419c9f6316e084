//! Mail held in Postfix's hold queue (`[postfix]`) on the console: its section of the Held
//! page (rows picked by the same form as the spool's: the action names its hold by the id),
//! from the ledger and `postqueue -j`; one message's page is
//! [`super::message::postfix_page`].

use std::fmt::Write as _;

use crate::admin::console::html;
use crate::admin::console::state::Console;
use crate::hold::postfix::{HeldInPostfix, LedgerEntry, PostfixHold};

/// The time a ledger entry was held, as the console shows times.
pub fn held_at(e: &LedgerEntry) -> String {
    super::when(
        i64::try_from(e.time)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000),
    )
}

fn row(h: &HeldInPostfix, actions: bool) -> String {
    let e = &h.entry;
    let mut out = String::with_capacity(1024);
    let _ = write!(out, "<tr data-row data-id=\"{}\">", html::attr(&e.queue_id));
    if actions {
        let _ = write!(
            out,
            "<td class=\"pick\"><input type=\"checkbox\" name=\"id\" value=\"{0}\" \
             aria-label=\"select {0}\"></td>",
            html::attr(&e.queue_id)
        );
    }
    let to: Vec<String> = h
        .recipients
        .iter()
        .take(5)
        .map(|r| html::text(r, html::CELL_CHARS))
        .collect();
    let _ = write!(
        out,
        "<td data-label=\"queue id, held at\">{}<br><small>{}</small></td>\
         <td data-label=\"key\">{}</td><td data-label=\"limit\">{}</td>\
         <td data-label=\"from\">{}</td><td data-label=\"to\">{}</td>\
         <td class=\"n\" data-label=\"size\">{}</td><td data-label=\"reason, client\">{}<br>\
         <small>{}{}</small></td></tr>",
        html::held_link(&e.queue_id),
        held_at(e),
        html::key_link(&e.key),
        html::text(&e.limit, 60),
        html::text(&e.sender, html::CELL_CHARS),
        to.join("<br>"),
        h.message_size,
        html::text(&e.reason, html::CELL_CHARS),
        e.client.map_or_else(
            || "local submission".into(),
            |c| html::escape(&c.to_string())
        ),
        e.user
            .as_deref()
            .map_or_else(String::new, |u| format!(" · user {}", html::text(u, 80))),
    );
    out
}

/// The Held page's section of Postfix's hold queue: the messages floodgate held there (of
/// `key` when given), each with a pick box when `actions` (inside the page's form).
pub async fn section(pf: &PostfixHold, key: Option<&str>, actions: bool) -> String {
    let mut b = String::from("<h2 id=\"postfix-held\">In Postfix's hold queue</h2>");
    let list = match pf.list(key).await {
        Ok(l) => l,
        Err(e) => {
            let _ = write!(
                b,
                "<p class=\"error\" id=\"postfix-error\">{}</p>",
                html::text(&e.to_string(), 500)
            );
            return b;
        }
    };
    let _ = write!(
        b,
        "<p class=\"muted\" id=\"postfix-count\">{} messages held in Postfix's hold queue, \
         oldest first.</p>",
        list.len()
    );
    b.push_str("<table id=\"postfix\" class=\"stack\"><thead><tr>");
    if actions {
        b.push_str("<th class=\"pick\"><span class=\"muted\">pick</span></th>");
    }
    b.push_str(
        "<th>queue id, held at</th><th>key</th><th>limit</th><th>from</th><th>to</th>\
         <th class=\"n\">size</th><th>reason, client</th></tr></thead><tbody>",
    );
    for h in &list {
        b.push_str(&row(h, actions));
    }
    if list.is_empty() {
        b.push_str("<tr><td colspan=\"8\" class=\"muted\">nothing is held</td></tr>");
    }
    b.push_str("</tbody></table>");
    b
}

/// Whether the console asks about a message of Postfix's hold queue: `[postfix]` is
/// configured and `id` is a Postfix queue id.
pub fn names_postfix(c: &Console, id: &str) -> Option<std::sync::Arc<PostfixHold>> {
    let shared = c.state.control.shared();
    (crate::admin::held::Place::of(&shared, id) == crate::admin::held::Place::Postfix)
        .then(|| shared.postfix.clone())
        .flatten()
}

/// How many messages floodgate holds for `key` in Postfix's hold queue (0 without
/// `[postfix]`), from the ledger.
pub fn count(c: &Console, key: &str) -> usize {
    c.state
        .control
        .shared()
        .postfix
        .as_ref()
        .map_or(0, |pf| pf.ledger().count_for_key(key))
}
