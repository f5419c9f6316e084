//! The milter packet reader: any bytes frame and parse without panic; a framed packet
//! re-encodes to the same bytes; a prefix of a stream either waits for more or frames the
//! same first packet; a parsed negotiation always agrees within what the MTA offered.
#![no_main]

use floodgate::postfix::milter::{
    actions, negotiate, next_packet, steps, write_packet, Command, Wanted,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let first = next_packet(data);
    for cut in [0, 3, 4, 5, data.len() / 2] {
        if cut < data.len() {
            match (next_packet(&data[..cut]), &first) {
                (Ok(None), _) => {}
                (r, f) => assert_eq!(&r, f),
            }
        }
    }
    let mut rest = data;
    while let Ok(Some((p, used))) = next_packet(rest) {
        let mut again = Vec::new();
        write_packet(&mut again, p.code, &[p.data]);
        assert_eq!(&again[..], &rest[..used]);
        if let Ok(Command::Negotiate(offer)) = Command::parse(p) {
            let wanted = Wanted {
                needed_actions: actions::QUARANTINE,
                optional_actions: actions::ADD_HEADERS,
                steps: steps::NO_REPLY_HEADER | steps::NO_UNKNOWN,
                macros: &[],
            };
            if let Ok(a) = negotiate(offer, &wanted) {
                assert_eq!(a.options.actions & !offer.actions, 0);
                assert_eq!(a.options.steps & !offer.steps, 0);
            }
        }
        rest = &rest[used..];
    }
});
