//! Fuzz target: `restrict_for` texts (a duration or `until_released`) and the
//! snapshot loader fed a restriction.
//!
//! Checks that parsing never panics, that an accepted duration prints to a text
//! that parses back to the same duration, and that a snapshot holding a
//! restriction with the input as key and reason loads back the same restriction.
#![no_main]

use floodgate::store::{MemoryStore, RestrictFor, Restriction};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(f) = RestrictFor::parse(text) {
        assert_eq!(RestrictFor::parse(&f.text()), Ok(f), "{text:?}");
        if let RestrictFor::For(d) = f {
            assert!(!d.is_zero());
        }
    }
    let store = MemoryStore::default();
    let r = Restriction {
        key: text.to_string(),
        limit: "l".into(),
        since_us: 1,
        until_us: RestrictFor::parse(text).ok().and_then(RestrictFor::micros),
        rate: Some(1.5),
        limit_text: text.to_string(),
        by: "fuzz".into(),
        reason: text.to_string(),
        evidence: serde_json::json!({ "subjects": [text] }),
    };
    store.restricted_set().restore(r.clone());
    let bytes = store.snapshot_bytes();
    let again = MemoryStore::default();
    again
        .load_snapshot_bytes(std::path::Path::new("fuzz"), &bytes)
        .expect("own snapshot loads");
    assert_eq!(again.restricted_set().all(), vec![r]);
    // Corrupt snapshots never panic.
    let _ = again.load_snapshot_bytes(std::path::Path::new("fuzz"), data);
});
