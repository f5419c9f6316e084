//! Fuzz target: ratio expressions (`ratio = "bounced_recipients / recipients"`) and the
//! `Auto-Submitted:` header field.
//!
//! Checks that parsing never panics, that an accepted expression has two different counts
//! that print back to an expression parsing to the same pair, that an error's offset is
//! inside the text, and that any header bytes are judged without panicking.
#![no_main]

use floodgate::policy::ratio::parse_expr;
use floodgate::smtp::auto_submitted::is_automatic;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = is_automatic(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_expr(text) {
        Ok((num, den)) => {
            assert_ne!(num, den);
            let again = format!("{} / {}", num.as_str(), den.as_str());
            assert_eq!(parse_expr(&again), Ok((num, den)));
        }
        Err(e) => assert!(e.at <= text.len(), "{e:?}"),
    }
});
