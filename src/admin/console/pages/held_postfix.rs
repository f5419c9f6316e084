//! Mail held in Postfix's hold queue (`[postfix]`) on the console: its section of the Held
//! page (rows picked by the same form as the spool's: the action names its hold by the id)
//! and one message's page, from the ledger and `postcat`.

use std::fmt::Write as _;

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};
use crate::hold::postfix::{HeldInPostfix, LedgerEntry, PostfixHold};

/// The time a ledger entry was held, as the console shows times.
fn held_at(e: &LedgerEntry) -> String {
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

/// `GET /console/held/QUEUEID` for a message in Postfix's hold queue.
pub async fn page(pf: &PostfixHold, req: &Request, id: &str, shell: &Shell<'_>) -> Response {
    let (e, m) = match pf.show(id).await {
        Ok(v) => v,
        Err(err) if err.is_not_held() => return error_page(404, &err.to_string(), shell),
        Err(err) => return error_page(502, &err.to_string(), shell),
    };
    let mut b = String::with_capacity(16 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    let rows = [
        (
            "queue id",
            format!(
                "<code>{}</code> (Postfix's hold queue)",
                html::escape(&e.queue_id)
            ),
        ),
        ("held at", held_at(&e)),
        ("key", html::key_link(&e.key)),
        ("limit", html::text(&e.limit, 60)),
        ("reason", html::text(&e.reason, html::CELL_CHARS)),
        ("sender", html::text(&e.sender, html::CELL_CHARS)),
        (
            "recipients",
            e.recipients
                .iter()
                .map(|r| html::text(r, html::CELL_CHARS))
                .collect::<Vec<_>>()
                .join("<br>"),
        ),
        ("body size", format!("{} octets", m.body_size)),
        (
            "client address",
            e.client.map_or_else(
                || "local submission".into(),
                |c| html::escape(&c.to_string()),
            ),
        ),
        (
            "login or local user",
            e.user.as_deref().map_or_else(
                || "<span class=\"muted\">none</span>".into(),
                |u| html::text(u, 80),
            ),
        ),
    ];
    b.push_str("<dl class=\"evidence wide\" id=\"envelope\">");
    for (k, v) in rows {
        let _ = write!(b, "<dt>{k}</dt><dd>{v}</dd>");
    }
    b.push_str("</dl>");
    if shell.actions {
        let _ = write!(
            b,
            "<form class=\"act-form\" method=\"post\" action=\"/console/act/held/bulk\">{}\
             <input type=\"hidden\" name=\"id\" value=\"{}\">\
             <input type=\"hidden\" name=\"back\" value=\"/console/held\">\
             <label>Reason <input name=\"reason\" required placeholder=\"why\"></label>\
             <button type=\"submit\" name=\"op\" value=\"release\">Release</button>\
             <button type=\"submit\" name=\"op\" value=\"delete\">Delete</button> {}</form>",
            html::csrf_field(shell),
            html::attr(&e.queue_id),
            html::CONFIRM_FIELD
        );
    }
    b.push_str("<h2>Header section</h2><pre id=\"headers\">");
    b.push_str(&super::held::headers(m.header_section.as_bytes()));
    b.push_str("</pre>");
    html_response(200, html::page("Held message", Nav::Held, shell, &b))
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
