//! Held messages, filtered, sorted (newest first, oldest, largest, by key, by limit) and
//! paged, from the spool's index of envelopes (a key's messages by key); only the page's
//! files are read, each through its header section. One form releases or deletes the
//! ticked messages, every message of the page, or all that match the filter, its buttons
//! above and below the list; a refused action comes back with the filter, the ticks and the
//! reason kept.

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

/// The order of the list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sort {
    /// Newest first.
    #[default]
    Newest,
    /// Oldest first.
    Oldest,
    /// Largest first.
    Size,
    /// By key, then newest first.
    Key,
    /// By limit, then newest first.
    Limit,
}

impl Sort {
    /// Every order, as the page offers them.
    pub const ALL: [Sort; 5] = [
        Sort::Newest,
        Sort::Oldest,
        Sort::Size,
        Sort::Key,
        Sort::Limit,
    ];

    /// The order `?sort=` names (newest first when absent or unknown).
    pub fn parse(v: Option<&str>) -> Sort {
        match v {
            Some("oldest") => Sort::Oldest,
            Some("size") => Sort::Size,
            Some("key") => Sort::Key,
            Some("limit") => Sort::Limit,
            _ => Sort::Newest,
        }
    }

    /// Its `?sort=` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Newest => "time",
            Sort::Oldest => "oldest",
            Sort::Size => "size",
            Sort::Key => "key",
            Sort::Limit => "limit",
        }
    }

    /// Its words on the page.
    pub fn words(self) -> &'static str {
        match self {
            Sort::Newest => "newest first",
            Sort::Oldest => "oldest first",
            Sort::Size => "largest first",
            Sort::Key => "by key",
            Sort::Limit => "by limit",
        }
    }

    /// Sorts `heads` (oldest first, as the spool lists them) into this order.
    pub fn apply(self, heads: &mut [HeldHead]) {
        let newest = |a: &HeldHead, b: &HeldHead| {
            b.envelope
                .time
                .cmp(&a.envelope.time)
                .then_with(|| b.envelope.id.cmp(&a.envelope.id))
        };
        match self {
            Sort::Newest => heads.reverse(),
            Sort::Oldest => {}
            Sort::Size => heads.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| newest(a, b))),
            Sort::Key => heads.sort_by(|a, b| {
                a.envelope
                    .key
                    .cmp(&b.envelope.key)
                    .then_with(|| newest(a, b))
            }),
            Sort::Limit => heads.sort_by(|a, b| {
                a.envelope
                    .limit
                    .cmp(&b.envelope.limit)
                    .then_with(|| newest(a, b))
            }),
        }
    }
}

/// One held message as a table row, from its head and header section; `ticked`: its box
/// is ticked (a refused action sent the page back with its selection).
fn row(h: &HeldHead, section: &[u8], actions: bool, ticked: bool) -> String {
    let m = &h.envelope;
    let rcpts = m.recipients();
    let mut to: Vec<String> = rcpts
        .iter()
        .take(RCPTS_SHOWN)
        .map(|r| html::token(r, html::CELL_CHARS))
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
             aria-label=\"select {}\"{}><input type=\"hidden\" name=\"page_id\" \
             value=\"{}\"></td>",
            html::attr(&m.id),
            html::attr(&m.id),
            if ticked { " checked" } else { "" },
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
        html::token(m.sender(), html::CELL_CHARS),
        to.join("<br>"),
        html::size(h.size),
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

/// The GET form of the filters, filled with `f`, keeping the order `sort`.
fn filter_form(f: &Filter, sort: Sort) -> String {
    let field = |name: &str, label: &str, v: &str| {
        format!(
            "<label>{label} <input name=\"{name}\" value=\"{}\"></label>",
            html::attr(v)
        )
    };
    format!(
        "<form class=\"filters\" id=\"filters\" method=\"get\" action=\"/console/held\">{}{}{}{}\
         <input type=\"hidden\" name=\"sort\" value=\"{}\">\
         <button type=\"submit\">Filter</button> <a href=\"/console/held\">clear</a></form>",
        field("key", "key", &f.key),
        field("limit", "limit", &f.limit),
        field("sender", "sender contains", &f.sender),
        field("subject", "Subject contains", &f.subject),
        sort.as_str(),
    )
}

/// The links to the other orders, the filters kept.
fn sort_links(params: &[(&str, &str)], sort: Sort) -> String {
    let mut out = String::from("<p class=\"sorts\" id=\"sorts\">Sort: ");
    for (i, s) in Sort::ALL.into_iter().enumerate() {
        if i > 0 {
            out.push_str(" · ");
        }
        let mut p = params.to_vec();
        p.push(("sort", s.as_str()));
        let current = if s == sort {
            " aria-current=\"true\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<a href=\"{}\"{current}>{}</a>",
            html::url("/console/held", &p),
            s.words()
        );
    }
    out.push_str("</p>");
    out
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

/// Reads the page `asked` of the messages `filter` lets through, in the order `sort`: newest
/// first without a filter only the page's files are read; otherwise every envelope.
async fn read_listing(
    spool: &Arc<Spool>,
    filter: &Filter,
    sort: Sort,
    asked: Page,
) -> Result<Listing, SpoolError> {
    let (s, f) = (spool.clone(), filter.clone());
    blocking(move || {
        let (total, bytes) = s.indexed_usage()?;
        let ids: Vec<String> = if f.any() || sort != Sort::Newest {
            // A key's messages come from the spool's index by key.
            let mut heads = if f.key.is_empty() {
                s.list()?
            } else {
                s.of_keys(&[&f.key, &f.account])?
            };
            heads.retain(|h| f.passes(h));
            sort.apply(&mut heads);
            heads.into_iter().map(|h| h.envelope.id).collect()
        } else {
            s.indexed(|ix| {
                ix.all()
                    .iter()
                    .rev()
                    .map(|h| h.envelope.id.clone())
                    .collect()
            })?
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
fn table(msgs: &[(HeldHead, Vec<u8>)], filtered: bool, actions: bool, ticked: &[&str]) -> String {
    let mut b = String::new();
    b.push_str("<table id=\"held\" class=\"stack\"><thead><tr>");
    if actions {
        // The script makes the box tick every row; without it the form's "every message
        // on this page" does.
        b.push_str(
            "<th class=\"pick\"><input type=\"checkbox\" class=\"pick-all\" hidden \
             aria-label=\"select every message on this page\"></th>",
        );
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
        let t = ticked.contains(&h.envelope.id.as_str());
        b.push_str(&row(h, section, actions, t));
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

/// What a refused action sent the page back with: the reason typed, the ticked ids, the
/// scope chosen.
#[derive(Debug, Default)]
struct Kept<'a> {
    reason: &'a str,
    picked: Vec<&'a str>,
    scope: &'a str,
}

impl<'a> Kept<'a> {
    fn of(req: &'a Request) -> Kept<'a> {
        Kept {
            reason: req.param("reason").unwrap_or(""),
            picked: req
                .query
                .iter()
                .filter(|(k, _)| k == "picked")
                .map(|(_, v)| v.as_str())
                .collect(),
            scope: req.param("scope").unwrap_or("selected"),
        }
    }
}

/// The controls of the selection form, above the list: the reason, what to act on, the
/// box that releases mail of a key still restricted, the buttons.
fn bulk_controls(kept: &Kept<'_>, on_page: usize, matching: usize, filtered: bool) -> String {
    let radio = |value: &str, label: String| {
        format!(
            "<label><input type=\"radio\" name=\"scope\" value=\"{value}\"{}> {label}</label>",
            if kept.scope == value { " checked" } else { "" }
        )
    };
    let all = if filtered {
        format!("all {matching} matching the filter")
    } else {
        format!("all {matching} held")
    };
    format!(
        "<div class=\"bulk\" id=\"bulk-top\"><label>Reason <input name=\"reason\" \
         value=\"{}\" required placeholder=\"why\"></label><fieldset><legend class=\"muted\">\
         Act on</legend>{}{}{}</fieldset>{}\
         <button type=\"submit\" name=\"op\" value=\"release\">Release</button> \
         <button type=\"submit\" name=\"op\" value=\"delete\">Delete</button></div>",
        html::attr(kept.reason),
        radio("selected", "the ticked messages".into()),
        radio("page", format!("every message on this page ({on_page})")),
        radio("matching", all),
        html::CONFIRM_FIELD,
    )
}

/// What a release writes in the released message's trace header, said once on the page.
fn header_note(in_header: bool) -> &'static str {
    if in_header {
        "<p class=\"muted\" id=\"reason-note\">A release's reason is written in the \
         released message's <code>X-Floodgate-Released</code> header: its recipients can read \
         it (<code>[hold] reason_in_header = true</code>).</p>"
    } else {
        "<p class=\"muted\" id=\"reason-note\">A release's reason stays in the audit log; \
         the released message's <code>X-Floodgate-Released</code> header names only the \
         audit line (<code>[hold] reason_in_header</code> puts the reason itself there, where \
         its recipients can read it).</p>"
    }
}

/// `GET /console/held`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let shared = c.state.control.shared();
    let Some(spool) = shared.hold.clone() else {
        return no_spool(shared.postfix.as_deref(), req, shell).await;
    };
    let mut filter = Filter::of(req);
    filter.account = c.state.admin_key(&filter.key);
    let sort = Sort::parse(req.param("sort"));
    let asked = Page::parse(req.param("page"), PAGE_SIZE);
    let read = read_listing(&spool, &filter, sort, asked).await;
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
    let kept = Kept::of(req);
    let mut b = String::with_capacity(64 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    b.push_str(&filter_form(&filter, sort));
    if filter.any() {
        let _ = write!(
            b,
            "<p id=\"held-match\"><strong>{matching} of {total} held messages match.</strong></p>"
        );
    }
    let _ = write!(
        b,
        "<p class=\"muted\" id=\"held-count\">{total} messages held ({}) of at most {} \
         ({}), {}.</p>",
        html::size(bytes),
        settings.max_messages,
        html::size(settings.max_bytes),
        sort.words()
    );
    let params = filter.params();
    b.push_str(&sort_links(&params, sort));
    let mut listed: Vec<(&str, &str)> = params.clone();
    listed.push(("sort", sort.as_str()));
    if shell.actions {
        let mut back: Vec<(&str, &str)> = listed.clone();
        let number = pg.number.to_string();
        back.push(("page", &number));
        let back = html::url("/console/held", &back);
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/console/act/held/bulk\" id=\"selection\">{}\
             <input type=\"hidden\" name=\"back\" value=\"{back}\">",
            html::csrf_field(shell)
        );
        for (name, v) in &params {
            let _ = write!(
                b,
                "<input type=\"hidden\" name=\"f_{name}\" value=\"{}\">",
                html::attr(v)
            );
        }
        let in_header = c
            .state
            .control
            .config()
            .hold
            .as_ref()
            .is_some_and(|h| h.get_ref().reason_in_header);
        b.push_str(&bulk_controls(&kept, msgs.len(), matching, filter.any()));
        b.push_str(header_note(in_header));
        b.push_str(html::NOSCRIPT);
    }
    b.push_str(&table(&msgs, filter.any(), shell.actions, &kept.picked));
    if shell.actions {
        b.push_str(
            "<div class=\"bulk\" id=\"bulk-bottom\"><span class=\"muted\">With the reason and \
             the choice above:</span> <button type=\"submit\" name=\"op\" value=\"release\">\
             Release</button> <button type=\"submit\" name=\"op\" value=\"delete\">Delete\
             </button></div></form>",
        );
    }
    if let Some(pf) = &shared.postfix {
        let key = Some(filter.key.as_str()).filter(|k| !k.is_empty());
        b.push_str(&postfix_form(pf, key, shell).await);
    }
    b.push_str(&paging::links(
        "/console/held",
        &listed,
        pg,
        Some(matching),
        false,
    ));
    html_response(200, html::page("Held messages", Nav::Held, shell, &b))
}

/// The Held page without a hold spool: Postfix's hold queue alone, or no hold at all.
async fn no_spool(
    pf: Option<&crate::hold::postfix::PostfixHold>,
    req: &Request,
    shell: &Shell<'_>,
) -> Response {
    let b = match pf {
        Some(pf) => postfix_only(pf, req, shell).await,
        None => "<p class=\"muted\">No hold: the configuration has neither a [hold] \
                 section nor a [postfix] section.</p>"
            .into(),
    };
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

    #[test]
    fn orders_by_name_and_back() {
        for s in Sort::ALL {
            assert_eq!(Sort::parse(Some(s.as_str())), s);
        }
        assert_eq!(Sort::parse(Some("nonsense")), Sort::Newest);
        assert_eq!(Sort::parse(None), Sort::Newest);
    }
}
