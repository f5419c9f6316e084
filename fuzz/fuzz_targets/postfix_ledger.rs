//! The ledger of Postfix's hold queue: any file never panics; what reads has plain queue
//! ids only, and writing it again reads back the same lines.
#![no_main]

use floodgate::hold::postfix::line::{encode, parse};
use floodgate::postfix::queue::is_queue_id;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(lines) = parse(data) {
        for l in &lines {
            assert!(is_queue_id(l.queue_id()));
        }
        let again = encode(&lines);
        assert_eq!(parse(again.as_bytes()).expect("written lines read"), lines);
    }
});
