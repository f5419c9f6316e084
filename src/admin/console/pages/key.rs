//! One key: every limit's reading of it (as `floodgate inspect` shows), whether it is
//! restricted, its last hour from the event log as a chart, and a reset button.

use std::fmt::Write as _;

use serde_json::Value;

use crate::admin::console::history::{minute_of, MINUTES};
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::keylog;
use crate::admin::console::respond::{api, error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::console::svg::{line_chart, meter, Chart, Series};
use crate::admin::http::{Request, Response};

/// The table of readings from `/v1/inspect`'s `limits`.
fn readings(limits: &[Value]) -> String {
    let mut b = String::from(
        "<table id=\"readings\"><thead><tr><th>limit</th><th>algorithm</th>\
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
            "<tr{}><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td>{}</td><td>{}</td><td class=\"n\">{}</td><td><small>{}</small></td></tr>",
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

/// `GET /console/key?k=KEY`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let Some(key) = req.param("k").filter(|k| !k.is_empty()) else {
        return error_page(400, "which key? /console/key?k=KEY", shell);
    };
    let (status, v) = api(c, "GET", "/v1/inspect", &[("key", key)]).await;
    if status != 200 {
        let e = v["error"].as_str().unwrap_or("inspect failed").to_string();
        return error_page(status, &e, shell);
    }
    let mut b = String::with_capacity(16 * 1024);
    let _ = write!(
        b,
        "<p>Key <strong class=\"wrap\" id=\"key\">{}</strong></p>",
        html::text(key, 1000)
    );
    match c.state.store.as_store().restrictions().await {
        Ok(list) => match list.iter().find(|r| r.key == key) {
            Some(r) => {
                let _ = write!(
                    b,
                    "<p class=\"over\">Restricted by {} since {} ({}). \
                     <a href=\"/console/restricted\">Restricted keys</a></p>",
                    html::text(&r.by, html::CELL_CHARS),
                    super::when(r.since_us),
                    r.until_us.map_or_else(
                        || "until released".into(),
                        |u| { format!("until {}", super::when(u)) }
                    )
                );
            }
            None => b.push_str("<p class=\"muted\">Not restricted.</p>"),
        },
        Err(e) => {
            let _ = write!(
                b,
                "<p class=\"error\">restrictions unreadable: {}</p>",
                html::text(&e.to_string(), 300)
            );
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
    html_response(200, html::page("Key", Nav::Key, shell, &b))
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
    let series: Vec<Series<'_>> = h
        .limits
        .iter()
        .map(|(name, values)| Series { name, values })
        .collect();
    let mut out = line_chart(&Chart {
        title: "Amount offered to each limit per minute, last hour (event log)",
        width: 760,
        height: 180,
        points: MINUTES,
        x_labels: super::hour_labels(now),
        series,
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
