//! `floodgate report --html`: the report as one self-contained HTML page. Per limit, the
//! histogram of the per-key peaks with the suggested and the configured limit drawn on it,
//! and the rate (or bucket level) over time of the top keys; inline SVG and CSS only, no
//! script, nothing loaded from elsewhere.
//!
//! The charts need more than the [`Report`] keeps (every key's peak, the top keys' values
//! over time): [`collect`] replays the event log a second time with the report's top keys
//! known, through [`analyze_traced`].

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::BufRead;

use super::analyze::{analyze_traced, LimitReport, Options, Report, ReportError, Traced, HEADROOM};
use super::markup::escape;
use super::render::num;
use super::svg::{self, truncate, Line, Marker, Points};
use crate::policy::model::PolicyModel;
use crate::time::rfc3339;

/// Points per key on the rate-over-time chart (the period is cut in this many equal
/// slices; each point is the key's highest value in its slice).
pub const SLICES: usize = 240;
/// Bins of the peak histogram.
pub const HISTOGRAM_BINS: usize = 40;
/// Keys and limit names are cut to this many characters in tables.
pub const NAME_CHARS: usize = 80;

/// The values over time of one key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The key.
    pub key: String,
    /// `(start of the slice µs, highest value in it)`, in time order, slices without
    /// events left out.
    pub points: Vec<(i64, f64)>,
}

/// What the charts of one limit are drawn from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitCharts {
    /// The peak of every key without its own limit (the keys the suggestion is about).
    pub peaks: Vec<f64>,
    /// The report's top keys over time, in the report's order.
    pub series: Vec<Series>,
}

/// The chart data of a report, one entry per [`Report::limits`] entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Charts {
    /// Per limit.
    pub limits: Vec<LimitCharts>,
}

/// Per-key state while replaying.
struct Seen {
    peak: f64,
    own_limit: Option<f64>,
}

/// Replays `input` (the event log `report` was made from, with the same `opts`) and
/// gathers the charts' data.
pub fn collect(
    model: &PolicyModel,
    source: &str,
    input: impl BufRead,
    opts: &Options,
    report: &Report,
) -> Result<Charts, ReportError> {
    let t0 = report.first_us.unwrap_or(0);
    let t1 = report.last_us.unwrap_or(t0).max(t0);
    let slice = ((t1 - t0) / SLICES as i64).max(1);
    let mut seen: Vec<HashMap<String, Seen>> =
        report.limits.iter().map(|_| HashMap::new()).collect();
    // Per limit: top key -> its slices' highest values.
    let mut top: Vec<HashMap<&str, Vec<Option<f64>>>> = report
        .limits
        .iter()
        .map(|l| {
            l.top
                .iter()
                .map(|k| (k.key.as_str(), vec![None; SLICES + 1]))
                .collect()
        })
        .collect();
    analyze_traced(model, source, input, opts, &mut |t: &Traced<'_>| {
        let Some(keys) = seen.get_mut(t.limit) else {
            return;
        };
        match keys.get_mut(t.key) {
            Some(s) => {
                s.peak = s.peak.max(t.value);
                s.own_limit = t.own_limit;
            }
            None => {
                keys.insert(
                    t.key.to_string(),
                    Seen {
                        peak: t.value,
                        own_limit: t.own_limit,
                    },
                );
            }
        }
        if let Some(slices) = top[t.limit].get_mut(t.key) {
            let i = ((t.time_us - t0).max(0) / slice).min(SLICES as i64) as usize;
            let v = &mut slices[i];
            *v = Some(v.map_or(t.value, |old| old.max(t.value)));
        }
    })?;
    let limits = report
        .limits
        .iter()
        .zip(seen)
        .zip(top.iter_mut())
        .map(|((l, keys), top)| LimitCharts {
            peaks: keys
                .into_values()
                .filter(|s| s.own_limit.is_none())
                .map(|s| s.peak)
                .collect(),
            series: l
                .top
                .iter()
                .map(|k| Series {
                    key: k.key.clone(),
                    points: top
                        .remove(k.key.as_str())
                        .unwrap_or_default()
                        .into_iter()
                        .enumerate()
                        .filter_map(|(i, v)| Some((t0 + slice * i as i64, v?)))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    Ok(Charts { limits })
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:960px}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:.5em 0}td,th{padding:2px 8px;text-align:left;\
border-bottom:1px solid #eee}td.n{text-align:right;font-variant-numeric:tabular-nums}\
svg{display:block;margin:.5em 0;background:#fafafa;border:1px solid #ddd}\
svg text{font-size:11px;fill:#333}svg .marker.suggested{stroke:#2ca02c}\
svg .marker.configured{stroke:#d62728}svg .label.suggested{fill:#2ca02c}\
svg .label.configured{fill:#d62728}.note{color:#666}\
tr.contained td,p.capped,p.contained{color:#a40000}";

/// The report and its charts as one HTML page.
pub fn page(report: &Report, charts: &Charts) -> String {
    let mut o = String::with_capacity(16_384);
    let when = |t: Option<i64>, none: &str| t.map_or(none.to_string(), rfc3339);
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>floodgate report: {}</title><style>{STYLE}</style></head><body>",
        escape(&truncate(&report.source, NAME_CHARS))
    );
    let _ = write!(
        o,
        "<h1>floodgate report of {}</h1><p>{} .. {}: {} events from {} to {} ({} lines read, {} outside the period, {} of limits not reported on)</p>",
        escape(&truncate(&report.source, NAME_CHARS)),
        escape(&when(report.since_us, "the beginning")),
        escape(&when(report.until_us, "the end")),
        report.events,
        escape(&when(report.first_us, "-")),
        escape(&when(report.last_us, "-")),
        report.lines,
        report.outside,
        report.unknown_limit
    );
    let empty = LimitCharts::default();
    for (i, l) in report.limits.iter().enumerate() {
        let c = charts.limits.get(i).unwrap_or(&empty);
        let name = escape(&truncate(&l.name, NAME_CHARS));
        let _ = write!(
            o,
            "<section class=\"limit\" data-limit=\"{}\"><h2>limit {name}</h2><p>{} {}, period {}, action {}: {} events, {} keys ({} with their own limit)</p>",
            escape(&l.name),
            escape(&l.algorithm),
            num(l.configured),
            escape(&l.period),
            escape(&l.action),
            l.events,
            l.keys,
            l.own_limit_keys
        );
        let _ = write!(
            o,
            "<table class=\"summary\"><tr><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>suggested</th><th>configured</th><th>keys over it</th></tr><tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr></table>",
            num(l.p50),
            num(l.p90),
            num(l.p99),
            num(l.max),
            num(l.suggested),
            num(l.configured),
            l.over_configured
        );
        charts_of(&mut o, report, l, c);
        contained_notes(&mut o, l);
        top_table(&mut o, l);
        o.push_str("</section>");
    }
    o.push_str("</body></html>\n");
    o
}

/// A limit's charts: the histogram of its keys' peaks with the suggested and configured
/// values marked, and its keys' lines over time.
fn charts_of(o: &mut String, report: &Report, l: &LimitReport, c: &LimitCharts) {
    let mut markers = vec![Marker {
        value: l.configured,
        label: "configured",
        class: "configured",
    }];
    if !c.peaks.is_empty() {
        markers.insert(
            0,
            Marker {
                value: l.suggested,
                label: "suggested",
                class: "suggested",
            },
        );
    }
    o.push_str(&svg::histogram(
        &l.name,
        &c.peaks,
        HISTOGRAM_BINS,
        &markers,
        &l.unit,
    ));
    if c.series.is_empty() {
        o.push_str("<p class=\"note\">no key without its own limit: nothing to draw over time</p>");
    } else {
        let lines: Vec<Line<'_>> = c
            .series
            .iter()
            .map(|s| Line {
                name: &s.key,
                points: Points::Timed(&s.points),
            })
            .collect();
        o.push_str(&svg::lines(
            &l.name,
            report.first_us.unwrap_or(0),
            report.last_us.unwrap_or(0),
            &lines,
            l.configured,
            "configured",
            &l.unit,
        ));
    }
}

/// What the suggestion is capped by, and the keys contained in the period.
fn contained_notes(o: &mut String, l: &LimitReport) {
    if let Some(key) = &l.capped_by {
        let _ = write!(
            o,
            "<p class=\"capped\">The suggestion is held under the peak of <strong>{}</strong>, \
             a contained key: {} × the highest ordinary peak would have let it through.</p>",
            escape(&truncate(key, NAME_CHARS)),
            num(HEADROOM)
        );
    }
    if !l.contained.is_empty() {
        let _ = write!(
            o,
            "<p class=\"contained\">Contained (restricted or held) in the period: {}</p>",
            l.contained
                .iter()
                .map(|k| format!(
                    "<strong>{}</strong> ({}, peak {})",
                    escape(&truncate(&k.key, NAME_CHARS)),
                    escape(k.contained.as_deref().unwrap_or("")),
                    num(k.peak)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// The table of a limit's top keys by peak.
fn top_table(o: &mut String, l: &LimitReport) {
    if !l.top.is_empty() {
        o.push_str("<table class=\"top\"><tr><th>peak</th><th>events</th><th>key</th><th>contained</th></tr>");
        for k in &l.top {
            let (class, how) = match k.contained.as_deref() {
                Some(how) => (" class=\"contained\"", escape(how)),
                None => ("", String::new()),
            };
            let _ = write!(
                o,
                "<tr{class}><td class=\"n\">{}</td><td class=\"n\">{}</td><td title=\"{}\">{}</td><td>{how}</td></tr>",
                num(k.peak),
                k.events,
                escape(&truncate(&k.key, 1000)),
                escape(&truncate(&k.key, NAME_CHARS))
            );
        }
        o.push_str("</table>");
    }
}

#[cfg(test)]
mod tests;
