//! Fuzz target: what the web console reads from outside: a `Cookie` header, a login or
//! logout form body, event-log lines for a key's history, and any text it escapes.
//!
//! Checks that nothing panics, that a found cookie value is a part of the header, that
//! escaped text carries no markup and is cut on a character boundary, and that a key's
//! history has one value per minute of the hour.
#![no_main]

use floodgate::admin::console::{auth, html, keylog};
use libfuzzer_sys::fuzz_target;

const NOW_MIN: i64 = 29_401_200;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(v) = auth::cookie(&text, auth::COOKIE) {
        assert!(text.contains(v));
    }
    let _ = auth::form_field(data, "token");
    let e = html::escape(&text);
    assert!(!e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''));
    let (cut, _) = html::truncate(&text, 17);
    assert!(text.starts_with(cut) && cut.chars().count() <= 17);
    let key = text.lines().next().unwrap_or("");
    for values in keylog::sum_lines(data, key, NOW_MIN).values() {
        assert_eq!(values.len(), 60);
    }
});
