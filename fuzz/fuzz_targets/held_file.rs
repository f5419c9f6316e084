//! The held file's readers on any bytes: `read::head` (what start-up, listings, expiry,
//! pacing and claims read), `read::header_section` (`held show`) and `read::message` (a
//! release), the same functions the spool runs on its files. No panics and no allocation
//! beyond the input's length whatever lengths the bytes claim; the three agree; whatever
//! reads writes back to the same bytes (version 2) or to a version 2 file that reads the
//! same (version 1); every strict prefix of a file is refused (a half-written file never
//! reads as a message).
#![no_main]

use floodgate::hold::read;
use floodgate::hold::HeldMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let head = read::head(data);
    let section = read::header_section(data);
    let Ok(m) = read::message(data) else {
        return;
    };
    assert_eq!(head.unwrap(), m.head());
    assert_eq!(section.unwrap().1, m.header_section());
    let bytes = m.encode();
    if data.starts_with(floodgate::hold::format::MAGIC.as_bytes()) {
        assert_eq!(bytes, data);
    } else {
        assert_eq!(HeldMessage::decode(&bytes).as_ref(), Ok(&m));
    }
    for cut in [0, 1, bytes.len() / 2, bytes.len().saturating_sub(1)] {
        if cut < bytes.len() {
            assert!(read::head(&bytes[..cut]).is_err());
            assert!(HeldMessage::decode(&bytes[..cut]).is_err());
        }
    }
    let _ = (m.envelope.sender(), m.envelope.recipients());
});
