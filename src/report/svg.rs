//! Inline SVG charts for the HTML report and the web console: a histogram with marked
//! values, and line charts (the report's over time, the console's over evenly spaced
//! points). Pure functions from numbers to markup; every text is escaped, every coordinate is
//! finite.

use super::markup::escape;
use std::fmt::Write as _;

use super::render::num;
use crate::time::rfc3339;

/// Chart width in SVG units.
pub const WIDTH: f64 = 720.0;
/// Chart height in SVG units.
pub const HEIGHT: f64 = 260.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 24.0;
const BOTTOM: f64 = 40.0;

/// Line colours, one per series (then again from the first).
pub const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#7f7f7f", "#393b79",
];

/// At most `max` characters of `text` (the last one an ellipsis when cut).
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut o: String = text.chars().take(max.saturating_sub(1)).collect();
    o.push('…');
    o
}

/// A finite number for a coordinate (0 for NaN and infinities).
fn fin(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

/// Counts of `values` in `n` equal bins over `[0, hi)`; values at or above `hi` go in the
/// last bin, values below 0 (and NaN) in the first. `n` is at least 1.
pub fn bins(values: &[f64], hi: f64, n: usize) -> Vec<u64> {
    let n = n.max(1);
    let mut out = vec![0u64; n];
    let hi = if hi.is_finite() && hi > 0.0 { hi } else { 1.0 };
    for &v in values {
        let i = if v.is_nan() || v <= 0.0 {
            0
        } else {
            ((v / hi) * n as f64).floor().min((n - 1) as f64) as usize
        };
        out[i] += 1;
    }
    out
}

/// The 1-2-5 step (…, 0.1, 0.2, 0.5, 1, 2, 5, 10, …) nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let decade = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * decade >= raw * (1.0 - 1e-9) {
            return m * decade;
        }
    }
    10.0 * decade
}

/// A linear axis from 0: its top (a multiple of the tick step, at or above `max`) and its
/// ticks (0 included, at most about `count` + 1).
pub fn linear_axis(max: f64, count: usize) -> (f64, Vec<f64>) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max / count.max(1) as f64);
    let steps = (max / step - 1e-9).ceil().max(1.0);
    let top = steps * step;
    let ticks = (0..=steps as usize).map(|i| i as f64 * step).collect();
    (top, ticks)
}

/// The logarithmic count axis of a histogram: a count `c > 0` is drawn at `1 + log10(c)`,
/// 0 at 0. Returns the top of the axis and the ticks (1, 10, 100, … up to `max`).
pub fn log_axis(max: u64) -> (f64, Vec<u64>) {
    let top = log_pos(max.max(1));
    let mut ticks = vec![1u64];
    while let Some(next) = ticks.last().and_then(|t| t.checked_mul(10)) {
        if next > max {
            break;
        }
        ticks.push(next);
    }
    (top.max(1.0), ticks)
}

/// Where count `c` sits on the [`log_axis`].
pub fn log_pos(c: u64) -> f64 {
    if c == 0 {
        0.0
    } else {
        1.0 + (c as f64).log10()
    }
}

/// One marked value on a histogram (a vertical line with its label).
pub struct Marker<'a> {
    /// Where, in the histogram's units.
    pub value: f64,
    /// Its label (escaped here).
    pub label: &'a str,
    /// Its class (`suggested`, `configured`), which the page's style colours.
    pub class: &'a str,
}

fn plot_w() -> f64 {
    WIDTH - LEFT - RIGHT
}

fn plot_h() -> f64 {
    HEIGHT - TOP - BOTTOM
}

fn open_svg(o: &mut String, class: &str, limit: &str, title: &str) {
    let _ = write!(
        o,
        r#"<svg class="{class}" data-limit="{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img"><title>{}</title>"#,
        escape(limit),
        escape(title)
    );
    // Axes.
    let (x0, y0) = (LEFT, TOP + plot_h());
    let _ = write!(
        o,
        r##"<path class="axis" d="M{x0:.1} {TOP:.1} V{y0:.1} H{:.1}" fill="none" stroke="#444"/>"##,
        LEFT + plot_w()
    );
}

fn text(o: &mut String, x: f64, y: f64, anchor: &str, class: &str, body: &str) {
    let _ = write!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="{anchor}" class="{class}">{}</text>"#,
        fin(x),
        fin(y),
        escape(body)
    );
}

/// A histogram of `values` (per-key peaks) in `n` bins from 0, counts on a logarithmic
/// scale, with `markers` drawn as labelled vertical lines. `x_label` names the unit.
pub fn histogram(
    limit: &str,
    values: &[f64],
    n: usize,
    markers: &[Marker<'_>],
    x_label: &str,
) -> String {
    let data_max = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let mark_max = markers.iter().map(|m| fin(m.value)).fold(0.0, f64::max);
    let (x_top, x_ticks) = linear_axis(data_max.max(mark_max) * 1.05, 8);
    let counts = bins(values, x_top, n);
    let max_count = counts.iter().copied().max().unwrap_or(0);
    let (y_top, y_ticks) = log_axis(max_count);
    let x_at = |v: f64| LEFT + fin(v).clamp(0.0, x_top) / x_top * plot_w();
    let y_at = |p: f64| TOP + plot_h() - p / y_top * plot_h();

    let mut o = String::with_capacity(4096);
    open_svg(
        &mut o,
        "histogram",
        limit,
        &format!("{limit}: keys by peak ({} keys)", values.len()),
    );
    for t in &y_ticks {
        let y = y_at(log_pos(*t));
        let _ = write!(
            o,
            r##"<line class="grid" x1="{LEFT:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            LEFT + plot_w()
        );
        text(&mut o, LEFT - 6.0, y + 4.0, "end", "tick", &t.to_string());
    }
    for t in &x_ticks {
        text(
            &mut o,
            x_at(*t),
            TOP + plot_h() + 16.0,
            "middle",
            "tick",
            &num(*t),
        );
    }
    let bw = plot_w() / counts.len() as f64;
    for (i, c) in counts.iter().enumerate() {
        if *c == 0 {
            continue;
        }
        let y = y_at(log_pos(*c));
        let lo = x_top * i as f64 / counts.len() as f64;
        let hi = x_top * (i + 1) as f64 / counts.len() as f64;
        let _ = write!(
            o,
            r##"<rect class="bar" x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="#4c78a8"><title>{}</title></rect>"##,
            LEFT + bw * i as f64 + 0.5,
            (bw - 1.0).max(0.5),
            TOP + plot_h() - y,
            escape(&format!("{} .. {}: {c} keys", num(lo), num(hi)))
        );
    }
    for (i, m) in markers.iter().enumerate() {
        let x = x_at(m.value);
        let _ = write!(
            o,
            r#"<line class="marker {}" x1="{x:.1}" y1="{TOP:.1}" x2="{x:.1}" y2="{:.1}" stroke-width="2" stroke-dasharray="6 3"/>"#,
            escape(m.class),
            TOP + plot_h()
        );
        // Labels alternate rows so two close markers stay readable.
        let anchor = if x > LEFT + plot_w() * 0.7 {
            "end"
        } else {
            "start"
        };
        let dx = if anchor == "end" { -4.0 } else { 4.0 };
        text(
            &mut o,
            x + dx,
            TOP + 12.0 + 14.0 * i as f64,
            anchor,
            &format!("label {}", m.class),
            &format!("{} {}", m.label, num(m.value)),
        );
    }
    text(
        &mut o,
        LEFT + plot_w() / 2.0,
        HEIGHT - 6.0,
        "middle",
        "axis-label",
        &format!("peak ({x_label}); keys per bin, log scale"),
    );
    o.push_str("</svg>");
    o
}

/// Tick spacings of a time axis, seconds: the first that gives at most [`MAX_TIME_TICKS`]
/// ticks over the span is used.
const TIME_STEPS: [i64; 24] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172_800, 604_800, 1_209_600, 2_592_000, 7_776_000, 31_536_000,
];
/// Most ticks on a time axis.
pub const MAX_TIME_TICKS: usize = 6;

/// The ticks of a time axis over `[t0, t1]` (µs): at whole multiples of a step chosen by
/// the span, each labelled (UTC) at the step's resolution: seconds under a minute, the
/// clock under a day (with the date when the ticks span more than one), else the date. No
/// two labels are the same.
pub fn time_ticks(t0: i64, t1: i64) -> Vec<(i64, String)> {
    let span_s = (t1.saturating_sub(t0) / 1_000_000).max(1);
    let step = TIME_STEPS
        .iter()
        .copied()
        .find(|s| span_s / s < MAX_TIME_TICKS as i64)
        .unwrap_or(TIME_STEPS[TIME_STEPS.len() - 1]);
    let step_us = step * 1_000_000;
    let mut t = t0.div_euclid(step_us) * step_us;
    if t < t0 {
        t += step_us;
    }
    let mut at = Vec::new();
    while t <= t1 && at.len() <= MAX_TIME_TICKS {
        at.push(t);
        t += step_us;
    }
    let date = |us: i64| rfc3339(us).split_once('T').map(|(d, _)| d.to_string());
    let days_differ = at.first().map(|&a| date(a)) != at.last().map(|&b| date(b));
    at.into_iter()
        .map(|us| {
            let s = rfc3339(us);
            let (day, clock) = s.split_once('T').unwrap_or((&s, ""));
            let label = if step >= 86_400 {
                day.to_string()
            } else {
                let clock = if step < 60 {
                    clock.get(..8).unwrap_or(clock)
                } else {
                    clock.get(..5).unwrap_or(clock)
                };
                if days_differ {
                    format!("{} {clock}", day.get(5..).unwrap_or(day))
                } else {
                    clock.to_string()
                }
            };
            (us, label)
        })
        .collect()
}

/// Lines of values over `[t0, t1]` (µs), from 0 up, with `limit` as a dashed horizontal
/// line labelled `limit_label`: the report's chart of a limit's top keys.
pub fn lines(
    limit_name: &str,
    t0: i64,
    t1: i64,
    series: &[Line<'_>],
    limit: f64,
    limit_label: &str,
    y_label: &str,
) -> String {
    line_chart(&LineChart {
        title: &format!("{limit_name}: top keys over time"),
        look: Look::Report {
            limit_name,
            t0,
            t1,
            limit,
            limit_label,
            y_label,
        },
        lines: series,
    })
}

/// One line of a line chart.
#[derive(Clone, Copy, Debug)]
pub struct Line<'a> {
    /// Its name in the legend (escaped and cut here).
    pub name: &'a str,
    /// Its points.
    pub points: Points<'a>,
}

/// The points of a line: on the report's time axis, or evenly spaced on the console's.
#[derive(Clone, Copy, Debug)]
pub enum Points<'a> {
    /// `(time µs, value)` in time order, for [`Look::Report`].
    Timed(&'a [(i64, f64)]),
    /// One value per point of the axis (missing and non-finite ones drawn as 0), for
    /// [`Look::Console`].
    Spaced(&'a [f64]),
}

/// How a line chart looks and what its x axis is.
#[derive(Clone, Debug)]
pub enum Look<'a> {
    /// The report's: [`WIDTH`] × [`HEIGHT`], styled by the page's classes, a time axis over
    /// `[t0, t1]` (µs), the y axis at nice steps, `limit` as a dashed line labelled
    /// `limit_label`, the legend inset in the top left corner, `y_label` under the axis.
    Report {
        /// The limit charted (the `<svg>`'s `data-limit`).
        limit_name: &'a str,
        /// Start of the time axis (µs).
        t0: i64,
        /// End of the time axis (µs).
        t1: i64,
        /// The limit's value, drawn as a dashed line.
        limit: f64,
        /// The dashed line's label.
        limit_label: &'a str,
        /// What the y axis counts.
        y_label: &'a str,
    },
    /// The console's: `width` × `height` plus the legend in rows of three under the plot,
    /// presentation attributes inline, `points` evenly spaced points labelled under the
    /// axis at `x_labels` (point index, text), grid lines at 0, half and the top.
    Console {
        /// Width of the drawing, in CSS pixels (scaled down with the page).
        width: u32,
        /// Height of the plot, legend excluded.
        height: u32,
        /// Points on the x axis.
        points: usize,
        /// Labels under the x axis: (point index, text).
        x_labels: Vec<(usize, String)>,
    },
}

/// A line chart: its title (the SVG's `<title>`), its look and its lines.
#[derive(Clone, Debug)]
pub struct LineChart<'a> {
    /// Its title, read by screen readers and shown on hover.
    pub title: &'a str,
    /// Its look and x axis.
    pub look: Look<'a>,
    /// The lines.
    pub lines: &'a [Line<'a>],
}

/// The console's series colours, in order (seen on white and in greyscale print).
const CONSOLE_PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#7f7f7f",
];
/// The console's margins around the plot, and the height of a legend row.
const CONSOLE_LEFT: f64 = 44.0;
const CONSOLE_RIGHT: f64 = 10.0;
const CONSOLE_TOP: f64 = 10.0;
const CONSOLE_BOTTOM: f64 = 22.0;
const LEGEND_ROW: f64 = 16.0;

/// The smallest 1, 2 or 5 × 10ⁿ at or above `v` (1 for anything at or below 1).
pub fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 1.0 {
        return 1.0;
    }
    let exp = v.log10().floor();
    let base = 10f64.powf(exp);
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * base >= v * (1.0 - 1e-12) {
            return m * base;
        }
    }
    10.0 * base
}

/// At most `max` characters of `text`, cut without a mark.
fn cut(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// Where a chart's plot sits in its drawing and how values map into it.
struct Plot<'c, 'a> {
    /// The chart drawn.
    look: &'c Look<'a>,
    /// Width and height of the drawing, legend below excluded.
    w: f64,
    h: f64,
    /// The plot's margins in the drawing.
    left: f64,
    right: f64,
    top: f64,
    /// The plot's size.
    plot_w: f64,
    plot_h: f64,
    /// The value at the top of the y axis.
    y_top: f64,
    /// The report's values marked on the y axis.
    y_ticks: Vec<f64>,
}

impl<'c, 'a> Plot<'c, 'a> {
    /// The plot of `c`: its frame by its look, the y axis over its lines' values.
    fn of(c: &'c LineChart<'a>) -> Self {
        let data_max = c
            .lines
            .iter()
            .flat_map(|l| l.values())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        match &c.look {
            Look::Report { limit, .. } => {
                let (y_top, y_ticks) = linear_axis(data_max.max(fin(*limit)) * 1.05, 5);
                Plot {
                    look: &c.look,
                    w: WIDTH,
                    h: HEIGHT,
                    left: LEFT,
                    right: RIGHT,
                    top: TOP,
                    plot_w: plot_w(),
                    plot_h: plot_h(),
                    y_top,
                    y_ticks,
                }
            }
            Look::Console { width, height, .. } => {
                let (w, h) = (f64::from((*width).max(120)), f64::from((*height).max(60)));
                Plot {
                    look: &c.look,
                    w,
                    h,
                    left: CONSOLE_LEFT,
                    right: CONSOLE_RIGHT,
                    top: CONSOLE_TOP,
                    plot_w: w - CONSOLE_LEFT - CONSOLE_RIGHT,
                    plot_h: h - CONSOLE_TOP - CONSOLE_BOTTOM,
                    y_top: nice_ceiling(data_max),
                    y_ticks: Vec::new(),
                }
            }
        }
    }

    /// The x of time `t` (µs) on the report's time axis, or of point `t` on the console's.
    fn x(&self, t: i64) -> f64 {
        match self.look {
            Look::Report { t0, t1, .. } => {
                let t1 = (*t1).max(t0.saturating_add(1_000_000));
                let span = t1.saturating_sub(*t0).max(1);
                self.left + (t.saturating_sub(*t0)) as f64 / span as f64 * self.plot_w
            }
            Look::Console { points, .. } => {
                let n = (*points).max(2);
                self.left + self.plot_w * t as f64 / (n - 1) as f64
            }
        }
    }

    /// The y of value `v` (clamped to the axis; non-finite values at 0).
    fn y(&self, v: f64) -> f64 {
        match self.look {
            Look::Report { .. } => {
                self.top + self.plot_h - fin(v).clamp(0.0, self.y_top) / self.y_top * self.plot_h
            }
            Look::Console { .. } => {
                self.top + self.plot_h * (1.0 - (v.max(0.0) / self.y_top).min(1.0))
            }
        }
    }
}

impl Line<'_> {
    /// Its values, in order.
    fn values(&self) -> Box<dyn Iterator<Item = f64> + '_> {
        match self.points {
            Points::Timed(p) => Box::new(p.iter().map(|p| p.1)),
            Points::Spaced(v) => Box::new(v.iter().copied()),
        }
    }
}

/// Draws `c` as an `<svg>` element: the report's `class="rates"` or the console's
/// `class="chart"`.
pub fn line_chart(c: &LineChart<'_>) -> String {
    let p = Plot::of(c);
    let mut o = String::with_capacity(4096);
    open_chart(&mut o, c, &p);
    y_grid(&mut o, &p);
    x_labels(&mut o, &p);
    limit_line(&mut o, &p);
    for (i, l) in c.lines.iter().enumerate() {
        polyline(&mut o, &p, i, l);
        legend_entry(&mut o, &p, i, l);
    }
    if let Look::Report { y_label, .. } = &c.look {
        text(
            &mut o,
            LEFT + plot_w() / 2.0,
            HEIGHT - 6.0,
            "middle",
            "axis-label",
            &format!("time (UTC); {y_label}"),
        );
    }
    o.push_str("</svg>");
    o
}

/// The `<svg>` tag with its title (and the report's axes).
fn open_chart(o: &mut String, c: &LineChart<'_>, p: &Plot<'_, '_>) {
    match &c.look {
        Look::Report { limit_name, .. } => open_svg(o, "rates", limit_name, c.title),
        Look::Console { .. } => {
            let total_h = p.h + c.lines.len().div_ceil(3) as f64 * LEGEND_ROW;
            let _ = write!(
                o,
                "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" \
                 viewBox=\"0 0 {} {total_h}\" width=\"{}\" height=\"{total_h}\" \
                 data-series=\"{}\"><title>{}</title>",
                p.w,
                p.w,
                c.lines.len(),
                escape(c.title)
            );
        }
    }
}

/// The horizontal grid lines with their values (and the console's x axis line).
fn y_grid(o: &mut String, p: &Plot<'_, '_>) {
    match p.look {
        Look::Report { .. } => {
            for t in &p.y_ticks {
                let y = p.y(*t);
                let _ = write!(
                    o,
                    r##"<line class="grid" x1="{LEFT:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                    LEFT + plot_w()
                );
                text(o, LEFT - 6.0, y + 4.0, "end", "tick", &num(*t));
            }
        }
        Look::Console { .. } => {
            for frac in [0.0, 0.5, 1.0] {
                let v = p.y_top * frac;
                let yy = p.y(v);
                let _ = write!(
                    o,
                    "<line class=\"grid\" x1=\"{}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" \
                     stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" \
                     font-size=\"10\" fill=\"#555\">{}</text>",
                    p.left,
                    p.w - p.right,
                    p.left - 4.0,
                    yy + 3.0,
                    crate::figures::abbreviated(v)
                );
            }
            let _ = write!(
                o,
                "<line x1=\"{}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>",
                p.left,
                p.top + p.plot_h,
                p.w - p.right,
                p.top + p.plot_h
            );
        }
    }
}

/// The labels under the x axis: the report's time ticks, the console's given labels.
fn x_labels(o: &mut String, p: &Plot<'_, '_>) {
    match p.look {
        Look::Report { t0, t1, .. } => {
            let t1 = (*t1).max(t0.saturating_add(1_000_000));
            for (t, label) in time_ticks(*t0, t1) {
                text(o, p.x(t), TOP + plot_h() + 16.0, "middle", "tick", &label);
            }
        }
        Look::Console {
            points, x_labels, ..
        } => {
            let n = (*points).max(2);
            for (i, label) in x_labels {
                let anchor = match i {
                    0 => "start",
                    i if *i + 1 >= n => "end",
                    _ => "middle",
                };
                let _ = write!(
                    o,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" font-size=\"10\" \
                     fill=\"#555\">{}</text>",
                    p.x((*i).min(n - 1) as i64),
                    p.h - 6.0,
                    escape(cut(label, 24))
                );
            }
        }
    }
}

/// The report's limit: a dashed horizontal line with its label.
fn limit_line(o: &mut String, p: &Plot<'_, '_>) {
    let Look::Report {
        limit, limit_label, ..
    } = p.look
    else {
        return;
    };
    let y = p.y(*limit);
    let _ = write!(
        o,
        r#"<line class="marker configured" x1="{LEFT:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke-width="2" stroke-dasharray="6 3"/>"#,
        LEFT + plot_w()
    );
    text(
        o,
        LEFT + plot_w() - 4.0,
        y - 4.0,
        "end",
        "label configured",
        &format!("{limit_label} {}", num(*limit)),
    );
}

/// The colour of the `i`th line.
fn colour(p: &Plot<'_, '_>, i: usize) -> &'static str {
    match p.look {
        Look::Report { .. } => PALETTE[i % PALETTE.len()],
        Look::Console { .. } => CONSOLE_PALETTE[i % CONSOLE_PALETTE.len()],
    }
}

/// Line `l`, the `i`th, as a `<polyline>` titled with its name.
fn polyline(o: &mut String, p: &Plot<'_, '_>, i: usize, l: &Line<'_>) {
    let colour = colour(p, i);
    let mut pts = String::new();
    match l.points {
        Points::Timed(points) => {
            for (t, v) in points {
                let _ = write!(pts, "{:.1},{:.1} ", p.x(*t), p.y(*v));
            }
        }
        Points::Spaced(values) => {
            let n = match p.look {
                Look::Console { points, .. } => *points,
                Look::Report { .. } => values.len(),
            };
            for i in 0..n {
                let v = values.get(i).copied().filter(|v| v.is_finite());
                let _ = write!(pts, "{:.1},{:.1} ", p.x(i as i64), p.y(v.unwrap_or(0.0)));
            }
        }
    }
    match p.look {
        Look::Report { .. } => {
            let _ = write!(
                o,
                r#"<polyline class="series" points="{}" fill="none" stroke="{colour}" stroke-width="1.5"><title>{}</title></polyline>"#,
                pts.trim_end(),
                escape(&truncate(l.name, 1000))
            );
        }
        Look::Console { .. } => {
            let _ = write!(
                o,
                "<polyline class=\"series\" fill=\"none\" stroke=\"{colour}\" \
                 stroke-width=\"1.5\" points=\"{pts}\"><title>{}</title></polyline>",
                escape(l.name)
            );
        }
    }
}

/// The legend's entry of line `l`, the `i`th: the report's in up to two columns of five
/// in the top left corner, the console's in rows of three under the plot.
fn legend_entry(o: &mut String, p: &Plot<'_, '_>, i: usize, l: &Line<'_>) {
    let colour = colour(p, i);
    match p.look {
        Look::Report { .. } => {
            let (col, row) = (i / 5, i % 5);
            let lx = LEFT + 8.0 + 230.0 * col as f64;
            let ly = TOP + 10.0 + 13.0 * row as f64;
            let _ = write!(
                o,
                r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="3" fill="{colour}"/>"#,
                ly - 4.0
            );
            text(o, lx + 14.0, ly, "start", "legend", &truncate(l.name, 32));
        }
        Look::Console { .. } => {
            let (row, col) = (i / 3, i % 3);
            let lx = p.left + col as f64 * (p.plot_w / 3.0);
            let ly = p.h + row as f64 * LEGEND_ROW + 4.0;
            let _ = write!(
                o,
                "<rect x=\"{lx:.1}\" y=\"{ly:.1}\" width=\"10\" height=\"10\" fill=\"{colour}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#222\">{}</text>",
                lx + 14.0,
                ly + 9.0,
                escape(cut(l.name, 32))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééééééé", 4), "ééé…");
        assert_eq!(truncate("abcdef", 6), "abcdef");
    }

    #[test]
    fn bins_count_every_value_once() {
        let v = [0.0, 0.5, 1.0, 9.99, 10.0, 250.0, -3.0, f64::NAN];
        let b = bins(&v, 10.0, 10);
        assert_eq!(b.iter().sum::<u64>(), v.len() as u64);
        // 0, 0.5, -3, NaN in the first bin; 1.0 in the second; 9.99, 10 and 250 in the last.
        assert_eq!(b[0], 4);
        assert_eq!(b[1], 1);
        assert_eq!(b[9], 3);
        assert_eq!(bins(&[], 10.0, 0), vec![0]);
        assert_eq!(bins(&[5.0], f64::NAN, 2), vec![0, 1]);
    }

    #[test]
    fn linear_axis_is_nice_and_covers_the_maximum() {
        assert_eq!(
            linear_axis(10.0, 5),
            (10.0, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0])
        );
        let (top, ticks) = linear_axis(73.0, 5);
        assert_eq!(top, 80.0);
        assert_eq!(ticks.len(), 5);
        assert_eq!(ticks[1], 20.0);
        let (top, ticks) = linear_axis(0.0, 5);
        assert_eq!(top, 1.0);
        assert_eq!(ticks.first(), Some(&0.0));
        let (top, _) = linear_axis(0.013, 4);
        assert!((top - 0.015).abs() < 1e-12, "{top}");
        for m in [0.3, 7.0, 99.0, 1234.5, 1e9] {
            let (top, ticks) = linear_axis(m, 6);
            assert!(top >= m, "{m}: {top}");
            assert!(ticks.len() <= 8, "{m}: {ticks:?}");
            assert_eq!(*ticks.last().unwrap(), top);
        }
    }

    #[test]
    fn log_axis_places_decades() {
        assert_eq!(log_axis(0), (1.0, vec![1]));
        assert_eq!(log_axis(1), (1.0, vec![1]));
        assert_eq!(log_axis(100).1, vec![1, 10, 100]);
        assert_eq!(log_axis(99).1, vec![1, 10]);
        assert_eq!(log_pos(0), 0.0);
        assert_eq!(log_pos(1), 1.0);
        assert_eq!(log_pos(1000), 4.0);
        assert_eq!(log_axis(u64::MAX).1.len(), 20);
    }

    #[test]
    fn histogram_draws_bars_and_markers() {
        let s = histogram(
            "per<user>",
            &[1.0, 1.0, 2.0, 40.0],
            10,
            &[
                Marker {
                    value: 20.0,
                    label: "suggested",
                    class: "suggested",
                },
                Marker {
                    value: 30.0,
                    label: "configured",
                    class: "configured",
                },
            ],
            "messages per 1h",
        );
        assert!(s.starts_with(r#"<svg class="histogram" data-limit="per&lt;user&gt;""#));
        assert!(s.ends_with("</svg>"));
        // The axis runs to 50 in bins of 5: 1, 1 and 2 share the first bin.
        assert_eq!(s.matches("<rect class=\"bar\"").count(), 2, "{s}");
        assert!(s.contains("<title>0 .. 5: 3 keys</title>"), "{s}");
        assert!(s.contains("<title>40 .. 45: 1 keys</title>"), "{s}");
        assert_eq!(s.matches("class=\"marker suggested\"").count(), 1);
        assert_eq!(s.matches("class=\"marker configured\"").count(), 1);
        assert!(s.contains("suggested 20"));
        assert!(s.contains("configured 30"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn lines_draw_one_polyline_per_series() {
        let a = [(0i64, 1.0), (3_600_000_000, 5.0)];
        let b = [(1_800_000_000i64, f64::INFINITY)];
        let s = lines(
            "l",
            0,
            3_600_000_000,
            &[
                Line {
                    name: "alice",
                    points: Points::Timed(&a),
                },
                Line {
                    name: "<bob>",
                    points: Points::Timed(&b),
                },
            ],
            4.0,
            "limit",
            "messages per 1h",
        );
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("&lt;bob&gt;"));
        assert!(!s.contains("<bob>"));
        assert!(s.contains(">00:00<") && s.contains(">01:00<"), "{s}");
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    /// A console chart of `lines` (name, values) over `points` points.
    fn console_chart(
        title: &str,
        width: u32,
        height: u32,
        points: usize,
        x_labels: Vec<(usize, String)>,
        lines: &[(&str, &[f64])],
    ) -> String {
        let lines: Vec<Line<'_>> = lines
            .iter()
            .map(|(name, values)| Line {
                name,
                points: Points::Spaced(values),
            })
            .collect();
        line_chart(&LineChart {
            title,
            look: Look::Console {
                width,
                height,
                points,
                x_labels,
            },
            lines: &lines,
        })
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(0.3), 1.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(1.5), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(11.0), 20.0);
        assert_eq!(nice_ceiling(450.0), 500.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(f64::INFINITY), 1.0);
    }

    #[test]
    fn chart_has_one_polyline_per_series_with_every_point() {
        let a = [0.0, 5.0, 10.0];
        let b = [1.0, f64::NAN];
        let svg = console_chart(
            "messages <per> minute",
            600,
            200,
            3,
            vec![(0, "-60m".into()), (2, "now".into())],
            &[("a&b", &a), ("second", &b)],
        );
        assert!(svg.starts_with("<svg class=\"chart\""), "{svg}");
        assert!(svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(
            svg.contains("<title>messages &lt;per&gt; minute</title>"),
            "{svg}"
        );
        assert!(
            svg.contains(">a&amp;b</text>") && !svg.contains(">a&b<"),
            "{svg}"
        );
        assert!(svg.contains("data-series=\"2\""), "{svg}");
        // Top of the axis is 10: the value 10 is drawn at the top of the plot (y = TOP),
        // 0 at its bottom, and x runs from LEFT to width - RIGHT.
        assert!(
            svg.contains("points=\"44.0,178.0 317.0,94.0 590.0,10.0 \""),
            "{svg}"
        );
        // A missing or NaN point is drawn at 0.
        assert!(
            svg.contains("points=\"44.0,161.2 317.0,178.0 590.0,178.0 \""),
            "{svg}"
        );
        assert!(
            svg.contains(">now</text>") && svg.contains(">-60m</text>"),
            "{svg}"
        );
        // The labels of the y axis: 0, 5, 10.
        for l in [">0</text>", ">5</text>", ">10</text>"] {
            assert!(svg.contains(l), "{l} in {svg}");
        }
    }

    #[test]
    fn empty_chart_is_still_a_chart() {
        let svg = console_chart("nothing", 0, 0, 0, vec![], &[]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 0);
    }

    #[test]
    fn long_legend_names_are_cut_and_escaped() {
        let name = "<".repeat(500);
        let v = [1.0];
        let svg = console_chart("t", 300, 100, 1, vec![], &[(&name, &v)]);
        assert!(!svg.contains("<<"), "{svg}");
        assert!(
            svg.contains(&format!(">{}</text>", "&lt;".repeat(32))),
            "{svg}"
        );
    }

    #[test]
    fn time_labels_follow_the_span() {
        let labels = |t0: i64, t1: i64| -> Vec<String> {
            time_ticks(t0, t1).into_iter().map(|(_, l)| l).collect()
        };
        // Three minutes from 17:41:10: a tick a minute, at whole minutes.
        let t0 = (17 * 3600 + 41 * 60 + 10) * 1_000_000;
        assert_eq!(labels(t0, t0 + 180_000_000), ["17:42", "17:43", "17:44"]);
        assert_eq!(
            labels(0, 20_000_000),
            ["00:00:00", "00:00:05", "00:00:10", "00:00:15", "00:00:20"]
        );
        assert_eq!(labels(0, 3_600_000_000)[..2], ["00:00", "00:15"]);
        assert_eq!(
            labels(0, 10 * 86_400_000_000)[..2],
            ["1970-01-01", "1970-01-03"]
        );
        // Two days of hours carry the date.
        assert_eq!(
            labels(0, 2 * 86_400_000_000)[..2],
            ["01-01 00:00", "01-01 12:00"]
        );
    }

    proptest::proptest! {
        /// Whatever the span, ticks are in range, in order, at most MAX_TIME_TICKS + 1, and
        /// no two labels are the same.
        #[test]
        fn time_labels_never_repeat(t0 in 0i64..4_000_000_000_000_000, span in 1_000_000i64..400_000_000_000_000) {
            let t1 = t0 + span;
            let ticks = time_ticks(t0, t1);
            proptest::prop_assert!(ticks.len() <= MAX_TIME_TICKS + 1);
            let mut seen = std::collections::HashSet::new();
            for w in ticks.windows(2) {
                proptest::prop_assert!(w[0].0 < w[1].0);
            }
            for (t, l) in &ticks {
                proptest::prop_assert!(*t >= t0 && *t <= t1);
                proptest::prop_assert!(seen.insert(l.clone()), "{:?}", ticks);
            }
        }
    }
}
