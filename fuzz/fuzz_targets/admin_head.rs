//! The admin listener's request-head check: no panics, the same verdict whatever the
//! chunks the bytes arrive in, and a head it passes whole has every LF after a CR.
#![no_main]

use floodgate::admin::http::guard::HeadCheck;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else {
        return;
    };
    let mut whole = HeadCheck::default();
    let verdict = whole.feed(bytes).map(|()| whole.done());
    let cut = usize::from(cut).min(bytes.len());
    let mut chunked = HeadCheck::default();
    let split = chunked
        .feed(&bytes[..cut])
        .and_then(|()| chunked.feed(&bytes[cut..]))
        .map(|()| chunked.done());
    assert_eq!(verdict, split);
    if verdict == Ok(true) {
        // Up to the blank line ending the head, each LF follows a CR.
        let end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(bytes.len(), |i| i + 4);
        for (i, &b) in bytes[..end].iter().enumerate() {
            assert!(b != 0);
            if b == b'\n' {
                assert!(i > 0 && bytes[i - 1] == b'\r');
            }
        }
    }
});
