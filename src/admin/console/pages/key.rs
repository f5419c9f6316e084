//! The incident page of one key: its restriction (since, until, by whom, why, rate), the
//! evidence as tables, its held messages, its recent messages from the event log (read
//! backwards from the end, bounded in bytes), the actions (each a form with a reason:
//! release the restriction, restrict for a time, release or delete all its held mail),
//! every limit's reading (as `floodgate inspect` shows), its last hour as a chart.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::admin::console::evidence::{self, Client};
use crate::admin::console::figures;
use crate::admin::console::history::{minute_of, MINUTES};
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::keylog;
use crate::admin::console::paging::{self, Page};
use crate::admin::console::respond::{api, error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::console::svg::meter;
use crate::admin::http::{Request, Response};
use crate::admin::messages;
use crate::hold::HeldHead;
use crate::report::svg::{line_chart, Line, LineChart, Look, Points};
use crate::report::transactions::{self, Recent};
use crate::store::Restriction;

/// Held messages of the key per page of its list.
pub const KEY_HELD_SHOWN: usize = 20;
/// Most recent messages of the key listed on its page.
pub const KEY_TX_SHOWN: usize = 50;
/// The most bytes read from the end of the event log for the recent messages.
pub const TX_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Recipients listed per recent message.
const RCPTS_SHOWN: usize = 5;

/// The table of readings from `/v1/inspect`'s `limits`.
fn readings(limits: &[Value]) -> String {
    let mut b = String::from(
        "<table id=\"readings\" class=\"stack\"><thead><tr><th>limit</th><th>algorithm</th>\
         <th class=\"n\">value</th><th class=\"n\">limit</th><th>per</th><th>against the \
         limit</th><th class=\"n\">under again in</th><th>stored as</th></tr></thead><tbody>",
    );
    for r in limits {
        let s = |k: &str| r[k].as_str().unwrap_or("");
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        let over = r["over"].as_bool().unwrap_or(false);
        let until = match (over, r["until_under_secs"].as_f64()) {
            (false, _) => String::new(),
            (true, Some(v)) => format!("{} s", html::num(v.ceil())),
            (true, None) => "never by waiting".into(),
        };
        let mut limit = html::num(f("limit_value"));
        if let Some(b) = r.get("baseline").filter(|b| b.is_object()) {
            let _ = write!(
                limit,
                "<br><small>own limit from {}</small>",
                html::text(b["baseline"].as_str().unwrap_or(""), 60)
            );
        }
        let _ = write!(
            b,
            "<tr{}><td data-label=\"limit\">{}</td><td data-label=\"algorithm\">{}</td>\
             <td class=\"n\" data-label=\"value\">{}</td><td class=\"n\" data-label=\"limit\">{}</td>\
             <td data-label=\"per\">{}</td><td data-label=\"against the limit\">{}</td>\
             <td class=\"n\" data-label=\"under again in\">{}</td>\
             <td data-label=\"stored as\"><small>{}</small></td></tr>",
            if over { " class=\"over\"" } else { "" },
            html::text(s("limit"), 60),
            html::escape(s("algorithm")),
            html::num(f("value")),
            limit,
            html::escape(s("period")),
            meter(f("value"), f("limit_value")),
            until,
            if r["stored"].as_bool().unwrap_or(false) {
                html::text(s("key"), html::CELL_CHARS)
            } else {
                "<span class=\"muted\">nothing stored</span>".into()
            }
        );
    }
    b.push_str("</tbody></table>");
    b
}

/// The incident page's action forms: each needs a reason.
fn actions(key: &str, restricted: bool, held: usize, shell: &Shell<'_>) -> String {
    // `extra` comes before the reason, `confirm` after it.
    let form = |op: &str, extra: &str, confirm: &str, label: &str, note: &str| {
        format!(
            "<form class=\"act-form\" method=\"post\" action=\"/console/act/key\" \
             id=\"act-{op}\">{}<input type=\"hidden\" name=\"key\" value=\"{}\">\
             <input type=\"hidden\" name=\"op\" value=\"{op}\">{extra}\
             <label>Reason <input name=\"reason\" required placeholder=\"why\"></label>{confirm}\
             <button type=\"submit\">{label}</button> <span class=\"muted\">{note}</span></form>",
            html::csrf_field(shell),
            html::attr(key)
        )
    };
    let mut out = String::from("<div class=\"incident-actions\" id=\"actions\">");
    if restricted {
        out.push_str(&form(
            "release",
            "",
            "",
            "Release the restriction",
            "also resets the records of the limit that restricted it",
        ));
    }
    out.push_str(&form(
        "restrict",
        "<label>For <select name=\"for\"><option value=\"1h\">1 hour</option>\
         <option value=\"1d\">1 day</option><option value=\"7d\">7 days</option>\
         <option value=\"until_released\">until released</option></select></label>",
        "",
        if restricted {
            "Restrict again"
        } else {
            "Restrict"
        },
        "refuses its mail (or holds it, as the policy says) until then",
    ));
    if held > 0 {
        // Releasing the mail of a key still restricted needs the box ticked.
        out.push_str(&form(
            "release-held",
            "",
            if restricted { html::CONFIRM_FIELD } else { "" },
            &format!("Release all {held} held"),
            "relays them upstream now",
        ));
        out.push_str(&form(
            "delete-held",
            "",
            "",
            &format!("Delete all {held} held"),
            "for good",
        ));
    }
    out.push_str("</div>");
    out
}

/// One page of the key's held messages (`mine`: oldest first), newest first, as a table
/// with the links to the other pages.
fn held_table(key: &str, mine: &[HeldHead], asked: Page) -> String {
    let pg = asked.clamp(mine.len());
    let newest: Vec<&HeldHead> = mine.iter().rev().collect();
    let mut out = format!(
        "<p class=\"muted\" id=\"key-held-count\">{} held for this key: \
         <a href=\"{}\">select, sort and act on them on the Held page</a>.</p>",
        mine.len(),
        html::url("/console/held", &[("key", key)])
    );
    if mine.is_empty() {
        return out;
    }
    out.push_str(
        "<table class=\"stack\" id=\"key-held\"><thead><tr><th>id</th><th>held at</th>\
         <th>limit</th><th>from</th><th>to</th><th>subject</th></tr></thead><tbody>",
    );
    for h in &newest[pg.range(mine.len())] {
        let m = &h.envelope;
        let rcpts = m.recipients();
        let _ = write!(
            out,
            "<tr data-row><td data-label=\"id\">{}</td><td data-label=\"held at\">{}</td>\
             <td data-label=\"limit\">{}</td><td data-label=\"from\">{}</td>\
             <td data-label=\"to\">{}{}</td><td data-label=\"subject\">{}</td></tr>",
            html::held_link(&m.id),
            super::when(
                i64::try_from(m.time)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1_000_000)
            ),
            html::text(&m.limit, 60),
            html::token(m.sender(), html::CELL_CHARS),
            rcpts
                .first()
                .map_or_else(String::new, |r| html::token(r, html::CELL_CHARS)),
            if rcpts.len() > 1 {
                format!(" and {} more", rcpts.len() - 1)
            } else {
                String::new()
            },
            h.subject.as_deref().map_or_else(
                || "<span class=\"muted\">none</span>".into(),
                |s| html::text(s, html::CELL_CHARS)
            )
        );
    }
    out.push_str("</tbody></table>");
    if mine.len() > pg.size {
        // The page's own path (the key percent-encoded, or in `?k=`), unescaped.
        let path = html::key_url(key).replace("&amp;", "&");
        let (base, params) = match path.split_once("?k=") {
            Some((b, _)) => (b.to_string(), vec![("k", key)]),
            None => (path.clone(), Vec::new()),
        };
        out.push_str(&paging::links(&base, &params, pg, Some(mine.len()), false));
    }
    out
}

/// The key's recent messages from the event log, newest first.
fn transactions_table(r: &Recent) -> String {
    let mut out = format!(
        "<p class=\"muted\" id=\"tx-read\">The last {} of this key's messages found in the \
         last {} KiB of the event log{}.</p>",
        r.messages.len(),
        r.read.div_ceil(1024),
        if r.whole_file { " (all of it)" } else { "" }
    );
    if r.messages.is_empty() {
        return out;
    }
    out.push_str(
        "<table class=\"stack\" id=\"transactions\"><thead><tr><th>time</th><th>client</th>\
         <th>sender</th><th>recipients</th><th>subject</th><th>verdict</th></tr></thead><tbody>",
    );
    for m in &r.messages {
        let rc: Vec<String> = m
            .recipients
            .iter()
            .take(RCPTS_SHOWN)
            .map(|x| html::text(x, html::CELL_CHARS))
            .collect();
        let more = m.recipients.len().saturating_sub(RCPTS_SHOWN);
        let _ = write!(
            out,
            "<tr data-row><td data-label=\"time\">{}</td><td data-label=\"client\">{}{}{}</td>\
             <td data-label=\"sender\">{}</td><td data-label=\"recipients\">{}{}</td>\
             <td data-label=\"subject\">{}</td><td data-label=\"verdict\">{}</td></tr>",
            super::when((m.t * 1e6) as i64),
            html::text(m.client.as_deref().unwrap_or(""), 60),
            m.name.as_deref().map_or_else(String::new, |n| format!(
                "<br><small>{}</small>",
                html::text(n, html::CELL_CHARS)
            )),
            m.user.as_deref().map_or_else(String::new, |u| format!(
                "<br><small>login {}</small>",
                html::text(u, 80)
            )),
            html::text(&m.sender, html::CELL_CHARS),
            rc.join("<br>"),
            if more > 0 {
                format!("<br>and {more} more")
            } else {
                String::new()
            },
            m.subject.as_deref().map_or_else(
                || "<span class=\"muted\">none</span>".into(),
                |s| html::text(s, html::CELL_CHARS)
            ),
            html::text(&m.verdict, 80)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The names of client addresses, from the recent messages and the held ones.
fn known_clients(key: &str, recent: &Recent, held: &[HeldHead]) -> BTreeMap<String, Client> {
    let mut known: BTreeMap<String, Client> = BTreeMap::new();
    for m in &recent.messages {
        if let Some(ip) = &m.client {
            let c = known.entry(ip.to_string()).or_default();
            if c.name.is_none() {
                c.name = m.name.as_deref().map(str::to_string);
            }
        }
    }
    for h in held.iter().filter(|h| h.envelope.key == key) {
        let e = &h.envelope;
        let c = known.entry(e.client.ip().to_string()).or_default();
        if c.name.is_none() {
            c.name = e.reverse_name.clone().or_else(|| e.name.clone());
        }
    }
    known
}

/// The key's recent messages from the event log, the page `page` of them (1: the newest
/// [`KEY_TX_SHOWN`]), and whether older ones were found; or why there are none.
async fn recent(c: &Console, key: &str, page: usize) -> Result<(Recent, bool), String> {
    let config = c.state.control.generation();
    let Some(path) = config.report.events.clone() else {
        return Err(
            "No recent messages: they are read from the event log, and the \
                    configuration has no <code>[report] events</code>."
                .into(),
        );
    };
    let k = key.to_string();
    // Older pages may read further back than the first.
    let max_bytes = if page > 1 {
        messages::MAX_BYTES
    } else {
        TX_MAX_BYTES
    };
    let read = tokio::task::spawn_blocking(move || {
        transactions::recent_page(
            &path,
            &k,
            (page - 1) * KEY_TX_SHOWN,
            KEY_TX_SHOWN,
            max_bytes,
        )
    })
    .await;
    match read {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok((Recent::default(), false)),
        Ok(Err(e)) => Err(format!(
            "the event log could not be read: {}",
            html::text(&e.to_string(), 300)
        )),
        Err(e) => Err(html::escape(&e.to_string())),
    }
}

/// The links to the newer and older pages of the key's recent messages.
fn tx_pages(key: &str, page: usize, more: bool) -> String {
    let link = |p: usize, label: &str| {
        let n = p.to_string();
        format!(
            "<a href=\"{}#recent-box\">{label}</a>",
            html::url("/console/key", &[("k", key), ("tx_page", &n)])
        )
    };
    let mut parts = Vec::new();
    if page > 1 {
        parts.push(link(page - 1, "newer"));
    }
    if more {
        parts.push(link(page + 1, "older"));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "<p class=\"paging\" id=\"tx-pages\">Page {page} of the key's messages: {}</p>",
        parts.join(" · ")
    )
}

/// `GET /console/delivered.csv?k=KEY`: the recipients delivered for KEY before its
/// restriction, as CSV.
pub async fn delivered_csv(c: &Console, key: &str, shell: &Shell<'_>) -> Response {
    match c.state.delivered_before(key).await {
        Ok((_, d)) => {
            let mut r = Response::text(200, "text/csv; charset=utf-8", messages::csv(&d.messages));
            r.headers.push((
                "Content-Disposition",
                "attachment; filename=\"delivered.csv\"".into(),
            ));
            r
        }
        Err(r) => {
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            error_page(r.status, v["error"].as_str().unwrap_or("unreadable"), shell)
        }
    }
}

/// What the restricted key relayed before its restriction, in words with the link to its
/// recipients as CSV: from the event log (the relayed messages from its first over-limit
/// event, or the limit's period, to the restriction); else the evidence's figure, said as
/// such; else that it is not known here.
async fn delivered_words(c: &Console, key: &str, evidence: Option<&Value>) -> String {
    match c.state.delivered_before(key).await {
        Ok(((from, to, from_is), d)) => {
            let recipients: usize = d.messages.iter().map(|m| m.recipients.len()).sum();
            format!(
                "{} to {} relayed{} <span class=\"muted\">from {} ({}) to {}</span> \
                 <a href=\"{}\">recipients as CSV</a>",
                crate::figures::count(d.messages.len() as u64, "message"),
                crate::figures::count(recipients as u64, "recipient"),
                if d.complete {
                    ""
                } else {
                    " at least (the event log was read only so far back)"
                },
                super::when(from),
                from_is,
                super::when(to),
                html::url("/console/delivered.csv", &[("k", key)])
            )
        }
        Err(_) => evidence.and_then(figures::delivered_before).map_or_else(
            || "<span class=\"muted\">not known here</span>".into(),
            |d| d.words(),
        ),
    }
}

/// The incident's summary: who, since when, why, until, delivered before, held now.
fn summary(key: &str, r: Option<&Restriction>, delivered: String, held: usize) -> String {
    let mut items: Vec<(&str, &str, String)> = Vec::new();
    items.push(("who", "sum-who", html::token(key, 200)));
    match r {
        Some(r) => {
            items.push(("restricted since", "sum-since", super::when(r.since_us)));
            let rate = r.rate.map_or_else(String::new, |v| {
                format!(
                    " at {} against {}",
                    html::num(v),
                    html::text(&r.limit_text, 60)
                )
            });
            items.push((
                "why",
                "sum-why",
                format!(
                    "{}{rate}, by {}: {}",
                    html::text(&r.limit, 60),
                    html::token(&r.by, 80),
                    html::text(&r.reason, 300)
                ),
            ));
            items.push((
                "until",
                "sum-until",
                r.until_us
                    .map_or_else(|| "an admin releases it".into(), super::when),
            ));
        }
        None => items.push(("restricted", "sum-since", "no".into())),
    }
    items.push(("delivered before", "sum-delivered", delivered));
    items.push((
        "held now",
        "sum-held",
        format!(
            "<a href=\"{}\">{held}</a>",
            html::url("/console/held", &[("key", key)])
        ),
    ));
    let mut out = format!(
        "<dl class=\"summary\" id=\"{}\">",
        if r.is_some() {
            "restriction"
        } else {
            "summary"
        }
    );
    for (label, id, v) in items {
        let _ = write!(out, "<div><dt>{label}</dt><dd id=\"{id}\">{v}</dd></div>");
    }
    out.push_str("</dl>");
    out
}

/// The evidence section: what the node saw of the key, as tables.
fn evidence_section(
    evidence: Option<&Value>,
    restricted: bool,
    known: &BTreeMap<String, Client>,
) -> String {
    match evidence {
        Some(e) => format!(
            "<p class=\"muted\">{}</p>{}",
            if restricted {
                "What this node saw of the key up to its restriction; held: what is held now."
            } else {
                "What this node saw of the key recently; held: what is held now."
            },
            evidence::table(e, known)
        ),
        None => "<p class=\"muted\">No evidence kept here.</p>".into(),
    }
}

/// Every limit's reading (from `/v1/inspect`'s answer `v`), and the reset button.
fn readings_section(v: &Value, key: &str, shell: &Shell<'_>) -> String {
    let mut out = readings(v["limits"].as_array().map_or(&[][..], |a| a));
    if shell.actions {
        out.push_str(html::NOSCRIPT);
        let _ = write!(
            out,
            "<p data-row>{} <span class=\"muted\">removes every record of this key for every \
             limit (a restriction stays).</span></p>",
            html::action_button(
                "Reset",
                &html::url("/console/act/reset", &[("key", key)]),
                "Reset every limit?",
                false
            )
        );
    }
    out
}

/// A collapsible section of the incident page (works without scripting).
fn fold(id: &str, title: &str, open: bool, body: &str) -> String {
    format!(
        "<details class=\"section\" id=\"{id}-box\"{}><summary>{title}</summary>{body}</details>",
        if open { " open" } else { "" }
    )
}

/// The key's evidence: its restriction's (held live, see
/// [`crate::admin::api::AdminState::held_into`]), else what this node saw of it with what is
/// held for it now; `None` where nothing is kept.
async fn evidence_of(c: &Console, key: &str, restricted: Option<&Restriction>) -> Option<Value> {
    match (restricted, &c.state.policy) {
        (Some(r), _) if !r.evidence.is_null() => Some(r.evidence.clone()),
        (_, Some(p)) => {
            let mut e = p.evidence(&[key]);
            p.set_held(&mut e, key).await;
            Some(e)
        }
        _ => None,
    }
}

/// `GET /console/key/KEY`: the incident page. Its first screen: who, since when, why,
/// what got out before, what is held, the actions; then the history of what admins did
/// (open once the restriction has ended), and the long lists folded.
pub async fn page(c: &Console, req: &Request, key: &str, shell: &Shell<'_>) -> Response {
    let (status, v) = api(c, "GET", "/v1/inspect", &[("key", key)]).await;
    if status != 200 {
        let e = v["error"].as_str().unwrap_or("inspect failed").to_string();
        return error_page(status, &e, shell);
    }
    let mut b = String::with_capacity(32 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    let mut restricted: Option<Restriction> = None;
    match c.state.restrictions_now().await {
        Ok(list) => restricted = list.into_iter().find(|r| r.key == key),
        Err(e) => {
            let _ = write!(
                b,
                "<p class=\"error\">restrictions unreadable: {}</p>",
                html::text(&e.to_string(), 300)
            );
        }
    }
    let held = match figures::held_of(c, key).await {
        Ok(l) => l,
        Err(e) => {
            let _ = write!(
                b,
                "<p class=\"error\">the hold spool could not be read: {e}</p>"
            );
            Vec::new()
        }
    };
    let _ = write!(
        b,
        "<p>Key <strong class=\"wrap\" id=\"key\">{}</strong> {}</p>",
        html::text(key, 1000),
        if restricted.is_some() {
            "<span class=\"over\" id=\"restricted\">restricted</span>"
        } else {
            "<span class=\"muted\" id=\"not-restricted\">not restricted</span>"
        }
    );
    let evidence = evidence_of(c, key, restricted.as_ref()).await;
    let delivered = if restricted.is_some() {
        delivered_words(c, key, evidence.as_ref()).await
    } else {
        "<span class=\"muted\">counted up to a restriction</span>".into()
    };
    // Held in the spool, and in Postfix's hold queue by the milter or policy service.
    let held_count = held.len() + super::held_postfix::count(c, key);
    b.push_str(&summary(key, restricted.as_ref(), delivered, held_count));
    if shell.actions {
        b.push_str(&actions(key, restricted.is_some(), held_count, shell));
    }
    // Once the restriction has ended, what admins did is the first thing to read.
    let history = super::key_history::section(c, key).await;
    b.push_str(&fold(
        "history",
        "History: what admins did (audit log)",
        restricted.is_none(),
        &history,
    ));
    let tx_page = match messages::page_of(req.param("tx_page")) {
        Ok(p) => p,
        Err(e) => return error_page(400, &format!("tx_page: {e}"), shell),
    };
    let recent = recent(c, key, tx_page).await;
    let empty = Recent::default();
    let known = known_clients(key, recent.as_ref().map_or(&empty, |r| &r.0), &held);
    let evidence_html = evidence_section(evidence.as_ref(), restricted.is_some(), &known);
    b.push_str(&fold("evidence", "Evidence", false, &evidence_html));
    let asked = Page::parse(req.param("page"), KEY_HELD_SHOWN);
    b.push_str(&fold(
        "held",
        &format!("Held mail ({})", held.len()),
        true,
        &held_table(key, &held, asked),
    ));
    let tx = match &recent {
        Ok((r, more)) => transactions_table(r) + &tx_pages(key, tx_page, *more),
        Err(why) => format!("<p class=\"muted\" id=\"no-transactions\">{why}</p>"),
    };
    // A page of older messages asked for opens the list.
    b.push_str(&fold(
        "recent",
        "Recent messages",
        req.param("tx_page").is_some(),
        &tx,
    ));
    let readings_html = readings_section(&v, key, shell);
    b.push_str(&fold(
        "readings",
        "Every limit's reading",
        false,
        &readings_html,
    ));
    b.push_str(&fold(
        "hour",
        "Last hour",
        false,
        &history_chart(c, key).await,
    ));
    html_response(200, html::page("Incident", Nav::Key, shell, &b))
}

/// The key's last hour from the event log, as a chart with one line per limit.
async fn history_chart(c: &Console, key: &str) -> String {
    let config = c.state.control.generation();
    let Some(path) = config.report.events.clone() else {
        return "<p class=\"muted\" id=\"no-history\">No history: it is read from the event \
                log, and the configuration has no <code>[report] events</code>.</p>"
            .into();
    };
    let now = minute_of(crate::store::now_micros());
    let k = key.to_string();
    let read = tokio::task::spawn_blocking(move || keylog::read(&path, &k, now)).await;
    let h = match read {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            return format!(
                "<p class=\"error\">the event log could not be read: {}</p>",
                html::text(&e.to_string(), 300)
            )
        }
        Err(e) => return format!("<p class=\"error\">{}</p>", html::escape(&e.to_string())),
    };
    let lines: Vec<Line<'_>> = h
        .limits
        .iter()
        .map(|(name, values)| Line {
            name,
            points: Points::Spaced(values),
        })
        .collect();
    let mut out = line_chart(&LineChart {
        title: "Amount offered to each limit per minute, last hour (event log)",
        look: Look::Console {
            width: 760,
            height: 180,
            points: MINUTES,
            x_labels: super::hour_labels(now),
        },
        lines: &lines,
    });
    let _ = write!(
        out,
        "<p class=\"muted\">From the event log: what was offered to each limit per minute \
         (messages, recipients or bytes, as each limit counts){}.</p>",
        if h.whole_file {
            String::new()
        } else {
            format!("; only its last {} MiB were read", keylog::MAX_TAIL >> 20)
        }
    );
    if h.limits.is_empty() {
        out.push_str("<p class=\"muted\">No evaluation of this key in the last hour.</p>");
    }
    out
}
