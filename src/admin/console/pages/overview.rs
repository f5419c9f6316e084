//! The overview: first what needs action (restricted keys and open campaigns, newest
//! first, each with since, limit, held now, delivered before and a link to its page), then
//! what is happening now and over the last 1, 6 or 24 hours (`?range=1h|6h|24h`), the
//! latest containments (repeats grouped, held counts live), and the store's health. The
//! page reloads itself every [`REFRESH_SECS`] (no script needed) and has a refresh link.

use std::fmt::Write as _;

use crate::admin::console::history::{minute_of, LimitHour, Range};
use std::collections::HashMap;

use serde_json::Value;

use crate::admin::console::figures;
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::http::{Request, Response};
use crate::policy::alert::Contained;
use crate::policy::model::{Action, LimitDef};
use crate::report::svg::{line_chart, Line, LineChart, Look, Points};
use crate::store::open::Opened;
use crate::store::{Restriction, StoreError};

/// How often the page reloads itself, seconds.
pub const REFRESH_SECS: u32 = 60;
/// Most rows in the feed of latest containments (each a run of one key's), and in the
/// block of what needs action.
pub const FEED: usize = 20;

/// The series of the range shown, read off the console's history.
struct Window<'a> {
    /// The range.
    range: Range,
    /// Messages sent per point.
    messages: Vec<f64>,
    /// Relayed, released from hold, notices: totals over the range.
    sent: (u64, u64, u64),
    /// Sessions admitted per point.
    sessions: Vec<f64>,
    /// Each limit's deferrals and overs.
    limits: Vec<LimitHour>,
    /// The limits whose action defers (the deferral chart and totals).
    deferring: Vec<&'a str>,
}

/// The range `?range=` asks for (the last hour when absent), or the page's answer to a
/// range it does not know.
fn range_of(req: &Request, shell: &Shell<'_>) -> Result<Range, Response> {
    match req.param("range") {
        None => Ok(Range::Hour),
        Some(v) => Range::parse(v).ok_or_else(|| {
            error_page(
                400,
                &format!(
                    "range must be 1h, 6h or 24h, not {:?}",
                    v.chars().take(40).collect::<String>()
                ),
                shell,
            )
        }),
    }
}

/// `GET /console/?range=1h|6h|24h`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let range = match range_of(req, shell) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let config = c.state.control.generation();
    let metrics = &c.state.metrics;
    let now = minute_of(crate::store::now_micros());
    c.history.sample(metrics, &config, now);
    let deferring: Vec<&str> = config
        .policy
        .limits
        .iter()
        .filter(|d| d.action == Action::Defer)
        .map(|d| d.name.as_str())
        .collect();
    let names: Vec<&str> = config
        .policy
        .limits
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let w = {
        let h = c.history.lock();
        Window {
            range,
            messages: h.messages(now, range),
            sent: h.sent(now, range),
            sessions: h.sessions(now, range),
            limits: h.limits(now, range, &names),
            deferring,
        }
    };
    let restricted = c.state.store.as_store().restrictions().await;
    let held = figures::held_counts(c).await;
    let campaigns = c.state.campaign_list().await.unwrap_or_default();
    let counts = held.as_ref().cloned().unwrap_or_default();
    let mut b = String::with_capacity(16 * 1024);
    b.push_str(&needs_action(
        restricted.as_deref().unwrap_or(&[]),
        &campaigns,
        &counts,
    ));
    if let Err(e) = &held {
        let _ = write!(
            b,
            "<p class=\"error\">the hold spool could not be read: {e}</p>"
        );
    }
    b.push_str(&range_nav(range));
    b.push_str(&cards(&w, metrics, &restricted));
    b.push_str(&charts(&w, now));
    b.push_str("<h2>Latest restrictions, holds and deferrals</h2>");
    let recent = c
        .state
        .observer
        .as_ref()
        .map(|o| o.recent_contained(crate::report::RECENT_CONTAINED))
        .unwrap_or_default();
    b.push_str(&feed(recent, restricted.as_deref().unwrap_or(&[]), &counts));
    b.push_str(&limits_table(&config.policy.limits, &w));
    b.push_str("<h2>Store</h2>");
    b.push_str(&store_health(&c.state.store, metrics));
    if let Err(e) = &restricted {
        let _ = write!(
            b,
            "<p class=\"error\">the restricted set could not be read: {}</p>",
            html::text(&e.to_string(), 500)
        );
    }
    html_response(
        200,
        html::page_refreshing("Overview", Nav::Overview, shell, &b, Some(REFRESH_SECS)),
    )
}

/// The links to the other ranges and the refresh link.
fn range_nav(range: Range) -> String {
    let mut b = String::new();
    b.push_str("<p class=\"range\" id=\"range\">");
    for r in Range::ALL {
        let href = html::url("/console/", &[("range", r.as_str())]);
        if r == range {
            let _ = write!(b, "<strong aria-current=\"true\">{}</strong> ", r.as_str());
        } else {
            let _ = write!(b, "<a href=\"{href}\">{}</a> ", r.as_str());
        }
    }
    let _ = write!(
        b,
        "· <a id=\"refresh\" href=\"{}\">refresh</a> \
         <span class=\"muted\">(the page reloads itself every minute)</span></p>",
        html::url("/console/", &[("range", range.as_str())])
    );
    b
}

/// The cards of counts: sessions, messages, deferrals, restricted keys, held messages.
fn cards(
    w: &Window<'_>,
    metrics: &crate::admin::Metrics,
    restricted: &Result<Vec<Restriction>, StoreError>,
) -> String {
    let words = w.range.words();
    let mut b = String::new();
    b.push_str("<dl class=\"cards\">");
    let mut card = |label: &str, value: String| {
        let _ = write!(b, "<div><dt>{label}</dt><dd>{value}</dd></div>");
    };
    card("sessions open", metrics.sessions_open.get().to_string());
    card(
        &format!("sessions, {words}"),
        html::num(w.sessions.iter().sum::<f64>()),
    );
    let (relayed, released, notices) = w.sent;
    card(
        &format!("messages, {words}"),
        format!(
            "<span id=\"messages-sent\">{}</span> <small>({relayed} relayed, {released} \
             released from hold, {notices} notices)</small>",
            relayed + released + notices
        ),
    );
    card(
        "messages, this minute",
        html::num(w.messages.last().copied().unwrap_or(0.0)),
    );
    card(
        &format!("deferrals, {words}"),
        w.limits
            .iter()
            .filter(|l| w.deferring.contains(&l.name.as_str()))
            .map(|l| l.total_deferred)
            .sum::<u64>()
            .to_string(),
    );
    card(
        "restricted keys",
        match restricted {
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
    b
}

/// The charts of the range: messages and sessions, deferrals by limit.
fn charts(w: &Window<'_>, now: i64) -> String {
    let words = w.range.words();
    let mut b = String::new();
    let labels = range_labels(now, w.range);
    let per = if w.range.step() == 1 {
        "per minute".to_string()
    } else {
        format!("per {} minutes", w.range.step())
    };
    let _ = write!(b, "<h2>Messages and sessions {per}</h2>");
    let title = format!("Messages sent and sessions admitted {per}, {words}");
    b.push_str(&line_chart(&LineChart {
        title: &title,
        look: Look::Console {
            width: 760,
            height: 200,
            points: w.messages.len(),
            x_labels: labels.clone(),
        },
        lines: &[
            Line {
                name: "messages",
                points: Points::Spaced(&w.messages),
            },
            Line {
                name: "sessions",
                points: Points::Spaced(&w.sessions),
            },
        ],
    }));
    let _ = write!(b, "<h2>Deferrals {per}, by limit</h2>");
    let title = format!("Deferrals {per} by limit (limits whose action is defer), {words}");
    let deferrals: Vec<Line<'_>> = w
        .limits
        .iter()
        .filter(|l| w.deferring.contains(&l.name.as_str()))
        .map(|l| Line {
            name: &l.name,
            points: Points::Spaced(&l.deferred),
        })
        .collect();
    b.push_str(&line_chart(&LineChart {
        title: &title,
        look: Look::Console {
            width: 760,
            height: 200,
            points: w.messages.len(),
            x_labels: labels,
        },
        lines: &deferrals,
    }));
    b
}

/// The table of limits: each one's action, deferrals and overs over the range.
fn limits_table(defs: &[LimitDef], w: &Window<'_>) -> String {
    let words = w.range.words();
    let mut b = String::new();
    let _ = write!(
        b,
        "<h2>Limits</h2><table class=\"stack\"><thead><tr><th>limit</th><th>action</th>\
         <th class=\"n\">deferrals, {words}</th><th class=\"n\">over the limit, {words} \
         (any action)</th></tr></thead><tbody>"
    );
    for (def, l) in defs.iter().zip(&w.limits) {
        let _ = write!(
            b,
            "<tr><td data-label=\"limit\"><a href=\"{}\">{}</a></td><td data-label=\"action\">{}</td>\
             <td class=\"n\" data-label=\"deferrals\">{}</td>\
             <td class=\"n\" data-label=\"over the limit\">{}</td></tr>",
            html::url("/console/top", &[("limit", &def.name)]),
            html::text(&def.name, html::CELL_CHARS),
            def.action.as_str(),
            l.total_deferred,
            l.total_over
        );
    }
    if defs.is_empty() {
        b.push_str("<tr><td colspan=\"4\" class=\"muted\">no limits configured</td></tr>");
    }
    b.push_str("</tbody></table>");
    b
}

/// The labels under a range's time axis ending at minute `now`: its first point, the
/// middle and `now`.
fn range_labels(now: i64, range: Range) -> Vec<(usize, String)> {
    let n = range.points();
    let first = now - range.minutes() as i64 + 1;
    let at = |i: usize| first + (i * range.step()) as i64;
    vec![
        (0, super::clock(at(0))),
        (n / 2, super::clock(at(n / 2))),
        (n - 1, format!("{} UTC", super::clock(now))),
    ]
}

/// One row of the feed: a run of one kind of containment of one key under one limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedRow {
    /// `restricted`, `held` or `defer`.
    pub what: String,
    /// The key.
    pub key: String,
    /// The limit.
    pub limit: String,
    /// The newest and the oldest time of the run (µs).
    pub last_us: i64,
    /// The oldest.
    pub first_us: i64,
    /// How many.
    pub count: usize,
}

/// `recent` (newest first) with runs of the same kind, key and limit made one row, at
/// most `max` rows.
pub fn group(recent: &[Contained], max: usize) -> Vec<FeedRow> {
    let mut rows: Vec<FeedRow> = Vec::new();
    for c in recent {
        if let Some(last) = rows
            .last_mut()
            .filter(|r| r.what == c.what && r.key == c.key && r.limit == c.limit)
        {
            last.count += 1;
            last.first_us = c.time_us;
            continue;
        }
        if rows.len() == max {
            break;
        }
        rows.push(FeedRow {
            what: c.what.clone(),
            key: c.key.clone(),
            limit: c.limit.clone(),
            last_us: c.time_us,
            first_us: c.time_us,
            count: 1,
        });
    }
    rows
}

/// What a feed row says happened, in words; `held_now`: the key's messages held now (a run
/// of holds says how many are still held, after releases and deletes).
pub fn feed_words(r: &FeedRow, held_now: usize) -> String {
    match (r.what.as_str(), r.count) {
        ("held", n) => format!(
            "{n} held{}",
            if held_now < n {
                format!(", {held_now} still held")
            } else {
                String::new()
            }
        ),
        ("defer", 1) => "deferred".into(),
        ("defer", n) => format!("{n} deferred"),
        (what, 1) => what.to_string(),
        (what, n) => format!("{what} ×{n}"),
    }
}

/// The latest containments, newest first, at most [`FEED`] rows: this node's holds and
/// deferrals (and restrictions it saw) with every restriction in force, runs of one key's
/// grouped, each key linking to its page.
fn feed(
    mut recent: Vec<Contained>,
    restricted: &[crate::store::Restriction],
    held: &HashMap<String, usize>,
) -> String {
    for r in restricted {
        let seen = recent
            .iter()
            .any(|c| c.what == "restricted" && c.key == r.key && c.limit == r.limit);
        if !seen {
            recent.push(Contained {
                what: "restricted".into(),
                limit: r.limit.clone(),
                key: r.key.clone(),
                time_us: r.since_us,
            });
        }
    }
    recent.sort_by(|a, b| b.time_us.cmp(&a.time_us).then_with(|| a.key.cmp(&b.key)));
    let rows = group(&recent, FEED);
    if rows.is_empty() {
        return "<p class=\"muted\" id=\"feed\">Nothing restricted, held or deferred \
                since floodgate started.</p>"
            .into();
    }
    let mut out = String::from(
        "<table id=\"feed\" class=\"stack\"><thead><tr><th>when</th><th>what</th>\
         <th>key</th><th>limit</th></tr></thead><tbody>",
    );
    for r in &rows {
        let (first, last) = (super::when(r.first_us), super::when(r.last_us));
        let when = if first == last {
            last
        } else {
            format!("{first}–{}", last.get(11..).unwrap_or(""))
        };
        let _ = write!(
            out,
            "<tr data-row><td data-label=\"when\">{when}</td><td data-label=\"what\">{}</td>\
             <td data-label=\"key\">{}</td><td data-label=\"limit\">{}</td></tr>",
            html::escape(&feed_words(r, held.get(&r.key).copied().unwrap_or(0))),
            html::key_link(&r.key),
            html::text(&r.limit, html::CELL_CHARS)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The block that comes first: restricted keys and open campaigns, newest first, each
/// with since, limit, held now, what got out before and a link to its page.
fn needs_action(
    restricted: &[crate::store::Restriction],
    campaigns: &[Value],
    held: &HashMap<String, usize>,
) -> String {
    if restricted.is_empty() && campaigns.is_empty() {
        return "<section class=\"needs calm\" id=\"needs\"><h2>Needs action</h2>\
                <p class=\"muted\">Nothing: no key is restricted and no campaign is open.</p>\
                </section>"
            .into();
    }
    let mut rs: Vec<&crate::store::Restriction> = restricted.iter().collect();
    rs.sort_by(|a, b| b.since_us.cmp(&a.since_us).then_with(|| a.key.cmp(&b.key)));
    let mut out = String::from(
        "<section class=\"needs\" id=\"needs\"><h2>Needs action</h2>\
         <table class=\"stack\" id=\"needs-table\"><thead><tr><th>what</th><th>since</th>\
         <th>limit</th><th class=\"n\">held now</th><th>delivered before</th><th></th>\
         </tr></thead><tbody>",
    );
    for r in rs.iter().take(FEED) {
        let delivered = figures::delivered_before(&r.evidence).map_or_else(
            || "<span class=\"muted\">not known</span>".into(),
            |d| d.words(),
        );
        let _ = write!(
            out,
            "<tr data-row class=\"restricted\"><td data-label=\"what\">restricted: {}</td>\
             <td data-label=\"since\">{}</td><td data-label=\"limit\">{}</td>\
             <td class=\"n\" data-label=\"held now\">{}</td>\
             <td data-label=\"delivered before\">{delivered}</td>\
             <td><a href=\"{}\">open the incident</a></td></tr>",
            html::key_link(&r.key),
            super::when(r.since_us),
            html::text(&r.limit, 60),
            held.get(&r.key).copied().unwrap_or(0),
            html::key_url(&r.key),
        );
    }
    if rs.len() > FEED {
        let _ = write!(
            out,
            "<tr><td colspan=\"6\"><a href=\"/console/restricted\">and {} more restricted \
             keys</a></td></tr>",
            rs.len() - FEED
        );
    }
    for c in campaigns.iter().take(FEED) {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let id = s(&c["message_key"]);
        let accounts = c["accounts"].as_array().map_or(0, Vec::len);
        let held_now: usize = c["accounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["key"].as_str())
            .map(|k| held.get(k).copied().unwrap_or(0))
            .sum();
        let _ = write!(
            out,
            "<tr data-row class=\"campaign-row\"><td data-label=\"what\">campaign: {} \
             <small>({accounts} accounts, {} copies)</small></td>\
             <td data-label=\"since\">{}</td><td data-label=\"limit\">{}</td>\
             <td class=\"n\" data-label=\"held now\">{held_now}</td>\
             <td data-label=\"delivered before\"><span class=\"muted\">per account</span></td>\
             <td><a href=\"{}\">open the campaign</a></td></tr>",
            html::text(&s(&c["subject"]), 80),
            c["copies"].as_u64().unwrap_or(0),
            html::text(&super::whole_seconds(&s(&c["since"])), 40),
            html::text(&s(&c["limit"]), 60),
            html::url("/console/campaigns", &[("c", &id)]),
        );
    }
    out.push_str("</tbody></table></section>");
    out
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
            rows.push((
                "memory",
                format!("about {}", html::size(s.approx_bytes as u64)),
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn c(what: &str, key: &str, t: i64) -> Contained {
        Contained {
            what: what.into(),
            limit: "per-user".into(),
            key: key.into(),
            time_us: t,
        }
    }

    #[test]
    fn repeats_are_one_row_and_held_counts_follow_the_spool() {
        let recent = [
            c("held", "k.harper", 9),
            c("held", "k.harper", 8),
            c("held", "k.harper", 7),
            c("restricted", "k.harper", 6),
            c("held", "bob", 5),
            c("defer", "bob", 4),
            c("defer", "bob", 3),
        ];
        let rows = group(&recent, 10);
        assert_eq!(rows.len(), 4, "{rows:#?}");
        assert_eq!(
            (rows[0].count, rows[0].first_us, rows[0].last_us),
            (3, 7, 9)
        );
        assert_eq!(feed_words(&rows[0], 3), "3 held");
        assert_eq!(feed_words(&rows[0], 1), "3 held, 1 still held");
        assert_eq!(feed_words(&rows[1], 0), "restricted");
        assert_eq!(feed_words(&rows[3], 0), "2 deferred");
        // At most `max` rows; the restriction is not pushed out by its own holds.
        assert_eq!(group(&recent, 2).len(), 2);
        assert_eq!(group(&recent, 2)[1].what, "restricted");
    }

    #[test]
    fn needs_action_lists_restrictions_newest_first() {
        let r = |key: &str, since: i64| crate::store::Restriction {
            key: key.into(),
            limit: "per-user".into(),
            since_us: since,
            until_us: None,
            rate: None,
            limit_text: String::new(),
            by: "limit".into(),
            reason: String::new(),
            evidence: serde_json::json!({"messages": 12, "recipients": 111}),
        };
        let held: HashMap<String, usize> = [("new<x>".to_string(), 44)].into();
        let h = needs_action(&[r("old", 1), r("new<x>", 2_000_000)], &[], &held);
        assert!(
            h.find("new&lt;x&gt;").unwrap() < h.find("old").unwrap(),
            "{h}"
        );
        assert!(h.contains(">44</td>"), "{h}");
        assert!(h.contains("12 messages to 111 recipients"), "{h}");
        assert!(h.contains("/console/key/new%3Cx%3E"), "{h}");
        assert!(needs_action(&[], &[], &held).contains("Nothing"));
        assert_eq!(
            super::super::whole_seconds("2026-12-07T06:26:20.338479Z"),
            "2026-12-07T06:26:20Z"
        );
        assert_eq!(super::super::whole_seconds("x"), "x");
    }
}
