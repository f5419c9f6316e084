//! The Postfix policy request reader: any bytes, cut into lines, never panic; a request it
//! answers holds at most the attribute limit, and reading the same lines again gives the
//! same requests (the reader keeps nothing from an error); any text makes an action of one
//! line and the empty line.
#![no_main]

use floodgate::postfix::policy::{PolicyAction, RequestReader, MAX_ATTRIBUTES};
use libfuzzer_sys::fuzz_target;

fn read(data: &[u8]) -> Vec<Result<usize, String>> {
    let mut r = RequestReader::default();
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        match r.line(line) {
            Ok(Some(req)) => {
                let n = req.attributes().count();
                assert!(n <= MAX_ATTRIBUTES);
                let _ = (req.protocol_state(), req.client_address(), req.size());
                let _ = (req.recipient_count(), req.sasl_username(), req.instance());
                out.push(Ok(n));
            }
            Ok(None) => assert!(r.in_request()),
            Err(e) => {
                assert!(!r.in_request());
                out.push(Err(e.to_string()));
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    assert_eq!(read(data), read(data));
    let text = String::from_utf8_lossy(data);
    let wire = PolicyAction::DeferIfPermit(text.into_owned()).encode();
    assert!(wire.ends_with("\n\n"));
    assert_eq!(wire.matches('\n').count(), 2);
});
