//! `floodgate report`'s inputs: event lines (any bytes: an error with a line number or a
//! report, never a panic) and `--since`/`--until` times (RFC 3339 round trip).
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use floodgate::generation::Generation;
use floodgate::report::analyze::{analyze, Options};
use floodgate::time::{parse_rfc3339, parse_time_arg, rfc3339};
use libfuzzer_sys::fuzz_target;

fn config() -> &'static Generation {
    static C: OnceLock<Generation> = OnceLock::new();
    C.get_or_init(|| {
        Generation::parse(
            Path::new("fuzz.toml"),
            r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:25"
[[limit]]
name = "e"
ratelimit = "10 / 1h / per_addr / ${sender_address}"
[[limit]]
name = "g"
count = "messages"
rate = "1 / 1s"
burst = "3"
[[limit]]
name = "b"
count = "messages"
algorithm = "bucket"
rate = "1 / 1s"
burst = "3"
"#,
        )
        .expect("fuzz config")
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(us) = parse_rfc3339(text) {
            assert_eq!(parse_rfc3339(&rfc3339(us)), Ok(us));
        }
        let _ = parse_time_arg(text, 1_700_000_000_000_000);
    }
    let opts = Options {
        top: 3,
        ..Options::default()
    };
    if let Ok(r) = analyze(&config().policy, "fuzz", data, &opts) {
        for l in &r.limits {
            assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.max || l.keys == 0);
            assert!(l.suggested >= 1.0);
        }
    }
});
