//! Differential session target: any client byte stream through a real floodgate Session in
//! front of a strict reference upstream; upstream must hold exactly the MAILs, RCPTs and
//! messages floodgate counted, and the client must be told exactly the acceptances upstream
//! gave. The harness is shared with `tests/session_diff.rs` (see `tests/diff/`).
//!
//! Input: flags (bit 0: bare_line_endings = normalize; bits 1-7: client write size, 0 =
//! all at once), upstream script length and bytes, policy script length and bytes, then
//! the client stream.
#![no_main]

#[path = "../../tests/diff/mod.rs"]
mod diff;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(case) = diff::Case::from_bytes(data) else {
        return;
    };
    if let Err(e) = diff::Harness::get().run(&case) {
        panic!("differential check failed: {e}\n{case:?}");
    }
});
