//! The incident page of one key: its restriction (since, until, by whom, why, rate), the
//! evidence as tables, its held messages, its recent messages from the event log (read
//! backwards from the end, bounded in bytes), the actions (each a form with a reason:
//! release the restriction, restrict for a time, release or delete all its held mail),
//! every limit's reading (as `floodgate inspect` shows), its last hour as a chart.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::admin::console::evidence::{self, Client};
use crate::admin::console::history::{minute_of, MINUTES};
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::keylog;
use crate::admin::console::respond::{api, error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::console::svg::meter;
use crate::admin::http::{Request, Response};
use crate::hold::HeldHead;
use crate::proxy::release::blocking;
use crate::report::svg::{line_chart, Line, LineChart, Look, Points};
use crate::report::transactions::{self, Recent};
use crate::store::Restriction;

/// Most held messages of the key listed on its page.
pub const KEY_HELD_SHOWN: usize = 50;
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

/// The key's restriction, if any, as a definition list.
fn restriction(r: &Restriction) -> String {
    let rate = match r.rate {
        Some(v) => format!("{} against {}", html::num(v), html::text(&r.limit_text, 60)),
        None => "<span class=\"muted\">not measured (restricted by hand)</span>".into(),
    };
    let rows = [
        ("limit", html::text(&r.limit, 60)),
        ("since", super::when(r.since_us)),
        (
            "until",
            r.until_us
                .map_or_else(|| "until released".into(), super::when),
        ),
        ("by", html::text(&r.by, html::CELL_CHARS)),
        ("why", html::text(&r.reason, 1000)),
        ("rate", rate),
    ];
    let mut out = String::from("<p class=\"over\" id=\"restricted\">Restricted.</p>");
    out.push_str("<dl class=\"evidence wide\" id=\"restriction\">");
    for (k, v) in rows {
        let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
    }
    out.push_str("</dl>");
    out
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
    let mut out = String::from("<h2>Actions</h2>");
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
    out
}

/// The key's held messages (at most [`KEY_HELD_SHOWN`], newest first) as a table, and
/// how many there are.
fn held_table(key: &str, list: &[HeldHead]) -> String {
    let mine: Vec<&HeldHead> = list
        .iter()
        .rev()
        .filter(|h| h.envelope.key == key)
        .collect();
    let mut out = format!(
        "<p class=\"muted\" id=\"key-held-count\">{} held for this key{}.</p>",
        mine.len(),
        if mine.len() > KEY_HELD_SHOWN {
            format!(
                ", the newest {KEY_HELD_SHOWN} shown: <a href=\"{}\">all of them</a>",
                html::url("/console/held", &[("key", key)])
            )
        } else {
            String::new()
        }
    );
    if mine.is_empty() {
        return out;
    }
    out.push_str(
        "<table class=\"stack\" id=\"key-held\"><thead><tr><th>id</th><th>held at</th>\
         <th>limit</th><th>from</th><th>to</th><th>subject</th></tr></thead><tbody>",
    );
    for h in mine.iter().take(KEY_HELD_SHOWN) {
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
            html::text(m.sender(), html::CELL_CHARS),
            rcpts
                .first()
                .map_or_else(String::new, |r| html::text(r, html::CELL_CHARS)),
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

/// The names and counts of client addresses, from the recent messages and the held ones.
fn known_clients(key: &str, recent: &Recent, held: &[HeldHead]) -> BTreeMap<String, Client> {
    let mut known: BTreeMap<String, Client> = BTreeMap::new();
    for m in &recent.messages {
        if let Some(ip) = &m.client {
            let c = known.entry(ip.to_string()).or_default();
            c.messages += 1;
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

/// The key's recent messages from the event log, or why there are none.
async fn recent(c: &Console, key: &str) -> Result<Recent, String> {
    let config = c.state.control.generation();
    let Some(path) = config.report.events.clone() else {
        return Err(
            "No recent messages: they are read from the event log, and the \
                    configuration has no <code>[report] events</code>."
                .into(),
        );
    };
    let k = key.to_string();
    let read = tokio::task::spawn_blocking(move || {
        transactions::recent(&path, &k, KEY_TX_SHOWN, TX_MAX_BYTES)
    })
    .await;
    match read {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(Recent::default()),
        Ok(Err(e)) => Err(format!(
            "the event log could not be read: {}",
            html::text(&e.to_string(), 300)
        )),
        Err(e) => Err(html::escape(&e.to_string())),
    }
}

/// `GET /console/key/KEY`: the incident page.
pub async fn page(c: &Console, req: &Request, key: &str, shell: &Shell<'_>) -> Response {
    let (status, v) = api(c, "GET", "/v1/inspect", &[("key", key)]).await;
    if status != 200 {
        let e = v["error"].as_str().unwrap_or("inspect failed").to_string();
        return error_page(status, &e, shell);
    }
    let mut b = String::with_capacity(32 * 1024);
    b.push_str(&html::done_note(req.param("done"), req.param("failed")));
    let _ = write!(
        b,
        "<p>Key <strong class=\"wrap\" id=\"key\">{}</strong></p>",
        html::text(key, 1000)
    );
    let mut restricted: Option<Restriction> = None;
    match c.state.store.as_store().restrictions().await {
        Ok(list) => match list.into_iter().find(|r| r.key == key) {
            Some(r) => {
                b.push_str(&restriction(&r));
                restricted = Some(r);
            }
            None => b.push_str("<p class=\"muted\" id=\"not-restricted\">Not restricted.</p>"),
        },
        Err(e) => {
            let _ = write!(
                b,
                "<p class=\"error\">restrictions unreadable: {}</p>",
                html::text(&e.to_string(), 300)
            );
        }
    }
    let held: Vec<HeldHead> = match c.state.control.shared().hold.clone() {
        Some(spool) => match blocking(move || spool.list()).await {
            Ok(l) => l,
            Err(e) => {
                let _ = write!(
                    b,
                    "<p class=\"error\">the hold spool could not be read: {}</p>",
                    html::text(&e.to_string(), 300)
                );
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    let held_count =
        held.iter().filter(|h| h.envelope.key == key).count() + super::held_postfix::count(c, key);
    let recent = recent(c, key).await;
    if shell.actions {
        b.push_str(&actions(key, restricted.is_some(), held_count, shell));
    }
    b.push_str("<h2>Evidence</h2>");
    let evidence = match (&restricted, &c.state.policy) {
        (Some(r), _) if !r.evidence.is_null() => Some(r.evidence.clone()),
        (_, Some(p)) => Some(p.evidence(&[key])),
        _ => None,
    };
    let empty = Recent::default();
    let known = known_clients(key, recent.as_ref().unwrap_or(&empty), &held);
    match evidence {
        Some(e) => {
            if restricted.is_some() {
                b.push_str(
                    "<p class=\"muted\">What this node saw of the key up to its restriction.</p>",
                );
            } else {
                b.push_str("<p class=\"muted\">What this node saw of the key recently.</p>");
            }
            b.push_str(&evidence::table(&e, &known));
        }
        None => b.push_str("<p class=\"muted\">No evidence kept here.</p>"),
    }
    b.push_str("<h2>Held mail</h2>");
    b.push_str(&held_table(key, &held));
    b.push_str("<h2>Recent messages</h2>");
    match &recent {
        Ok(r) => b.push_str(&transactions_table(r)),
        Err(why) => {
            let _ = write!(b, "<p class=\"muted\" id=\"no-transactions\">{why}</p>");
        }
    }
    b.push_str("<h2>Every limit's reading</h2>");
    b.push_str(&readings(v["limits"].as_array().map_or(&[][..], |a| a)));
    if shell.actions {
        b.push_str(html::NOSCRIPT);
        let _ = write!(
            b,
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
    b.push_str("<h2>Last hour</h2>");
    b.push_str(&history(c, key).await);
    html_response(200, html::page("Incident", Nav::Key, shell, &b))
}

/// The key's last hour from the event log, as a chart with one line per limit.
async fn history(c: &Console, key: &str) -> String {
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
