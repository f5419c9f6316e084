//! header_fields::read: no panics, and what it reads (directly for simple one-line fields,
//! through mail-parser for the wanted fields only, or the whole section) is what floodgate's
//! mail-parser configuration reads from the whole header section. (That configuration skips
//! every other field; the property tests compare it with mail-parser parsing every field.)
#![no_main]

use floodgate::smtp::header_fields::{by_mail_parser, header_end, read};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = by_mail_parser(&data[..header_end(data)]);
    assert_eq!(read(data), whole, "{}", data.escape_ascii());
});
