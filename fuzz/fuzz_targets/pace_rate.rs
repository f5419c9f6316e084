//! PaceRate::parse (the `paced` field of a held file): no panics on any text; whatever
//! reads writes back as text that reads the same, with a finite positive interval.
#![no_main]

use floodgate::hold::pace::PaceRate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(r) = PaceRate::parse(text) else {
        return;
    };
    assert_eq!(PaceRate::parse(&r.to_string()), Ok(r));
    let i = r.interval(r.weight(3, 1000));
    assert!(i <= floodgate::hold::pace::MAX_INTERVAL);
});
