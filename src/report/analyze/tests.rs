use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::policy::model::PolicyModel;

fn model() -> PolicyModel {
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
name = "addr"
ratelimit = "50 / 1h / per_addr / ${authenticated_id}"
action = "warn"

[[limit]]
name = "tb"
count = "messages"
rate = "1 / 1s"
burst = "3"
action = "warn"

[[limit]]
name = "bk"
count = "messages"
algorithm = "bucket"
rate = "1 / 1s"
burst = "3"
action = "warn"
"#;
    crate::policy::compile(&Config::parse(Path::new("/t/c.toml"), text).unwrap()).unwrap()
}

fn run(lines: &str, opts: &Options) -> Result<Report, ReportError> {
    analyze(&model(), "ev", lines.as_bytes(), opts)
}

fn opts() -> Options {
    Options {
        top: 5,
        ..Options::default()
    }
}

fn line(t: f64, limit: &str, key: &str) -> String {
    format!("{{\"t\":{t},\"limit\":\"{limit}\",\"key\":\"{key}\",\"count\":1}}\n")
}

/// The per-key maximum of `floodgate simulate`'s rates for `spec` over `events`.
fn simulated_max(spec: &str, events: &str, key_field: &str) -> f64 {
    let mut out = Vec::new();
    crate::simulate::run(spec, events.as_bytes(), &mut out).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["key"].as_str().unwrap().ends_with(key_field))
        .map(|v| v["rate"].as_f64().unwrap())
        .fold(f64::NEG_INFINITY, f64::max)
}

#[test]
fn steps_and_percentiles() {
    assert_eq!(step_125(0.0), 1.0);
    assert_eq!(step_125(1.0), 1.0);
    assert_eq!(step_125(1.01), 2.0);
    assert_eq!(step_125(2.0), 2.0);
    assert_eq!(step_125(3.0), 5.0);
    assert_eq!(step_125(7.0), 10.0);
    assert_eq!(step_125(10.0), 10.0);
    assert_eq!(step_125(16.4), 20.0);
    assert_eq!(step_125(1000.0), 1000.0);
    assert_eq!(step_125(1001.0), 2000.0);
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&v, 0.5), 50.0);
    assert_eq!(percentile(&v, 0.9), 90.0);
    assert_eq!(percentile(&v, 0.99), 99.0);
    assert_eq!(percentile(&v, 1.0), 100.0);
    assert_eq!(percentile(&[4.0], 0.5), 4.0);
    assert_eq!(percentile(&[], 0.5), 0.0);
}

#[test]
fn exim_peaks_match_simulate_and_suggestion_covers_ordinary_keys() {
    let mut ev = String::new();
    let mut sim = String::new();
    let users = [
        ("alice", 3),
        ("bob", 5),
        ("carol", 8),
        ("dave", 4),
        ("mallory", 120),
    ];
    for (u, n) in users {
        for i in 0..n {
            let t = 1000.0 + f64::from(i) * 2.5;
            ev.push_str(&line(t, "exim", u));
            sim.push_str(&format!("{{\"t\":{t},\"key\":\"{u}\"}}\n"));
        }
    }
    let r = run(&ev, &opts()).unwrap();
    assert_eq!(r.events, 140);
    let l = &r.limits[0];
    assert_eq!((l.name.as_str(), l.keys, l.events), ("exim", 5, 140));
    for (u, _) in users {
        let want = simulated_max(
            "100 / 1h / per_rcpt / strict / ${authenticated_id}",
            &sim,
            u,
        );
        let got = l.top.iter().find(|k| k.key == u).unwrap().peak;
        // serde_json's float parsing may be one unit in the last place off.
        assert!((got - want).abs() <= want * 1e-14, "{u}: {got} vs {want}");
    }
    assert_eq!(l.top[0].key, "mallory");
    assert_eq!(l.max, l.top[0].peak);
    // Median 5ish, mallory far above: an outlier; suggestion = 2 x carol's peak, 1-2-5.
    let carol = l.top.iter().find(|k| k.key == "carol").unwrap().peak;
    assert_eq!(l.ordinary_max, carol);
    assert_eq!(l.suggested, step_125(2.0 * carol));
    assert!(l.suggested > carol);
    assert_eq!(l.would_limit.len(), 1);
    assert_eq!(l.would_limit[0].key, "mallory");
    assert_eq!(l.over_configured, 1);
    // Other limits are reported, without events.
    assert_eq!(r.limits.len(), 4);
    assert_eq!(r.limits[1].keys, 0);
}

#[test]
fn unique_sets_count_distinct_values() {
    let mut ev = String::new();
    for i in 0..10 {
        let u = i % 3; // three distinct recipients
        ev.push_str(&format!(
            "{{\"t\":{},\"limit\":\"addr\",\"key\":\"alice\",\"count\":1,\"unique\":\"r{u}@x\"}}\n",
            100 + i
        ));
    }
    let r = run(&ev, &opts()).unwrap();
    let l = r.limits.iter().find(|l| l.name == "addr").unwrap();
    assert!(l.max < 3.0 && l.max > 2.9, "{}", l.max);
}

#[test]
fn bucket_levels_are_demand() {
    let mut ev = String::new();
    // Five at once, then one 2s later: level 5, then 5 - 2 + 1 = 4.
    for _ in 0..5 {
        ev.push_str(&line(10.0, "tb", "k"));
        ev.push_str(&line(10.0, "bk", "k"));
    }
    ev.push_str(&line(12.0, "tb", "k"));
    ev.push_str(&line(12.0, "bk", "k"));
    let r = run(&ev, &opts()).unwrap();
    for name in ["tb", "bk"] {
        let l = r.limits.iter().find(|l| l.name == name).unwrap();
        assert!((l.max - 5.0).abs() < 1e-9, "{name}: {}", l.max);
        assert_eq!(l.unit, "messages in the bucket");
        assert_eq!(l.over_configured, 1, "{name}");
        assert_eq!(l.suggested, 10.0);
    }
}

fn own_line(t: f64, limit: &str, key: &str, own: f64) -> String {
    format!(
        "{{\"t\":{t},\"limit\":\"{limit}\",\"key\":\"{key}\",\"count\":1,\"own_limit\":{own}}}\n"
    )
}

#[test]
fn keys_with_their_own_limit_stand_apart() {
    // Ten ordinary users at 2 messages each; "bulk", allowed 500 by limit_list, sends 300
    // and "greedy", allowed 100, sends 150 (all within one minute, period 1h).
    let mut ev = String::new();
    for u in 0..10 {
        for i in 0..2 {
            ev.push_str(&line(f64::from(i), "exim", &format!("u{u}")));
        }
    }
    for i in 0..300 {
        ev.push_str(&own_line(f64::from(i) * 0.1, "exim", "bulk", 500.0));
    }
    for i in 0..150 {
        ev.push_str(&own_line(f64::from(i) * 0.1, "exim", "greedy", 100.0));
    }
    let r = run(&ev, &opts()).unwrap();
    let l = r.limits.iter().find(|l| l.name == "exim").unwrap();
    assert_eq!((l.keys, l.own_limit_keys, l.over_own_limit), (12, 2, 1));
    // The ordinary keys alone decide the percentiles and the suggestion: without the split
    // "bulk" and "greedy" would be the outliers the suggestion limits.
    assert!(l.max < 3.0, "{}", l.max);
    assert_eq!(l.suggested, 5.0);
    assert!(l.would_limit.is_empty());
    assert_eq!(l.over_configured, 0);
    assert!(l.top.iter().all(|k| k.key.starts_with('u')));
    // Nearest to its own limit first: greedy (~150 of 100), then bulk (~300 of 500).
    let names: Vec<&str> = l.own_limit_top.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(names, ["greedy", "bulk"]);
    assert!(l.own_limit_top[0].over && !l.own_limit_top[1].over);
    assert_eq!(l.own_limit_top[1].own_limit, 500.0);
    assert!(
        l.own_limit_top[1].peak > 290.0,
        "{}",
        l.own_limit_top[1].peak
    );
    let text = crate::report::render::text(&r);
    assert!(
        text.contains("keys with their own limit (limit_list): 2, over it: 1"),
        "{text}"
    );
    assert!(
        text.contains("of 100      greedy  (150 events)  over"),
        "{text}"
    );

    // Only keys with their own limit: no suggestion is made for the others.
    let r = run(&own_line(1.0, "exim", "bulk", 500.0), &opts()).unwrap();
    let text = crate::report::render::text(&r);
    assert!(text.contains("every key has its own limit"), "{text}");
    assert!(!text.contains("suggested limit"), "{text}");
}

#[test]
fn a_bucket_key_with_its_own_limit_drains_at_its_own_rate() {
    // tb and bk drain 1 a second; "big" is allowed 4 (so drains 4 a second) by its list
    // value. Eight events at 10 s and eight at 12 s: an ordinary key reaches 8 - 2 + 8 = 14,
    // "big" 8 - 8 + 8 = 8, over its own 4.
    let mut ev = String::new();
    for name in ["tb", "bk"] {
        for t in [10.0, 12.0] {
            for _ in 0..8 {
                ev.push_str(&line(t, name, "small"));
                ev.push_str(&own_line(t, name, "big", 4.0));
            }
        }
    }
    let r = run(&ev, &opts()).unwrap();
    for name in ["tb", "bk"] {
        let l = r.limits.iter().find(|l| l.name == name).unwrap();
        assert!((l.max - 14.0).abs() < 1e-9, "{name}: {}", l.max);
        assert_eq!((l.keys, l.own_limit_keys, l.over_own_limit), (2, 1, 1));
        let big = &l.own_limit_top[0];
        assert_eq!((big.key.as_str(), big.own_limit), ("big", 4.0));
        assert!((big.peak - 8.0).abs() < 1e-9, "{name}: {}", big.peak);
        assert!(big.over, "{name}");
    }
}

#[test]
fn since_until_and_filters() {
    let mut ev = String::new();
    for t in [10.0, 20.0, 30.0, 40.0] {
        ev.push_str(&line(t, "exim", "a"));
    }
    ev.push_str(&line(25.0, "gone", "a"));
    let o = Options {
        since_us: Some(20_000_000),
        until_us: Some(40_000_000),
        ..opts()
    };
    let r = run(&ev, &o).unwrap();
    assert_eq!((r.events, r.outside, r.unknown_limit), (2, 2, 1));
    assert_eq!(r.first_us, Some(20_000_000));
    assert_eq!(r.last_us, Some(30_000_000));
    let o = Options {
        limit: Some("tb".into()),
        ..opts()
    };
    let r = run(&ev, &o).unwrap();
    assert_eq!((r.events, r.limits.len()), (0, 1));
    assert!(crate::report::render::text(&r).contains("no events in this period"));
    let o = Options {
        limit: Some("nope".into()),
        ..opts()
    };
    let e = run(&ev, &o).unwrap_err().to_string();
    assert!(
        e.contains("no limit called \"nope\"") && e.contains("exim, addr"),
        "{e}"
    );
    let o = Options {
        since_us: Some(5),
        until_us: Some(5),
        ..opts()
    };
    assert!(matches!(run(&ev, &o), Err(ReportError::EmptyRange)));
}

#[test]
fn corrupt_lines_name_their_number() {
    let ev = format!(
        "{}\n{}{{\"t\":1,\"limit\":",
        line(1.0, "exim", "a"),
        line(2.0, "exim", "a")
    );
    let e = run(&ev, &opts()).unwrap_err().to_string();
    assert!(e.starts_with("ev:4: "), "{e}");
    for (bad, want) in [
        ("{\"t\":\"x\",\"limit\":\"exim\"}", "invalid type"),
        ("{\"t\":1e300,\"limit\":\"exim\"}", "finite"),
        ("{\"t\":1,\"limit\":\"exim\",\"count\":-1}", "count"),
        ("{\"t\":1,\"limit\":\"exim\",\"own_limit\":0}", "own_limit"),
        (
            "{\"t\":1,\"limit\":\"exim\",\"own_limit\":\"5\"}",
            "invalid type",
        ),
        ("{\"t\":1,\"limit\":\"exim\",\"unique\":\"x\"}", "unique"),
        ("{\"t\":1,\"limit\":\"tb\",\"unique\":\"x\"}", "unique"),
        ("{\"limit\":\"exim\"}", "missing field `t`"),
        ("not json", "expected"),
    ] {
        let e = run(&format!("{bad}\n"), &opts()).unwrap_err().to_string();
        assert!(e.starts_with("ev:1: ") && e.contains(want), "{bad}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The suggestion is above every ordinary key's peak, outliers are exactly the keys
    /// above the threshold, and every key the suggestion limits is an outlier.
    #[test]
    fn suggestion_is_above_ordinary_peaks(
        counts in proptest::collection::vec(1u32..40, 1..12),
        gap in 1u32..600,
    ) {
        let mut ev = String::new();
        for (k, &n) in counts.iter().enumerate() {
            for i in 0..n {
                ev.push_str(&line(f64::from(i * gap) / 10.0, "exim", &format!("u{k}")));
            }
        }
        let r = run(&ev, &opts()).unwrap();
        let l = &r.limits[0];
        prop_assert_eq!(l.keys, counts.len());
        let mut all: Vec<f64> = Vec::new();
        let top = Options { top: 100, ..opts() };
        let full = run(&ev, &top).unwrap();
        for k in &full.limits[0].top {
            all.push(k.peak);
            let outlier = l.outlier_threshold.is_some_and(|t| k.peak > t);
            if !outlier {
                prop_assert!(k.peak < l.suggested, "{} >= {}", k.peak, l.suggested);
            }
        }
        for k in &l.would_limit {
            prop_assert!(l.outlier_threshold.is_some_and(|t| k.peak > t));
        }
        all.sort_by(f64::total_cmp);
        prop_assert_eq!(l.max, *all.last().unwrap());
        prop_assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.max);
    }
}

fn contained_line(t: f64, what: &str, limit: &str, key: &str) -> String {
    format!(
        "{{\"event\":\"contained\",\"t\":{t},\"what\":\"{what}\",\"limit\":\"{limit}\",\"key\":\"{key}\"}}\n"
    )
}

/// Ten ordinary keys of about 30 and two stolen accounts of about 66 and 52, neither an
/// outlier (10 x the median is far above them).
fn stolen_accounts() -> String {
    let mut ev = String::new();
    let mut users: Vec<(String, u32)> = (0..10).map(|i| (format!("u{i}"), 25 + i)).collect();
    users.push(("stolen1".into(), 66));
    users.push(("stolen2".into(), 52));
    for (u, n) in &users {
        for i in 0..*n {
            ev.push_str(&line(1000.0 + f64::from(i), "exim", u));
        }
    }
    ev
}

#[test]
fn contained_keys_are_flagged_and_hold_the_suggestion_under_their_peaks() {
    // Without the containment lines the suggestion lets both stolen accounts through.
    let plain = run(&stolen_accounts(), &opts()).unwrap();
    let l = &plain.limits[0];
    let peak = |l: &LimitReport, k: &str| l.top.iter().find(|p| p.key == k).unwrap().peak;
    assert_eq!(
        l.outlier_threshold.map(|t| t > peak(l, "stolen1")),
        Some(true)
    );
    assert!(l.suggested > peak(l, "stolen1"), "{}", l.suggested);
    assert!(l.contained.is_empty() && l.capped_by.is_none());
    assert!(l.top.iter().all(|k| k.contained.is_none()));

    let mut ev = stolen_accounts();
    ev.push_str(&contained_line(1070.0, "restricted", "exim", "stolen1"));
    ev.push_str(&contained_line(1071.0, "held", "exim", "stolen2"));
    ev.push_str(&contained_line(1072.0, "held", "exim", "stolen2"));
    // A deferral is not containment; a key held by another limit, under this one's
    // configured value, does not cap it.
    ev.push_str(&contained_line(1073.0, "defer", "exim", "u9"));
    ev.push_str(&contained_line(1074.0, "held", "tb", "u8"));
    let r = run(&ev, &opts()).unwrap();
    let l = &r.limits[0];
    let (p1, p2) = (peak(l, "stolen1"), peak(l, "stolen2"));
    assert!(p1 > p2);
    assert!(
        crate::limit::ewma::is_over(p2, l.suggested),
        "{} {p2}",
        l.suggested
    );
    assert!(l.suggested <= p2);
    assert_eq!(l.suggested, step_under("exim", p2));
    assert_eq!(l.capped_by.as_deref(), Some("stolen2"));
    let flagged: Vec<(&str, Option<&str>)> = l
        .contained
        .iter()
        .map(|k| (k.key.as_str(), k.contained.as_deref()))
        .collect();
    assert_eq!(
        flagged,
        [
            ("stolen1", Some("restricted")),
            ("stolen2", Some("held")),
            ("u8", Some("held"))
        ]
    );
    let top: Vec<Option<&str>> = l.top.iter().map(|k| k.contained.as_deref()).collect();
    assert_eq!(top[..2], [Some("restricted"), Some("held")]);
    // Both stolen accounts are among the keys the suggestion would have limited.
    let limited: Vec<&str> = l.would_limit.iter().map(|k| k.key.as_str()).collect();
    assert!(
        limited.contains(&"stolen1") && limited.contains(&"stolen2"),
        "{limited:?}"
    );
    // The ordinary maximum leaves contained keys out.
    assert_eq!(l.ordinary_max, peak(l, "u9"));
    // The text report says so.
    let text = crate::report::render::text(&r);
    assert!(text.contains("stolen1  [restricted]"), "{text}");
    assert!(text.contains("held under the peak of stolen2"), "{text}");
    // Containments outside --since/--until are not counted.
    let late = Options {
        until_us: Some(1_069_000_000),
        ..opts()
    };
    let r = run(&ev, &late).unwrap();
    assert!(r.limits[0].contained.is_empty());
}

#[test]
fn step_under_is_the_highest_step_a_peak_is_over() {
    assert_eq!(step_under("exim", 52.0), 50.0);
    assert_eq!(step_under("exim", 50.0), 50.0);
    assert_eq!(step_under("gcra", 50.0), 20.0);
    assert_eq!(step_under("exim", 0.3), 1.0);
    assert_eq!(step_under("exim", 1234.0), 1000.0);
}
