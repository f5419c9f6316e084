//! Inline SVG charts: a line chart of series over the same time axis, and a small meter of
//! a value against its limit. Pure string building; every text in them is escaped.

use std::fmt::Write as _;

use super::html::{escape, truncate};

/// Series colours, in order (seen on white and in greyscale print).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#7f7f7f",
];

/// One line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series<'a> {
    /// Its name in the legend.
    pub name: &'a str,
    /// One value per point of the time axis (missing points are drawn as 0).
    pub values: &'a [f64],
}

/// A line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart<'a> {
    /// Its title (the SVG's `<title>`, read by screen readers and shown on hover).
    pub title: &'a str,
    /// Width and height of the drawing, in CSS pixels (scaled down with the page).
    pub width: u32,
    /// Height of the plot, legend excluded.
    pub height: u32,
    /// Points on the time axis.
    pub points: usize,
    /// Labels under the time axis: (point index, text).
    pub x_labels: Vec<(usize, String)>,
    /// The lines.
    pub series: Vec<Series<'a>>,
}

const LEFT: f64 = 44.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 22.0;
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

/// Draws `c` as an `<svg class="chart">` element.
pub fn line_chart(c: &Chart<'_>) -> String {
    let w = f64::from(c.width.max(120));
    let h = f64::from(c.height.max(60));
    let legend_rows = c.series.len().div_ceil(3);
    let total_h = h + legend_rows as f64 * LEGEND_ROW;
    let max = c
        .series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = nice_ceiling(max);
    let plot_w = w - LEFT - RIGHT;
    let plot_h = h - TOP - BOTTOM;
    let n = c.points.max(2);
    let x = |i: usize| LEFT + plot_w * i as f64 / (n - 1) as f64;
    let y = |v: f64| TOP + plot_h * (1.0 - (v.max(0.0) / top).min(1.0));

    let mut out = String::with_capacity(1024 + c.series.len() * c.points * 16);
    let _ = write!(
        out,
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" \
         viewBox=\"0 0 {w} {total_h}\" width=\"{w}\" height=\"{total_h}\" \
         data-series=\"{}\"><title>{}</title>",
        c.series.len(),
        escape(c.title)
    );
    // Grid and y labels: 0, half, top.
    for frac in [0.0, 0.5, 1.0] {
        let v = top * frac;
        let yy = y(v);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" \
             stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" \
             font-size=\"10\" fill=\"#555\">{}</text>",
            w - RIGHT,
            LEFT - 4.0,
            yy + 3.0,
            crate::figures::abbreviated(v)
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>",
        TOP + plot_h,
        w - RIGHT,
        TOP + plot_h
    );
    for (i, label) in &c.x_labels {
        let anchor = match i {
            0 => "start",
            i if *i + 1 >= n => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" font-size=\"10\" \
             fill=\"#555\">{}</text>",
            x((*i).min(n - 1)),
            h - 6.0,
            escape(truncate(label, 24).0)
        );
    }
    for (k, s) in c.series.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let _ = write!(
            out,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{colour}\" \
             stroke-width=\"1.5\" points=\""
        );
        for i in 0..c.points {
            let v = s.values.get(i).copied().filter(|v| v.is_finite());
            let _ = write!(out, "{:.1},{:.1} ", x(i), y(v.unwrap_or(0.0)));
        }
        let _ = write!(out, "\"><title>{}</title></polyline>", escape(s.name));
        let (row, col) = (k / 3, k % 3);
        let lx = LEFT + col as f64 * (plot_w / 3.0);
        let ly = h + row as f64 * LEGEND_ROW + 4.0;
        let _ = write!(
            out,
            "<rect x=\"{lx:.1}\" y=\"{ly:.1}\" width=\"10\" height=\"10\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#222\">{}</text>",
            lx + 14.0,
            ly + 9.0,
            escape(truncate(s.name, 32).0)
        );
    }
    out.push_str("</svg>");
    out
}

/// A small bar of `value` against `limit` (full at the limit; red at or over it).
pub fn meter(value: f64, limit: f64) -> String {
    let ratio = if limit > 0.0 {
        value / limit
    } else if value > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let filled = if ratio.is_finite() {
        (ratio.clamp(0.0, 1.0) * 100.0).round()
    } else {
        100.0
    };
    let colour = if ratio >= 1.0 {
        "#d62728"
    } else if ratio >= 0.8 {
        "#ff7f0e"
    } else {
        "#2ca02c"
    };
    format!(
        "<svg class=\"meter\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 100 10\" \
         width=\"100\" height=\"10\" role=\"img\"><title>{:.0}% of the limit</title>\
         <rect width=\"100\" height=\"10\" fill=\"#eee\"/>\
         <rect width=\"{filled}\" height=\"10\" fill=\"{colour}\"/></svg>",
        if ratio.is_finite() {
            ratio * 100.0
        } else {
            100.0
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = Chart {
            title: "messages <per> minute",
            width: 600,
            height: 200,
            points: 3,
            x_labels: vec![(0, "-60m".into()), (2, "now".into())],
            series: vec![
                Series {
                    name: "a&b",
                    values: &a,
                },
                Series {
                    name: "second",
                    values: &b,
                },
            ],
        };
        let svg = line_chart(&c);
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
        let svg = line_chart(&Chart {
            title: "nothing",
            width: 0,
            height: 0,
            points: 0,
            x_labels: vec![],
            series: vec![],
        });
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 0);
    }

    #[test]
    fn long_legend_names_are_cut_and_escaped() {
        let name = "<".repeat(500);
        let v = [1.0];
        let svg = line_chart(&Chart {
            title: "t",
            width: 300,
            height: 100,
            points: 1,
            x_labels: vec![],
            series: vec![Series {
                name: &name,
                values: &v,
            }],
        });
        assert!(!svg.contains("<<"), "{svg}");
        assert!(
            svg.contains(&format!(">{}</text>", "&lt;".repeat(32))),
            "{svg}"
        );
    }

    #[test]
    fn meters() {
        assert!(meter(5.0, 10.0).contains("width=\"50\" height=\"10\" fill=\"#2ca02c\""));
        assert!(meter(9.0, 10.0).contains("fill=\"#ff7f0e\""));
        assert!(meter(30.0, 10.0).contains("width=\"100\" height=\"10\" fill=\"#d62728\""));
        assert!(meter(1.0, 0.0).contains("width=\"100\" height=\"10\" fill=\"#d62728\""));
        assert!(meter(0.0, 0.0).contains("width=\"0\""));
        assert!(meter(3.0, 10.0).contains("<title>30% of the limit</title>"));
    }
}
