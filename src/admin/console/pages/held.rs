//! Held messages, newest first, filtered and paged: without a filter the spool directory
//! is listed (names only) and only the page's files are read, each through its header
//! section; with one, every file's envelope is read (no body). A selection of the page is
//! released or deleted by one form.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::paging::{self, Page, PAGE_SIZE};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};
use crate::hold::{HeldHead, Spool, SpoolError};
use crate::proxy::release::blocking;

/// Recipients listed per message; more are counted.
const RCPTS_SHOWN: usize = 5;
/// The longest header line shown, in characters.
const HEADER_LINE_CHARS: usize = 998;

/// The header section for the page: each line cut to [`HEADER_LINE_CHARS`], the whole to
/// [`html::HEADERS_CHARS`], escaped.
pub fn headers(section: &[u8]) -> String {
    let text = String::from_utf8_lossy(section);
    let mut out = String::new();
    let mut left = html::HEADERS_CHARS;
    for line in text.split_inclusive('\n') {
        if left == 0 {
            out.push_str("…(cut)");
            break;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        let (shown, cut) = html::truncate(line, HEADER_LINE_CHARS.min(left));
        html::escape_into(&mut out, shown);
        if cut {
            let _ = write!(out, "…({} characters)", line.chars().count());
        }
        out.push('\n');
        left = left.saturating_sub(shown.chars().count() + 1);
    }
    out
}

/// The filters of the Held page, from its query string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The key, exactly, as the admin typed it.
    pub key: String,
    /// The key folded like a login (`[identity]`); a message held for either passes.
    pub account: String,
    /// The limit, exactly.
    pub limit: String,
    /// Part of the sender, any case.
    pub sender: String,
    /// Part of the Subject, any case.
    pub subject: String,
}

impl Filter {
    /// The filters `req` asks for (empty ones filter nothing).
    pub fn of(req: &Request) -> Filter {
        let p = |n: &str| req.param(n).unwrap_or("").trim().to_string();
        let key = p("key");
        Filter {
            account: key.clone(),
            key,
            limit: p("limit"),
            sender: p("sender"),
            subject: p("subject"),
        }
    }

    /// Whether any filter is set.
    pub fn any(&self) -> bool {
        !(self.key.is_empty()
            && self.limit.is_empty()
            && self.sender.is_empty()
            && self.subject.is_empty())
    }

    /// Whether the message of `h` passes every filter.
    pub fn passes(&self, h: &HeldHead) -> bool {
        let m = &h.envelope;
        let has = |hay: &str, needle: &str| {
            needle.is_empty() || hay.to_lowercase().contains(&needle.to_lowercase())
        };
        (self.key.is_empty() || m.key == self.key || m.key == self.account)
            && (self.limit.is_empty() || m.limit == self.limit)
            && has(m.sender(), &self.sender)
            && has(h.subject.as_deref().unwrap_or(""), &self.subject)
    }

    /// The filters as query parameters (the set ones).
    pub fn params(&self) -> Vec<(&'static str, &str)> {
        [
            ("key", self.key.as_str()),
            ("limit", self.limit.as_str()),
            ("sender", self.sender.as_str()),
            ("subject", self.subject.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect()
    }
}

/// One held message as a table row, from its head and header section.
fn row(h: &HeldHead, section: &[u8], actions: bool) -> String {
    let m = &h.envelope;
    let rcpts = m.recipients();
    let mut to: Vec<String> = rcpts
        .iter()
        .take(RCPTS_SHOWN)
        .map(|r| html::text(r, html::CELL_CHARS))
        .collect();
    if rcpts.len() > RCPTS_SHOWN {
        to.push(format!("and {} more", rcpts.len() - RCPTS_SHOWN));
    }
    let mut out = String::with_capacity(2048);
    let _ = write!(out, "<tr data-row data-id=\"{}\">", html::attr(&m.id));
    if actions {
        let _ = write!(
            out,
            "<td class=\"pick\"><input type=\"checkbox\" name=\"id\" value=\"{}\" \
             aria-label=\"select {}\"></td>",
            html::attr(&m.id),
            html::attr(&m.id)
        );
    }
    let _ = write!(
        out,
        "<td data-label=\"id, held at\">{}<br><small>{}</small></td><td data-label=\"key\">{}</td>\
         <td data-label=\"limit\">{}{}</td><td data-label=\"from\">{}</td><td data-label=\"to\">{}</td>\
         <td class=\"n\" data-label=\"size\">{}</td><td data-label=\"subject, client\">{}<br><small>{}{}\
         </small><details><summary>header section</summary><pre>{}</pre></details></td>",
        html::held_link(&m.id),
        super::when(
            i64::try_from(m.time)
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000)
        ),
        html::key_link(&m.key),
        html::text(&m.limit, 60),
        if m.paced.is_some() { " (paced)" } else { "" },
        html::text(m.sender(), html::CELL_CHARS),
        to.join("<br>"),
        h.size,
        h.subject.as_deref().map_or_else(
            || "<span class=\"muted\">no subject</span>".into(),
            |s| { html::text(s, html::CELL_CHARS) }
        ),
        html::escape(&m.client.ip().to_string()),
        m.user
            .as_deref()
            .map_or_else(String::new, |u| format!(" · user {}", html::text(u, 80))),
        headers(section)
    );
    if actions {
        let id = [("id", m.id.as_str())];
        out.push_str("<td class=\"buttons\">");
        // The reason goes with either button and a release needs one; a release of mail of
        // a key still restricted also the box, shown with the server's warning
        // (console.js). Neither has a name: the selection form around the table sends its
        // own.
        out.push_str("<input class=\"reason\" placeholder=\"why\" aria-label=\"reason\"> ");
        out.push_str(&html::action_button(
            "Release",
            &html::url("/console/act/held/release", &id),
            "Release now?",
            true,
        ));
        out.push_str(
            " <label class=\"confirm\" hidden><input type=\"checkbox\" class=\"confirm\"> \
             release though restricted</label> ",
        );
        out.push_str(&html::action_button(
            "Delete",
            &html::url("/console/act/held/delete", &id),
            "Delete for good?",
            false,
        ));
        out.push_str("</td>");
    }
    out.push_str("</tr>");
    out
}

/// The GET form of the filters, filled with `f`.
fn filter_form(f: &Filter) -> String {
    let field = |name: &str, label: &str, v: &str| {
        format!(
            "<label>{label} <input name=\"{name}\" value=\"{}\"></label>",
            html::attr(v)
        )
    };
    format!(
        "<form class=\"filters\" id=\"filters\" method=\"get\" action=\"/console/held\">{}{}{}{}\
         <button type=\"submit\">Filter</button> <a href=\"/console/held\">clear</a></form>",
        field("key", "key", &f.key),
        field("limit", "limit", &f.limit),
        field("sender", "sender contains", &f.sender),
        field("subject", "Subject contains", &f.subject),
    )
}

/// One page of held messages, and the counts the page shows.
struct Listing {
    /// The page's messages with their header sections, newest first.
    msgs: Vec<(HeldHead, Vec<u8>)>,
    /// Messages held.
    total: usize,
    /// Messages the filter lets through.
    matching: usize,
    /// Bytes held.
    bytes: u64,
    /// The page shown.
    pg: Page,
}

/// Reads the page `asked` of the messages `filter` lets through, newest first: without a
/// filter only the page's files are read; with one, every envelope.
async fn read_listing(
    spool: &Arc<Spool>,
    filter: &Filter,
    asked: Page,
) -> Result<Listing, SpoolError> {
    let (s, f) = (spool.clone(), filter.clone());
    blocking(move || {
        let listed = s.ids()?;
        let total = listed.len();
        let bytes: u64 = listed.iter().map(|(_, n)| n).sum();
        let ids: Vec<String> = if f.any() {
            let mut heads = s.list()?;
            heads.retain(|h| f.passes(h));
            heads.into_iter().rev().map(|h| h.envelope.id).collect()
        } else {
            listed.into_iter().rev().map(|(id, _)| id).collect()
        };
        let matching = ids.len();
        let pg = asked.clamp(matching);
        let mut msgs = Vec::with_capacity(pg.size);
        for id in &ids[pg.range(matching)] {
            match s.header_section(id) {
                Ok(m) => msgs.push(m),
                // Released or deleted since the listing; or set aside, logged.
                Err(SpoolError::NotFound(_) | SpoolError::Corrupt { .. }) => {}
                Err(e) => tracing::warn!(error = %e, "console: skipping a held file"),
            }
        }
        Ok(Listing {
            msgs,
            total,
            matching,
            bytes,
            pg,
        })
    })
    .await
}

/// The page's table of held messages (with a pick box per row when `actions`), or the
/// row that says none is held (or none matches, when `filtered`).
fn table(msgs: &[(HeldHead, Vec<u8>)], filtered: bool, actions: bool) -> String {
    let mut b = String::new();
    b.push_str("<table id=\"held\" class=\"stack\"><thead><tr>");
    if actions {
        b.push_str("<th class=\"pick\"><span class=\"muted\">pick</span></th>");
    }
    b.push_str(
        "<th>id, held at</th><th>key</th><th>limit</th><th>from</th><th>to</th>\
         <th class=\"n\">size</th><th>subject, client</th>",
    );
    if actions {
        b.push_str("<th></th>");
    }
    b.push_str("</tr></thead><tbody>");
    for (h, section) in msgs {
        b.push_str(&row(h, section, actions));
    }
    if msgs.is_empty() {
        let none = if filtered {
            "no held message matches"
        } else {
            "nothing is held"
        };
        let _ = write!(b, "<tr><td colspan=\"9\" class=\"muted\">{none}</td></tr>");
    }
    b.push_str("</tbody></table>");
    b
}

/// `GET /console/held`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let shared = c.state.control.shared();
    let Some(spool) = shared.hold.clone() else {
        let b = match &shared.postfix {
            Some(pf) => postfix_only(pf, req, shell).await,
            None => "<p class=\"muted\">No hold: the configuration has neither a [hold] \
                     section nor a [postfix] section.</p>"
                .into(),
        };
        return html_response(200, html::page("Held messages", Nav::Held, shell, &b));
    };
    let mut filter = Filter::of(req);
    filter.account = c.state.admin_key(&filter.key);
    let asked = Page::parse(req.param("page"), PAGE_SIZE);
    let read = read_listing(&spool, &filter, asked).await;
    let Listing {
        msgs,
        total,
        matching,
        bytes,
        pg,
    } = match read {
        Ok(r) => r,
        Err(e) => return error_page(500, &e.to_string(), shell),
    };
    let settings = spool.settings();
    let mut b = String::with_capacity(64 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    b.push_str(&filter_form(&filter));
    if filter.any() {
        let _ = write!(
            b,
            "<p id=\"held-match\"><strong>{matching} of {total} held messages match.</strong></p>"
        );
    }
    let _ = write!(
        b,
        "<p class=\"muted\" id=\"held-count\">{total} messages held ({}) of at most {} \
         ({}), newest first.</p>",
        html::size(bytes),
        settings.max_messages,
        html::size(settings.max_bytes)
    );
    let params = filter.params();
    if shell.actions {
        let mut back: Vec<(&str, &str)> = params.clone();
        let number = pg.number.to_string();
        back.push(("page", &number));
        let back = html::url("/console/held", &back);
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/console/act/held/bulk\" id=\"selection\">{}\
             <input type=\"hidden\" name=\"back\" value=\"{back}\">",
            html::csrf_field(shell)
        );
        b.push_str(html::NOSCRIPT);
    }
    b.push_str(&table(&msgs, filter.any(), shell.actions));
    if shell.actions {
        b.push_str(
            "<p class=\"act-form\"><label>Reason <input name=\"reason\" required \
             placeholder=\"why\"></label> <button type=\"submit\" name=\"op\" value=\"release\">\
             Release selected</button> <button type=\"submit\" name=\"op\" value=\"delete\">\
             Delete selected</button> ",
        );
        b.push_str(html::CONFIRM_FIELD);
        b.push_str("</p></form>");
    }
    if let Some(pf) = &shared.postfix {
        let key = Some(filter.key.as_str()).filter(|k| !k.is_empty());
        b.push_str(&postfix_form(pf, key, shell).await);
    }
    b.push_str(&paging::links(
        "/console/held",
        &params,
        pg,
        Some(matching),
        false,
    ));
    html_response(200, html::page("Held messages", Nav::Held, shell, &b))
}

/// The Held page of a configuration with Postfix's hold queue alone (no `[hold]`).
async fn postfix_only(
    pf: &crate::hold::postfix::PostfixHold,
    req: &Request,
    shell: &Shell<'_>,
) -> String {
    let mut b = html::done_note(req.param("done"), req.param("failed"));
    let key = req.param("key").map(str::trim).filter(|k| !k.is_empty());
    b.push_str(&postfix_form(pf, key, shell).await);
    b
}

/// Postfix's hold queue's section with its own form to release or delete a selection.
async fn postfix_form(
    pf: &crate::hold::postfix::PostfixHold,
    key: Option<&str>,
    shell: &Shell<'_>,
) -> String {
    let mut b = String::new();
    if shell.actions {
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/console/act/held/bulk\" id=\"postfix-selection\">{}\
             <input type=\"hidden\" name=\"back\" value=\"/console/held\">",
            html::csrf_field(shell)
        );
    }
    b.push_str(&super::held_postfix::section(pf, key, shell.actions).await);
    if shell.actions {
        b.push_str(
            "<p class=\"act-form\"><label>Reason <input name=\"reason\" required \
             placeholder=\"why\"></label> <button type=\"submit\" name=\"op\" value=\"release\">\
             Release selected</button> <button type=\"submit\" name=\"op\" value=\"delete\">\
             Delete selected</button> ",
        );
        b.push_str(html::CONFIRM_FIELD);
        b.push_str("</p></form>");
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_are_escaped_and_cut() {
        let long = format!("X-Long: {}\r\n", "<".repeat(5000));
        let section = format!("Subject: <hi>\r\n{long}From: a@b\r\n\r\n");
        let h = headers(section.as_bytes());
        assert!(h.starts_with("Subject: &lt;hi&gt;\n"), "{h}");
        assert!(h.contains("…(5008 characters)"), "{h}");
        assert!(h.contains("\nFrom: a@b\n"), "{h}");
        assert!(!h.contains('<') && !h.contains('\r'), "{h}");
        let many = "H: v\r\n".repeat(20_000);
        let h = headers(many.as_bytes());
        assert!(h.chars().count() <= html::HEADERS_CHARS + 10, "{}", h.len());
        assert!(h.ends_with("…(cut)"));
    }
}
