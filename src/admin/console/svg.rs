//! A small inline SVG meter of a value against its limit (the console's line charts are
//! [`crate::report::svg::line_chart`]'s).

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
    fn meters() {
        assert!(meter(5.0, 10.0).contains("width=\"50\" height=\"10\" fill=\"#2ca02c\""));
        assert!(meter(9.0, 10.0).contains("fill=\"#ff7f0e\""));
        assert!(meter(30.0, 10.0).contains("width=\"100\" height=\"10\" fill=\"#d62728\""));
        assert!(meter(1.0, 0.0).contains("width=\"100\" height=\"10\" fill=\"#d62728\""));
        assert!(meter(0.0, 0.0).contains("width=\"0\""));
        assert!(meter(3.0, 10.0).contains("<title>30% of the limit</title>"));
    }
}
