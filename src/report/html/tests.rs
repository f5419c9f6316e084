use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::report::analyze::{analyze, KeyPeak, LimitReport};

fn config() -> Config {
    let text = r#"
[[listener]]
address = "127.0.0.1:0"

[upstream]
address = "127.0.0.1:25"

[[limit]]
name = "exim"
ratelimit = "100 / 1h / per_rcpt / leaky / ${authenticated_id}"
action = "warn"

[[limit]]
name = "tb"
count = "messages"
rate = "1 / 1s"
burst = "3"
action = "warn"

[[limit]]
name = "quiet"
count = "messages"
algorithm = "bucket"
rate = "1 / 1s"
burst = "3"
action = "warn"
"#;
    Config::parse(Path::new("/t/c.toml"), text).unwrap()
}

fn events() -> String {
    let mut s = String::new();
    for i in 0..200 {
        let t = 1_700_000_000.0 + f64::from(i) * 10.0;
        let key = format!("user{}", i % 20);
        s.push_str(&format!(
            "{{\"t\":{t},\"limit\":\"exim\",\"key\":\"{key}\",\"count\":1}}\n"
        ));
        s.push_str(&format!(
            "{{\"t\":{t},\"limit\":\"tb\",\"key\":\"{key}\",\"count\":1}}\n"
        ));
    }
    // One flood by an outlier.
    for i in 0..100 {
        let t = 1_700_001_000.0 + f64::from(i) * 0.1;
        s.push_str(&format!(
            "{{\"t\":{t},\"limit\":\"exim\",\"key\":\"<flood>\",\"count\":1}}\n"
        ));
    }
    s
}

fn report_and_charts() -> (Report, Charts) {
    let c = config();
    let opts = Options {
        top: 5,
        ..Options::default()
    };
    let ev = events();
    let model = crate::policy::compile(&c).unwrap();
    let r = analyze(&model, "ev", ev.as_bytes(), &opts).unwrap();
    let ch = collect(&model, "ev", ev.as_bytes(), &opts, &r).unwrap();
    (r, ch)
}

/// Checks that `html` is well formed: tags balanced (void elements excepted), attribute
/// values quoted, no raw `<` or `>` in text or values, every `&` a known reference.
fn well_formed(html: &str) -> Result<(), String> {
    const VOID: [&str; 2] = ["meta", "br"];
    let rest = html.strip_prefix("<!DOCTYPE html>").ok_or("no doctype")?;
    let mut stack: Vec<String> = Vec::new();
    let mut i = 0;
    let b = rest.as_bytes();
    let refs = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"];
    while i < b.len() {
        match b[i] {
            b'<' => {
                let end = rest[i..].find('>').ok_or("unclosed tag")? + i;
                let tag = &rest[i + 1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().ok_or(format!("</{name}> without opening"))?;
                    if open != name {
                        return Err(format!("<{open}> closed by </{name}>"));
                    }
                } else {
                    let self_closing = tag.ends_with('/');
                    let tag = tag.trim_end_matches('/');
                    let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
                    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
                        return Err(format!("bad tag name {name:?}"));
                    }
                    // Attributes: name="value" pairs, values without '"' '<' '>'.
                    let mut a = attrs.trim();
                    while !a.is_empty() {
                        let (an, after) = a.split_once("=\"").ok_or(format!("bad attrs {a:?}"))?;
                        if an.is_empty() || an.contains(['<', '"', ' ']) {
                            return Err(format!("bad attribute name {an:?}"));
                        }
                        let (value, after) =
                            after.split_once('"').ok_or("unclosed attribute value")?;
                        if value.contains('<') {
                            return Err(format!("raw < in attribute {value:?}"));
                        }
                        check_refs(value, &refs)?;
                        a = after.trim_start();
                    }
                    if !self_closing && !VOID.contains(&name) {
                        stack.push(name.to_string());
                    }
                }
                i = end + 1;
            }
            b'>' => return Err(format!("raw > at {i}")),
            _ => {
                let end = rest[i..].find(['<', '>']).map_or(rest.len(), |e| e + i);
                check_refs(&rest[i..end], &refs)?;
                i = end;
            }
        }
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed: {stack:?}"))
    }
}

fn check_refs(text: &str, refs: &[&str]) -> Result<(), String> {
    for (at, _) in text.match_indices('&') {
        if !refs.iter().any(|r| text[at..].starts_with(r)) {
            return Err(format!("bare & in {text:?}"));
        }
    }
    Ok(())
}

#[test]
fn the_checker_rejects_broken_markup() {
    assert!(well_formed("<!DOCTYPE html><p>a &amp; b</p>").is_ok());
    assert!(well_formed("<!DOCTYPE html><p>a & b</p>").is_err());
    assert!(well_formed("<!DOCTYPE html><p><b></p></b>").is_err());
    assert!(well_formed("<!DOCTYPE html><p>").is_err());
    assert!(well_formed("<!DOCTYPE html><p title=\"a<b\"></p>").is_err());
    assert!(well_formed("<!DOCTYPE html><p>1 > 0</p>").is_err());
}

#[test]
fn one_histogram_and_one_time_chart_per_limit_with_keys() {
    let (r, ch) = report_and_charts();
    assert_eq!(r.limits.len(), 3);
    assert_eq!(ch.limits.len(), 3);
    let html = page(&r, &ch);
    well_formed(&html).unwrap();
    assert_eq!(html.matches("<svg class=\"histogram\"").count(), 3);
    // The quiet limit has no events: a histogram with its configured limit, no lines.
    assert_eq!(html.matches("<svg class=\"rates\"").count(), 2);
    for name in ["exim", "tb", "quiet"] {
        assert!(
            html.contains(&format!("<svg class=\"histogram\" data-limit=\"{name}\"")),
            "{name}"
        );
    }
    assert!(html.contains("&lt;flood&gt;"));
    assert!(!html.contains("<flood>"));
    assert!(!html.contains("<script"));
    // Nothing from other hosts: the only URL is the SVG namespace.
    let other = html.replace("http://www.w3.org/2000/svg", "");
    assert!(!other.contains("http://") && !other.contains("https://"));
}

#[test]
fn collected_peaks_match_the_report() {
    let (r, ch) = report_and_charts();
    for (l, c) in r.limits.iter().zip(&ch.limits) {
        assert_eq!(c.peaks.len(), l.keys - l.own_limit_keys, "{}", l.name);
        let max = c.peaks.iter().copied().fold(0.0, f64::max);
        assert_eq!(max, l.max, "{}", l.name);
        assert_eq!(c.series.len(), l.top.len());
        for (s, k) in c.series.iter().zip(&l.top) {
            assert_eq!(s.key, k.key);
            // The highest point of a top key's line is its peak.
            let top = s.points.iter().map(|p| p.1).fold(0.0, f64::max);
            assert_eq!(top, k.peak, "{} {}", l.name, k.key);
            assert!(s.points.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(s.points.len() <= SLICES + 1);
        }
    }
    let exim = &r.limits[0];
    assert_eq!(exim.top[0].key, "<flood>");
}

#[test]
fn markers_show_suggested_and_configured() {
    let (r, ch) = report_and_charts();
    let html = page(&r, &ch);
    let exim = &r.limits[0];
    assert!(html.contains(&format!("suggested {}", num(exim.suggested))));
    assert!(html.contains(&format!("configured {}", num(exim.configured))));
    // Every limit draws its configured value; the suggestion needs keys.
    assert_eq!(html.matches("class=\"marker configured\"").count(), 3 + 2);
    assert_eq!(html.matches("class=\"marker suggested\"").count(), 2);
}

#[test]
fn long_keys_are_cut_and_escaped() {
    let (mut r, mut ch) = report_and_charts();
    let long = format!("{}\"&<x>", "k".repeat(5000));
    r.limits[0].top[0].key = long.clone();
    ch.limits[0].series[0].key = long.clone();
    let html = page(&r, &ch);
    well_formed(&html).unwrap();
    assert!(!html.contains(&"k".repeat(1001)));
    assert!(html.contains(&format!("{}…", "k".repeat(NAME_CHARS - 1))));
}

fn limit_strategy() -> impl Strategy<Value = (LimitReport, LimitCharts)> {
    let key = ".{0,40}";
    (
        key,
        prop::collection::vec((key, 0.0f64..1e6, 0u64..1000), 0..6),
        prop::collection::vec(0.0f64..1e6, 0..50),
        0.0f64..1e6,
        0.0f64..1e6,
        prop::collection::vec(
            prop::collection::vec((0i64..10_000, 0.0f64..1e6), 0..20),
            0..6,
        ),
    )
        .prop_map(|(name, top, peaks, configured, suggested, series)| {
            let top: Vec<KeyPeak> = top
                .into_iter()
                .map(|(key, peak, events)| KeyPeak {
                    contained: (peak > 5e5).then(|| "restricted".to_string()),
                    key,
                    peak,
                    events,
                })
                .collect();
            let series = top
                .iter()
                .zip(series)
                .map(|(k, mut pts)| {
                    pts.sort_by_key(|p| p.0);
                    Series {
                        key: k.key.clone(),
                        points: pts
                            .into_iter()
                            .map(|(t, v)| (1_700_000_000_000_000 + t * 1_000_000, v))
                            .collect(),
                    }
                })
                .collect();
            let max = peaks.iter().copied().fold(0.0, f64::max);
            (
                LimitReport {
                    name,
                    algorithm: "exim".into(),
                    unit: "messages per <1h> & more".into(),
                    configured,
                    period: "1h".into(),
                    action: "defer".into(),
                    events: 1,
                    keys: peaks.len(),
                    p50: 0.0,
                    p90: 0.0,
                    p99: 0.0,
                    max,
                    top,
                    outlier_threshold: None,
                    ordinary_max: max,
                    suggested,
                    would_limit: Vec::new(),
                    over_configured: 0,
                    own_limit_keys: 0,
                    over_own_limit: 0,
                    own_limit_top: Vec::new(),
                    contained: Vec::new(),
                    capped_by: None,
                },
                LimitCharts { peaks, series },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_report_renders_well_formed(
        source in ".{0,60}",
        limits in prop::collection::vec(limit_strategy(), 0..4),
        span in 0i64..10_000,
    ) {
        let (limits, charts): (Vec<_>, Vec<_>) = limits.into_iter().unzip();
        let n = limits.len();
        let r = Report {
            source,
            since_us: None,
            until_us: None,
            first_us: Some(1_700_000_000_000_000),
            last_us: Some(1_700_000_000_000_000 + span * 1_000_000),
            lines: 1,
            events: 1,
            outside: 0,
            unknown_limit: 0,
            limits,
            baselines: Vec::new(),
        };
        let html = page(&r, &Charts { limits: charts });
        prop_assert!(well_formed(&html).is_ok(), "{:?}", well_formed(&html));
        prop_assert_eq!(html.matches("<svg class=\"histogram\"").count(), n);
        prop_assert!(!html.contains("NaN"));
    }
}

#[test]
fn contained_keys_are_flagged_in_the_page() {
    let c = config();
    let opts = Options {
        top: 5,
        ..Options::default()
    };
    let mut ev = events();
    // user3 was restricted by the exim limit: the suggestion stays under its peak.
    ev.push_str(
        "{\"event\":\"contained\",\"t\":1700000500,\"what\":\"restricted\",\"limit\":\"exim\",\"key\":\"user3\"}\n",
    );
    let model = crate::policy::compile(&c).unwrap();
    let r = analyze(&model, "ev", ev.as_bytes(), &opts).unwrap();
    let ch = collect(&model, "ev", ev.as_bytes(), &opts, &r).unwrap();
    let l = &r.limits[0];
    let user3 = l.contained.iter().find(|k| k.key == "user3").unwrap();
    assert!(l.suggested <= user3.peak, "{} {}", l.suggested, user3.peak);
    assert_eq!(l.capped_by.as_deref(), Some("user3"));
    let html = page(&r, &ch);
    well_formed(&html).unwrap();
    assert!(
        html.contains("<p class=\"contained\">Contained (restricted or held) in the period: <strong>user3</strong> (restricted, peak "),
        "{html}"
    );
    assert!(
        html.contains("held under the peak of <strong>user3</strong>"),
        "{html}"
    );
}
