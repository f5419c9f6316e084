//! The overview: what is happening now and over the last hour, and the store's health.

use std::fmt::Write as _;

use crate::admin::console::history::minute_of;
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::html_response;
use crate::admin::console::state::Console;
use crate::admin::console::svg::{line_chart, Chart, Series};
use crate::admin::http::Response;
use crate::store::open::Opened;

/// `GET /console/`.
pub async fn page(c: &Console, shell: &Shell<'_>) -> Response {
    let config = c.state.control.generation();
    let metrics = &c.state.metrics;
    let now = minute_of(crate::store::now_micros());
    c.history.sample(metrics, &config, now);
    let names: Vec<&str> = config
        .policy
        .limits
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let (messages, sessions, limits) = {
        let h = c.history.lock();
        (h.messages(now), h.sessions(now), h.limits(now, &names))
    };
    let restricted = c.state.store.as_store().restrictions().await;
    let mut b = String::with_capacity(16 * 1024);

    b.push_str("<dl class=\"cards\">");
    let mut card = |label: &str, value: String| {
        let _ = write!(b, "<div><dt>{label}</dt><dd>{value}</dd></div>");
    };
    card("sessions open", metrics.sessions_open.get().to_string());
    card(
        "sessions, last hour",
        html::num(sessions.iter().sum::<f64>()),
    );
    card(
        "messages, last hour",
        html::num(messages.iter().sum::<f64>()),
    );
    card(
        "messages, this minute",
        html::num(messages.last().copied().unwrap_or(0.0)),
    );
    card(
        "deferrals, last hour",
        limits
            .iter()
            .map(|l| l.total_deferred)
            .sum::<u64>()
            .to_string(),
    );
    card(
        "restricted keys",
        match &restricted {
            Ok(r) => format!("<a href=\"/console/restricted\">{}</a>", r.len()),
            Err(_) => "?".into(),
        },
    );
    card(
        "held messages",
        format!(
            "<a href=\"/console/held\">{}</a>",
            metrics.hold.messages.get()
        ),
    );
    b.push_str("</dl>");

    let labels = super::hour_labels(now);
    b.push_str("<h2>Messages and sessions per minute</h2>");
    b.push_str(&line_chart(&Chart {
        title: "Messages relayed and sessions admitted per minute, last hour",
        width: 760,
        height: 200,
        points: messages.len(),
        x_labels: labels.clone(),
        series: vec![
            Series {
                name: "messages",
                values: &messages,
            },
            Series {
                name: "sessions",
                values: &sessions,
            },
        ],
    }));
    b.push_str("<h2>Deferrals per minute, by limit</h2>");
    b.push_str(&line_chart(&Chart {
        title: "Deferrals per minute by limit, last hour",
        width: 760,
        height: 200,
        points: messages.len(),
        x_labels: labels,
        series: limits
            .iter()
            .map(|l| Series {
                name: &l.name,
                values: &l.deferred,
            })
            .collect(),
    }));

    b.push_str(
        "<h2>Limits</h2><table><thead><tr><th>limit</th><th>action</th>\
         <th class=\"n\">deferrals, last hour</th><th class=\"n\">over the limit, last hour \
         (any action)</th></tr></thead><tbody>",
    );
    for (def, l) in config.policy.limits.iter().zip(&limits) {
        let _ = write!(
            b,
            "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            html::url("/console/top", &[("limit", &def.name)]),
            html::text(&def.name, html::CELL_CHARS),
            def.action.as_str(),
            l.total_deferred,
            l.total_over
        );
    }
    if config.policy.limits.is_empty() {
        b.push_str("<tr><td colspan=\"4\" class=\"muted\">no limits configured</td></tr>");
    }
    b.push_str("</tbody></table>");

    b.push_str("<h2>Store</h2>");
    b.push_str(&store_health(&c.state.store, metrics));
    if let Err(e) = &restricted {
        let _ = write!(
            b,
            "<p class=\"error\">the restricted set could not be read: {}</p>",
            html::text(&e.to_string(), 500)
        );
    }
    html_response(200, html::page("Overview", Nav::Overview, shell, &b))
}

/// The store's kind, health and failure mode, as a definition list.
fn store_health(store: &Opened, metrics: &crate::admin::Metrics) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    match store {
        Opened::Memory(m) => {
            let s = m.stats();
            rows.push(("backend", "memory (this process)".into()));
            rows.push(("health", "ok (in process: it cannot be unreachable)".into()));
            rows.push((
                "failure mode",
                "none needed (failure modes apply to Redis)".into(),
            ));
            rows.push((
                "keys",
                format!(
                    "{} (ewma {}, unique {}, gcra {}, bucket {})",
                    s.ewma_keys + s.unique_keys + s.gcra_keys + s.bucket_keys,
                    s.ewma_keys,
                    s.unique_keys,
                    s.gcra_keys,
                    s.bucket_keys
                ),
            ));
            rows.push(("memory", format!("about {}", html::size(s.approx_bytes as u64))));
            rows.push(("evictions (key cap)", s.evictions.to_string()));
        }
        Opened::Redis(f) => {
            let s = f.stats();
            let p = f.policy();
            rows.push(("backend", "Redis".into()));
            rows.push((
                "health",
                if s.down {
                    format!(
                        "<span class=\"over\">DOWN: the failure mode ({}) decides now</span>",
                        p.default.as_str()
                    )
                } else {
                    "up".into()
                },
            ));
            let mut mode = html::escape(p.default.as_str());
            for (prefix, m) in &p.overrides {
                let _ = write!(mode, "; keys {}… {}", html::text(prefix, 60), m.as_str());
            }
            rows.push(("failure mode", mode));
            rows.push((
                "decisions",
                format!(
                    "{} by Redis, {} by the failure mode, {} refused (closed)",
                    s.redis_decisions, s.fallback_decisions, s.closed_failures
                ),
            ));
            rows.push(("Redis errors", s.redis_errors.to_string()));
            rows.push((
                "switches",
                format!(
                    "{} to the failure mode, {} back to Redis",
                    s.switches_to_fallback, s.switches_to_redis
                ),
            ));
        }
    }
    rows.push((
        "store errors",
        format!(
            "{} unavailable, {} invalid, of {} decisions",
            metrics.store_errors_of("unavailable"),
            metrics.store_errors_of("invalid"),
            metrics.store_decisions.get()
        ),
    ));
    let mut out = String::from("<dl class=\"evidence\" id=\"store\">");
    for (k, v) in rows {
        let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
    }
    out.push_str("</dl>");
    out
}
