//! Fuzz target: upstream's answer to the end of data, for the queue id.
//!
//! Checks that reading never panics, that a queue id found is non-empty, at most
//! `MAX_LEN` characters of the queue-id alphabet and part of the text, and that it is
//! found again after Postfix's and Exim's markers.
#![no_main]

use floodgate::outcomes::queue_id::{parse, parse_line, MAX_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(id) = parse_line(&text) {
        assert!(!id.is_empty() && id.len() <= MAX_LEN);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')));
        assert!(text.contains(id));
        assert_eq!(parse_line(&format!("2.0.0 Ok: queued as {id}")), Some(id));
        assert_eq!(parse_line(&format!("OK id={id}")), Some(id));
    }
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let _ = parse(&lines);
});
