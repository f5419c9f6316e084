//! Event-log lines: any text never panics the readers; an evaluation read writes back to a
//! line that reads as the same evaluation (the writer and readers share one schema).
#![no_main]

use floodgate::eventlog::{Containment, Evaluation};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(e) = Evaluation::parse(&text) {
        let mut out = Vec::new();
        e.to_line(&mut out);
        let again = Evaluation::parse(std::str::from_utf8(&out).expect("the writer writes UTF-8"))
            .expect("a written line reads back");
        // Seconds through an f64: exact to the microsecond up to 2^52 µs, then relative.
        assert!(again.time_us.abs_diff(e.time_us) <= 1 + (e.time_us.unsigned_abs() >> 52));
        assert_eq!(again.count, e.count);
        assert_eq!(again.own_limit, e.own_limit);
    }
    if let Some(c) = Containment::parse(&text) {
        assert!(Containment::parse(&c.to_line()).is_some());
    }
});
