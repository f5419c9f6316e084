//! `postqueue -j` listings and pickup's Received line: any text never panics; an entry read
//! has a queue id that is safe to hand to postsuper only when it is plain; a user id is read
//! only from a text that has pickup's mark, and it is the number written there; postcat's
//! print gives no more header and body than the text holds.
#![no_main]

use floodgate::postfix::queue::{pickup_userid, read_listing, read_postcat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for entry in read_listing(&text).flatten() {
        if entry.has_plain_id() {
            assert!(entry.queue_id.bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_ne!(entry.queue_id.to_ascii_uppercase(), "ALL");
        }
    }
    if let Some(uid) = pickup_userid(&text) {
        const MARK: &str = "(Postfix, from userid ";
        let at = text.find(MARK).expect("read only after the mark") + MARK.len();
        let digits: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
        assert_eq!(digits.parse::<u32>().ok(), Some(uid));
    }
    if let Some(m) = read_postcat(&text) {
        assert!(m.header_section.len() as u64 + m.body_size <= text.len() as u64);
    }
});
