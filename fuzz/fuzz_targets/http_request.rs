//! The admin HTTP request parser: no panics, `used` within the input, a request found in a
//! prefix is the same whatever follows it, and every strict prefix of a parsed request is
//! "incomplete".
#![no_main]

use floodgate::admin::http::{parse_request, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_head: 512,
        max_headers: 8,
        max_body: 256,
    };
    let Ok(Some((req, used))) = parse_request(data, &limits) else {
        return;
    };
    assert!(used <= data.len());
    assert!(!req.method.is_empty());
    assert!(req.path.starts_with('/'));
    // The request does not depend on bytes after it.
    let again = parse_request(&data[..used], &limits)
        .expect("same bytes parse")
        .expect("complete");
    assert_eq!(again, (req, used));
    // Shorter inputs wait for more (bounded number of cuts).
    for cut in (0..used).step_by((used / 16).max(1)) {
        assert_eq!(parse_request(&data[..cut], &limits), Ok(None));
    }
});
