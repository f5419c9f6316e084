//! HeldMessage::decode: no panics on any bytes; whatever reads writes back to the same
//! bytes, and every strict prefix of a valid file is refused (a half-written file never
//! reads as a message).
#![no_main]

use floodgate::hold::HeldMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = HeldMessage::decode(data) else {
        return;
    };
    let bytes = m.encode();
    assert_eq!(bytes, data);
    for cut in [0, 1, bytes.len() / 2, bytes.len().saturating_sub(1)] {
        if cut < bytes.len() {
            assert!(HeldMessage::decode(&bytes[..cut]).is_err());
        }
    }
    let _ = (m.subject(), m.sender(), m.recipients());
});
