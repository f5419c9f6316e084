//! parse_proxy_header: no panics, consumed length in bounds, the result is
//! stable once reached, and v2 headers re-encode to the same addresses.
#![no_main]

use floodgate::smtp::proxy_header::{V1_MAX, V2_MAX};
use floodgate::smtp::{encode_proxy_v2, parse_proxy_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let result = parse_proxy_header(data);
    // Any prefix either needs more bytes or already gives the same answer.
    for cut in [0, 1, 5, 6, 11, 12, 13, 15, 16, data.len() / 2] {
        if cut < data.len() {
            let r = parse_proxy_header(&data[..cut]);
            if r != Ok(None) {
                if let (Ok(Some((h1, n1))), Ok(Some((h2, n2)))) = (&r, &result) {
                    assert_eq!((h1, n1), (h2, n2));
                } else {
                    assert_eq!(&r, &result);
                }
            }
        }
    }
    let Ok(Some((header, n))) = result else {
        return;
    };
    assert!(n <= data.len() && n <= V1_MAX.max(V2_MAX));
    assert_eq!(parse_proxy_header(&data[..n]), Ok(Some((header, n))));
    if let (Some(s), Some(d)) = (header.source, header.destination) {
        let wire = encode_proxy_v2(s, d);
        let (h2, n2) = parse_proxy_header(&wire).unwrap().unwrap();
        assert_eq!(n2, wire.len());
        if s.is_ipv4() == d.is_ipv4() {
            assert_eq!(h2, header);
        }
    }
});
