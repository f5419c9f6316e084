//! Fuzz target: `baseline` strings and the event-log lines baselines are computed from.
//!
//! Checks that parsing a baseline never panics and that an accepted one prints to text that
//! parses back to the same; and that reading any bytes as event lines never panics, counts
//! each non-empty line at most once, and gives finite, positive per-key peaks.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use floodgate::generation::Generation;
use floodgate::policy::baseline::BaselineSpec;
use floodgate::policy::model::PolicyModel;
use floodgate::report::baseline::DailyPeaks;
use libfuzzer_sys::fuzz_target;

/// Noon UTC, 2026-11-25.
const NOW_US: i64 = 1_764_072_000_000_000;

fn model() -> &'static PolicyModel {
    static MODEL: OnceLock<PolicyModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let text = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
[report]
events = "/nonexistent/events.jsonl"
[[limit]]
name = "daily"
count = "messages"
rate = "50 / 1d"
burst = "50"
baseline = "p95 / 14d"
[[limit]]
name = "hourly"
count = "recipients"
rate = "20 / 1h"
burst = "20"
baseline = "p50 / 3d"
"#;
        let c = Generation::parse(Path::new("/fuzz.toml"), text).expect("fuzz config");
        (*c.policy).clone()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = text.lines().next().unwrap_or("");
    if let Ok(s) = BaselineSpec::parse(first) {
        assert_eq!(BaselineSpec::parse(&s.text()), Ok(s), "{first:?}");
    }
    let mut peaks = DailyPeaks::new(model(), NOW_US);
    peaks.read(text.as_bytes()).expect("reading from memory");
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count() as u64;
    assert!(peaks.skipped + peaks.events <= lines);
    for set in peaks.finish(NOW_US).values() {
        for (k, p) in &set.peaks {
            assert!(p.is_finite() && *p > 0.0, "{k}: {p}");
        }
    }
});
