//! The text of `floodgate report` (the JSON form is the [`Report`] itself).

use std::fmt::Write as _;

use super::analyze::{LimitReport, Report, HEADROOM, OUTLIER_FACTOR};
pub use crate::figures::{num, period_text};
use crate::time::rfc3339;

/// The report as text.
pub fn text(r: &Report) -> String {
    let mut o = String::new();
    let when = |t: Option<i64>, none: &str| t.map_or(none.to_string(), rfc3339);
    let _ = writeln!(
        o,
        "floodgate report of {}: {} .. {}",
        r.source,
        when(r.since_us, "the beginning"),
        when(r.until_us, "the end")
    );
    if r.events == 0 {
        let _ = writeln!(
            o,
            "no events in this period ({} lines read, {} outside the period, {} of other limits): nothing to report",
            r.lines, r.outside, r.unknown_limit
        );
        return o;
    }
    let _ = writeln!(
        o,
        "{} events from {} to {} ({} outside the period, {} of limits not reported on)",
        r.events,
        when(r.first_us, "-"),
        when(r.last_us, "-"),
        r.outside,
        r.unknown_limit
    );
    for l in &r.limits {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "limit {} ({} {}, period {}, action {}): {} events, {} keys",
            l.name,
            l.algorithm,
            num(l.configured),
            l.period,
            l.action,
            l.events,
            l.keys
        );
        if l.keys == 0 {
            let _ = writeln!(o, "  no events for this limit");
            continue;
        }
        let baseline = r.baselines.iter().find(|b| b.limit == l.name);
        let source = if baseline.is_some() {
            "baseline"
        } else {
            "limit_list"
        };
        if l.keys > l.own_limit_keys {
            ordinary(&mut o, l);
        } else {
            let _ = writeln!(o, "  every key has its own limit ({source})");
        }
        if l.own_limit_keys > 0 {
            own_limits(&mut o, l, source);
        }
        if let Some(b) = baseline {
            super::baseline::render(&mut o, b);
        }
    }
    o
}

/// ` [restricted]` or ` [held]` after a contained key.
fn flag(k: &super::analyze::KeyPeak) -> String {
    k.contained
        .as_deref()
        .map_or_else(String::new, |how| format!("  [{how}]"))
}

/// The peaks of the keys without their own limit, and the suggestion.
fn ordinary(o: &mut String, l: &LimitReport) {
    let _ = writeln!(
        o,
        "  peak per key ({}): p50 {}  p90 {}  p99 {}  max {}",
        l.unit,
        num(l.p50),
        num(l.p90),
        num(l.p99),
        num(l.max)
    );
    let _ = writeln!(o, "  top {}:", l.top.len());
    for k in &l.top {
        let _ = writeln!(
            o,
            "    {:>12}  {}  ({} events){}",
            num(k.peak),
            k.key,
            k.events,
            flag(k)
        );
    }
    let rule = match l.outlier_threshold {
        Some(t) => format!(
            "outliers: peak above {} x the median = {}",
            num(OUTLIER_FACTOR),
            num(t)
        ),
        None => "no outliers (median 0)".into(),
    };
    match &l.capped_by {
        Some(key) => {
            let _ = writeln!(
                o,
                "  suggested limit: {} (held under the peak of {key}, contained; {} x {}, \
                 the highest peak of ordinary keys, would let it through; {})",
                num(l.suggested),
                num(HEADROOM),
                num(l.ordinary_max),
                rule
            );
        }
        None => {
            let _ = writeln!(
                o,
                "  suggested limit: {} ({} x {}, the highest peak of ordinary keys, rounded up to 1-2-5; {})",
                num(l.suggested),
                num(HEADROOM),
                num(l.ordinary_max),
                rule
            );
        }
    }
    if !l.contained.is_empty() {
        let _ = writeln!(
            o,
            "  contained keys (restricted or held): {}",
            l.contained.len()
        );
        for k in &l.contained {
            let _ = writeln!(o, "    {:>12}  {}{}", num(k.peak), k.key, flag(k));
        }
    }
    if l.would_limit.is_empty() {
        let _ = writeln!(o, "  it would have limited no key");
    } else {
        let _ = writeln!(o, "  it would have limited {} key(s):", l.would_limit.len());
        for k in &l.would_limit {
            let _ = writeln!(o, "    {:>12}  {}{}", num(k.peak), k.key, flag(k));
        }
    }
    let _ = writeln!(
        o,
        "  keys over the configured {}: {}",
        num(l.configured),
        l.over_configured
    );
}

/// The keys with a limit of their own, against it.
fn own_limits(o: &mut String, l: &LimitReport, source: &str) {
    let _ = writeln!(
        o,
        "  keys with their own limit ({source}): {}, over it: {}",
        l.own_limit_keys, l.over_own_limit
    );
    for k in &l.own_limit_top {
        let _ = writeln!(
            o,
            "    {:>12} of {:<8} {}  ({} events){}",
            num(k.peak),
            num(k.own_limit),
            k.key,
            k.events,
            if k.over { "  over" } else { "" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_periods() {
        assert_eq!(num(3.0), "3");
        assert_eq!(num(2.99999), "3");
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(-0.0001), "0");
        assert_eq!(period_text(3600.0), "1h");
        assert_eq!(period_text(86_400.0 * 2.0), "2d");
        assert_eq!(period_text(90.0), "90s");
        assert_eq!(period_text(600.0), "10m");
    }
}
