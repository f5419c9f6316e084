//! Fuzz target: lines of the smart host's log, read as Postfix's and as Exim's.
//!
//! Checks that reading never panics and that a delivery result names a non-empty queue
//! id and recipient that are part of the line.
#![no_main]

use floodgate::outcomes::logline::{Format, Line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for format in [Format::Postfix, Format::Exim] {
        if let Line::Outcome(o) = format.line(&text) {
            assert!(!o.queue_id.is_empty() && text.contains(o.queue_id));
            assert!(!o.recipient.is_empty() && text.contains(o.recipient));
            if let Some(orig) = o.original {
                assert!(text.contains(orig));
            }
        }
    }
});
