//! One held message: its envelope, the client it came from, its key and limit, the header
//! section, the text of its body (escaped, at most [`TEXT_CHARS`] characters), its
//! attachments listed (never rendered), release and delete buttons, and its download as
//! `.eml`. An id that is not a held id never reaches the file system.

use std::fmt::Write as _;

use mail_parser::{MessageParser, MimeHeaders};

use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};
use crate::hold::format::valid_id;
use crate::hold::postfix::PostfixHold;
use crate::hold::{HeldMessage, SpoolError};
use crate::proxy::release::blocking;

/// The most characters of body text shown.
pub const TEXT_CHARS: usize = 64 * 1024;
/// Most attachments listed.
const MAX_ATTACHMENTS: usize = 100;

/// The message `id`, or the page saying why not.
async fn read(c: &Console, id: &str, shell: &Shell<'_>) -> Result<HeldMessage, Response> {
    if !valid_id(id) {
        return Err(error_page(
            404,
            "no such held message: a held id is 1 to 64 letters, digits and '-'",
            shell,
        ));
    }
    let Some(spool) = c.state.control.shared().hold.clone() else {
        return Err(error_page(
            404,
            "no hold spool: the configuration has no [hold] section",
            shell,
        ));
    };
    let owned = id.to_string();
    match blocking(move || spool.message(&owned)).await {
        Ok(m) => Ok(m),
        Err(SpoolError::NotFound(_)) => Err(error_page(
            404,
            &format!("held message {id} is not held: released, deleted or expired already"),
            shell,
        )),
        Err(e) => Err(error_page(500, &e.to_string(), shell)),
    }
}

/// The body's text parts and attachments as HTML.
pub fn body_parts(body: &[u8]) -> String {
    let Some(msg) = MessageParser::new().parse(body) else {
        return "<p class=\"muted\">The body does not parse as a message.</p>".into();
    };
    let mut out = String::from("<h2>Text</h2>");
    let mut left = TEXT_CHARS;
    let parts = msg.text_body_count();
    if parts == 0 {
        out.push_str("<p class=\"muted\">No text part.</p>");
    }
    for i in 0..parts {
        let Some(text) = msg.body_text(i) else {
            continue;
        };
        if left == 0 {
            out.push_str("<p class=\"muted\">Further text parts are not shown.</p>");
            break;
        }
        let (shown, cut) = html::truncate(&text, left);
        left -= shown.chars().count();
        let _ = write!(out, "<pre class=\"body-text\">{}", html::escape(shown));
        if cut {
            let _ = write!(
                out,
                "\n…(cut: {} characters in this part)",
                text.chars().count()
            );
        }
        out.push_str("</pre>");
    }
    out.push_str("<h2>Attachments</h2>");
    let attachments: Vec<_> = msg.attachments().collect();
    if attachments.is_empty() {
        out.push_str("<p class=\"muted\" id=\"no-attachments\">None.</p>");
        return out;
    }
    out.push_str(
        "<table class=\"stack\" id=\"attachments\"><thead><tr><th>name</th><th>type</th>\
         <th class=\"n\">size (octets)</th></tr></thead><tbody>",
    );
    for a in attachments.iter().take(MAX_ATTACHMENTS) {
        let ctype = a.content_type().map_or_else(
            || "application/octet-stream".to_string(),
            |t| match t.subtype() {
                Some(s) => format!("{}/{s}", t.ctype()),
                None => t.ctype().to_string(),
            },
        );
        let _ = write!(
            out,
            "<tr><td data-label=\"name\">{}</td><td data-label=\"type\">{}</td>\
             <td class=\"n\" data-label=\"size\">{}</td></tr>",
            a.attachment_name().map_or_else(
                || "<span class=\"muted\">no name</span>".into(),
                |n| html::text(n, html::CELL_CHARS)
            ),
            html::text(&ctype, 100),
            a.len()
        );
    }
    if attachments.len() > MAX_ATTACHMENTS {
        let _ = write!(
            out,
            "<tr><td colspan=\"3\" class=\"muted\">and {} more</td></tr>",
            attachments.len() - MAX_ATTACHMENTS
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The message page's release and delete form: done, back to the incident page of `key`;
/// refused, back to this page (`enc`: its id, percent-encoded and escaped) with the reason
/// (`reason`) kept.
fn actions(id: &str, key: &str, enc: &str, reason: &str, shell: &Shell<'_>) -> String {
    format!(
        "<form class=\"act-form\" method=\"post\" action=\"/console/act/held/bulk\">{}\
         <input type=\"hidden\" name=\"id\" value=\"{}\">\
         <input type=\"hidden\" name=\"back\" value=\"{}\">\
         <input type=\"hidden\" name=\"failed_back\" value=\"/console/held/{enc}\">\
         <label>Reason <input name=\"reason\" required placeholder=\"why\" value=\"{}\">\
         </label><button type=\"submit\" name=\"op\" value=\"release\">Release</button>\
         <button type=\"submit\" name=\"op\" value=\"delete\">Delete</button> {}</form>\
         <p class=\"muted\">Done, the incident page of its key opens; refused, this page \
         again with the reason kept.</p>",
        html::csrf_field(shell),
        html::attr(id),
        html::key_url(key),
        html::attr(reason),
        html::CONFIRM_FIELD
    )
}

/// `GET /console/held/ID`.
pub async fn page(c: &Console, req: &Request, id: &str, shell: &Shell<'_>) -> Response {
    let m = match read(c, id, shell).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let e = &m.envelope;
    let mut b = String::with_capacity(32 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    let opt = |v: &Option<String>| {
        v.as_deref().map_or_else(
            || "<span class=\"muted\">none</span>".into(),
            |s| html::text(s, html::CELL_CHARS),
        )
    };
    let rcpts: Vec<String> = e
        .recipients()
        .iter()
        .map(|r| html::text(r, html::CELL_CHARS))
        .collect();
    let rows = [
        ("id", format!("<code>{}</code>", html::escape(&e.id))),
        (
            "held at",
            super::when(
                i64::try_from(e.time)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1_000_000),
            ),
        ),
        ("key", html::key_link(&e.key)),
        (
            "limit",
            format!(
                "{}{}",
                html::text(&e.limit, 60),
                e.paced.as_deref().map_or_else(String::new, |p| format!(
                    " (paced at {})",
                    html::text(p, 60)
                ))
            ),
        ),
        ("sender", html::text(e.sender(), html::CELL_CHARS)),
        (
            "recipients",
            format!(
                "{} <span class=\"muted\">({})</span>",
                rcpts.join("<br>"),
                rcpts.len()
            ),
        ),
        ("subject", opt(&m.subject)),
        ("size", format!("{} octets", m.body.len())),
        ("client address", html::escape(&e.client.to_string())),
        ("client name", opt(&e.name)),
        ("reverse name", opt(&e.reverse_name)),
        ("login", opt(&e.user)),
        ("HELO", opt(&e.helo)),
        (
            "protocol",
            format!(
                "{}{}",
                html::escape(&e.proto),
                e.tls
                    .as_deref()
                    .map_or_else(String::new, |t| format!(", TLS {}", html::text(t, 80)))
            ),
        ),
    ];
    b.push_str("<dl class=\"evidence wide\" id=\"envelope\">");
    for (k, v) in rows {
        let _ = write!(b, "<dt>{k}</dt><dd>{v}</dd>");
    }
    b.push_str("</dl>");
    let enc = html::attr(&crate::admin::http::percent_encode(&e.id));
    let _ = write!(
        b,
        "<p><a id=\"download\" href=\"/console/held/{enc}.eml\" download>Download as .eml</a> \
         <span class=\"muted\">(the message as it would be relayed; open it with care)</span></p>"
    );
    if shell.actions {
        b.push_str(&actions(
            &e.id,
            &e.key,
            &enc,
            req.param("reason").unwrap_or(""),
            shell,
        ));
    }
    b.push_str("<h2>Header section</h2><pre id=\"headers\">");
    b.push_str(&super::held::headers(m.header_section()));
    b.push_str("</pre>");
    b.push_str(&body_parts(&m.body));
    html_response(200, html::page("Held message", Nav::Held, shell, &b))
}

/// `GET /console/held/QUEUEID` for a message in Postfix's hold queue: the ledger's entry
/// and the header section `postcat` printed.
pub async fn postfix_page(
    pf: &PostfixHold,
    req: &Request,
    id: &str,
    shell: &Shell<'_>,
) -> Response {
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
        ("held at", super::held_postfix::held_at(&e)),
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

/// `GET /console/held/ID.eml`: the message's octets as held, to save.
pub async fn raw(c: &Console, id: &str, shell: &Shell<'_>) -> Response {
    let m = match read(c, id, shell).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let mut r = Response::text(200, "message/rfc822", String::new());
    r.body = m.body;
    // The id is letters, digits and '-' (checked above): safe in the quoted file name.
    r.headers.push((
        "Content-Disposition",
        format!("attachment; filename=\"{}.eml\"", m.envelope.id),
    ));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escaped_attachments_listed_not_shown() {
        let body = "Subject: x\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
            --b\r\nContent-Type: text/plain\r\n\r\n<script>alert(1)</script> hi\r\n\
            --b\r\nContent-Type: application/pdf\r\n\
            Content-Disposition: attachment; filename=\"<evil>.pdf\"\r\n\
            Content-Transfer-Encoding: base64\r\n\r\nSGVsbG8gd29ybGQ=\r\n--b--\r\n";
        let h = body_parts(body.as_bytes());
        assert!(
            h.contains("&lt;script&gt;alert(1)&lt;/script&gt; hi"),
            "{h}"
        );
        assert!(!h.contains("<script>"), "{h}");
        assert!(h.contains("&lt;evil&gt;.pdf"), "{h}");
        assert!(h.contains("application/pdf"), "{h}");
        assert!(h.contains(">11</td>"), "the decoded size: {h}");
        assert!(
            !h.contains("Hello world"),
            "an attachment is never shown: {h}"
        );
        let long = format!("Subject: y\r\n\r\n{}\r\n", "a".repeat(TEXT_CHARS + 10));
        let h = body_parts(long.as_bytes());
        assert!(h.contains("…(cut: "), "{}", h.len());
        assert!(h.len() < TEXT_CHARS + 1000);
        assert!(body_parts(b"Subject: z\r\n\r\nplain").contains("id=\"no-attachments\""));
    }
}
