use super::*;
use proptest::prelude::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn v1_tcp4() {
    let buf = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 587\r\nEHLO x\r\n";
    let (h, n) = parse_proxy_header(buf).unwrap().unwrap();
    assert_eq!(h.source, Some(sa("192.0.2.1:56324")));
    assert_eq!(h.destination, Some(sa("198.51.100.2:587")));
    assert_eq!(&buf[n..], b"EHLO x\r\n");
}

#[test]
fn v1_tcp6_and_unknown() {
    let (h, _) = parse_proxy_header(b"PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.source, Some(sa("[2001:db8::1]:1")));
    assert_eq!(h.destination, Some(sa("[2001:db8::2]:65535")));
    let (h, n) = parse_proxy_header(b"PROXY UNKNOWN ffff::1 x y z\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((h.source, h.destination, n), (None, None, 29));
    let (h, _) = parse_proxy_header(b"PROXY UNKNOWN\r\n").unwrap().unwrap();
    assert_eq!(h.source, None);
}

#[test]
fn v1_incomplete() {
    for p in [
        &b""[..],
        b"P",
        b"PROXY",
        b"PROXY ",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r",
    ] {
        assert_eq!(parse_proxy_header(p), Ok(None), "{p:?}");
    }
}

#[test]
fn v1_errors() {
    let bad: [&[u8]; 12] = [
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
        b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
        b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
        b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
        b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
    ];
    for b in bad {
        assert_eq!(
            parse_proxy_header(b),
            Err(ProxyHeaderError::V1Syntax),
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    assert_eq!(
        parse_proxy_header(b"EHLO x\r\n"),
        Err(ProxyHeaderError::NotProxy)
    );
    assert_eq!(
        parse_proxy_header(b"PROXZ"),
        Err(ProxyHeaderError::NotProxy)
    );
}

#[test]
fn v1_length_cap() {
    let mut long = b"PROXY UNKNOWN ".to_vec();
    long.resize(V1_MAX, b'x');
    assert_eq!(parse_proxy_header(&long), Err(ProxyHeaderError::V1TooLong));
    // 107 octets with the CRLF is the most allowed.
    let mut ok = b"PROXY UNKNOWN ".to_vec();
    ok.resize(V1_MAX - 2, b'x');
    ok.extend_from_slice(b"\r\n");
    assert_eq!(parse_proxy_header(&ok).unwrap().unwrap().1, V1_MAX);
    let mut over = b"PROXY UNKNOWN ".to_vec();
    over.resize(V1_MAX - 1, b'x');
    over.extend_from_slice(b"\r\n");
    assert_eq!(parse_proxy_header(&over), Err(ProxyHeaderError::V1TooLong));
}

#[test]
fn v2_round_trip_v4_v6_mixed() {
    for (s, d) in [
        ("192.0.2.1:40000", "198.51.100.2:25"),
        ("[2001:db8::1]:1", "[2001:db8::2]:2"),
        ("192.0.2.1:3", "[2001:db8::2]:4"),
    ] {
        let wire = encode_proxy_v2(sa(s), sa(d));
        let mut buf = wire.clone();
        buf.extend_from_slice(b"220 x\r\n");
        let (h, n) = parse_proxy_header(&buf).unwrap().unwrap();
        assert_eq!(n, wire.len());
        let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        assert_eq!(h.source.map(canon), Some(sa(s)));
        assert_eq!(h.destination.map(canon), Some(sa(d)));
    }
}

fn v2(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(ver_cmd);
    out.push(fam);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn v2_local_unspec_unix() {
    let (h, n) = parse_proxy_header(&v2(0x20, 0x00, &[])).unwrap().unwrap();
    assert_eq!((h, n), (ProxyHeader::UNKNOWN, 16));
    // LOCAL ignores whatever address block follows.
    let (h, n) = parse_proxy_header(&v2(0x20, 0x11, &[1, 2, 3]))
        .unwrap()
        .unwrap();
    assert_eq!((h, n), (ProxyHeader::UNKNOWN, 19));
    let (h, _) = parse_proxy_header(&v2(0x21, 0x00, &[])).unwrap().unwrap();
    assert_eq!(h, ProxyHeader::UNKNOWN);
    let (h, _) = parse_proxy_header(&v2(0x21, 0x31, &[0; 216]))
        .unwrap()
        .unwrap();
    assert_eq!(h, ProxyHeader::UNKNOWN);
}

#[test]
fn v2_with_tlvs() {
    let mut body = vec![192, 0, 2, 1, 192, 0, 2, 2, 0, 1, 0, 2];
    body.extend_from_slice(&[0x02, 0, 3, b'a', b'b', b'c', 0x04, 0, 0]);
    let (h, n) = parse_proxy_header(&v2(0x21, 0x11, &body)).unwrap().unwrap();
    assert_eq!(h.source, Some(sa("192.0.2.1:1")));
    assert_eq!(n, 16 + body.len());
    body.push(0x05);
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x11, &body)),
        Err(ProxyHeaderError::V2Tlv)
    );
    body.extend_from_slice(&[0, 9, 1]);
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x11, &body)),
        Err(ProxyHeaderError::V2Tlv)
    );
}

#[test]
fn v2_errors() {
    assert_eq!(
        parse_proxy_header(&v2(0x11, 0x11, &[0; 12])),
        Err(ProxyHeaderError::V2Version)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x22, 0x11, &[0; 12])),
        Err(ProxyHeaderError::V2Command)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x12, &[0; 12])),
        Err(ProxyHeaderError::V2Family)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x41, &[0; 12])),
        Err(ProxyHeaderError::V2Family)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x11, &[0; 11])),
        Err(ProxyHeaderError::V2Truncated)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x21, &[0; 35])),
        Err(ProxyHeaderError::V2Truncated)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x31, &[0; 100])),
        Err(ProxyHeaderError::V2Truncated)
    );
    // Over the cap: refused from the fixed part alone, before the body arrives.
    let mut big = v2(0x21, 0x11, &[]);
    big[14..16].copy_from_slice(&((V2_MAX - 15) as u16).to_be_bytes());
    assert_eq!(parse_proxy_header(&big), Err(ProxyHeaderError::V2TooLong));
    // Garbage version byte fails before the length arrives.
    let mut early = V2_SIGNATURE.to_vec();
    early.push(0x31);
    assert_eq!(parse_proxy_header(&early), Err(ProxyHeaderError::V2Version));
}

#[test]
fn v2_incomplete() {
    let wire = encode_proxy_v2(sa("192.0.2.1:1"), sa("192.0.2.2:2"));
    for cut in 0..wire.len() {
        assert_eq!(parse_proxy_header(&wire[..cut]), Ok(None), "cut {cut}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_and_consumed_is_in_bounds(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Some((_, n))) = parse_proxy_header(&buf) {
            prop_assert!(n <= buf.len() && n <= V2_MAX);
        }
    }

    #[test]
    fn v2_prefix_of_signature_garbage(tail in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut buf = V2_SIGNATURE.to_vec();
        buf.extend_from_slice(&tail);
        if let Ok(Some((_, n))) = parse_proxy_header(&buf) {
            prop_assert!(n >= 16 && n <= buf.len());
        }
    }

    /// A result, once reached, does not change when more bytes arrive.
    #[test]
    fn prefix_stability(buf in proptest::collection::vec(any::<u8>(), 0..120), extra in proptest::collection::vec(any::<u8>(), 0..40),
                        v1 in any::<bool>()) {
        let mut input = if v1 { b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2".to_vec() } else { encode_proxy_v2(
            "192.0.2.1:1".parse().unwrap(), "192.0.2.2:2".parse().unwrap()) };
        input.extend_from_slice(&buf);
        let first = parse_proxy_header(&input);
        input.extend_from_slice(&extra);
        let second = parse_proxy_header(&input);
        if first != Ok(None) {
            prop_assert_eq!(first, second);
        }
    }
}
