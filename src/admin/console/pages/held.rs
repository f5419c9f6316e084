//! Held messages, newest first, paged: the spool directory is listed (names only) and
//! only the page's files are read, each through its header section.

use std::fmt::Write as _;

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::paging::{self, Page, PAGE_SIZE};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::held::blocking;
use crate::admin::http::{Request, Response};
use crate::hold::{HeldHead, SpoolError};

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
    let _ = write!(
        out,
        "<tr data-row data-id=\"{}\"><td><code>{}</code><br><small>{}</small></td><td>{}</td>\
         <td>{}{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}<br><small>{}{}\
         </small><details><summary>header section</summary><pre>{}</pre></details></td><td>",
        html::attr(&m.id),
        html::escape(&m.id),
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
        out.push_str(&html::action_button(
            "Release",
            &html::url("/console/act/held/release", &id),
            "Release now?",
            false,
        ));
        out.push(' ');
        out.push_str(&html::action_button(
            "Delete",
            &html::url("/console/act/held/delete", &id),
            "Delete for good?",
            false,
        ));
    }
    out.push_str("</td></tr>");
    out
}

/// `GET /console/held`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let Some(spool) = c.state.control.shared().hold.clone() else {
        let b = "<p class=\"muted\">No hold spool: the configuration has no [hold] section.</p>";
        return html_response(200, html::page("Held messages", Nav::Held, shell, b));
    };
    let asked = Page::parse(req.param("page"), PAGE_SIZE);
    let s = spool.clone();
    let read = blocking(move || {
        let mut ids = s.ids()?;
        ids.reverse();
        let total = ids.len();
        let pg = asked.clamp(total);
        let mut msgs = Vec::with_capacity(pg.size);
        for (id, _) in &ids[pg.range(total)] {
            match s.header_section(id) {
                Ok(m) => msgs.push(m),
                // Released or deleted since the listing; or set aside, logged.
                Err(SpoolError::NotFound(_) | SpoolError::Corrupt { .. }) => {}
                Err(e) => tracing::warn!(error = %e, "console: skipping a held file"),
            }
        }
        let bytes: u64 = ids.iter().map(|(_, n)| n).sum();
        Ok((msgs, total, bytes, pg))
    })
    .await;
    let (msgs, total, bytes, pg) = match read {
        Ok(r) => r,
        Err(e) => return error_page(500, &e.to_string(), shell),
    };
    let settings = spool.settings();
    let mut b = String::with_capacity(64 * 1024);
    let _ = write!(
        b,
        "<p class=\"muted\" id=\"held-count\">{total} messages held ({}) of at most {} \
         ({}), newest first.</p>",
        html::size(bytes),
        settings.max_messages,
        html::size(settings.max_bytes)
    );
    if shell.actions {
        b.push_str(html::NOSCRIPT);
    }
    b.push_str(
        "<table id=\"held\"><thead><tr><th>id, held at</th><th>key</th><th>limit</th>\
         <th>from</th><th>to</th><th class=\"n\">size</th><th>subject, client</th><th></th>\
         </tr></thead><tbody>",
    );
    for (h, section) in &msgs {
        b.push_str(&row(h, section, shell.actions));
    }
    if msgs.is_empty() {
        b.push_str("<tr><td colspan=\"8\" class=\"muted\">nothing is held</td></tr>");
    }
    b.push_str("</tbody></table>");
    b.push_str(&paging::links("/console/held", &[], pg, Some(total), false));
    html_response(200, html::page("Held messages", Nav::Held, shell, &b))
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
