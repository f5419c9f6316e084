//! The webhook client's HTTP status-line parser and URL parser: no panics; an accepted
//! status line starts with `HTTP/1.`, has a code in 100..=599 and re-parses from its
//! canonical form.
#![no_main]

use floodgate::report::http::{parse_status_line, Url};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = parse_status_line(data) {
        assert!(data.starts_with(b"HTTP/1."));
        assert!((100..=599).contains(&s.code));
        if s.reason.bytes().all(|b| b.is_ascii() && b >= b' ' || b == b'\t') {
            let again = format!("HTTP/1.{} {} {}", s.minor, s.code, s.reason);
            assert_eq!(parse_status_line(again.as_bytes()), Ok(s));
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(u) = Url::parse(text) {
            assert!(u.path.starts_with('/'));
            assert!(u.port > 0 && !u.host.is_empty());
        }
    }
});
