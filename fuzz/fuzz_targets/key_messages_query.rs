//! The queries of a key's messages: a `page=` is a page or a clear error, never a panic; a
//! CSV field of any text is one field (quoted when it must be) that reads back as the text.
#![no_main]

use floodgate::admin::messages::{csv_field, page_of, MAX_PAGE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match page_of(Some(&text)) {
        Ok(n) => assert!((1..=MAX_PAGE).contains(&n)),
        Err(e) => assert!(e.starts_with("page must be a whole number")),
    }
    let f = csv_field(&text);
    let back = match f.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(inner) if f.len() >= 2 => inner.replace("\"\"", "\""),
        _ => {
            assert!(!f.contains([',', '"', '\r', '\n']));
            f.clone()
        }
    };
    let guarded = text.starts_with(['=', '+', '-', '@']);
    assert_eq!(
        if guarded { &back[1..] } else { &back[..] },
        &*text
    );
});
