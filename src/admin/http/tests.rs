use super::*;
use proptest::prelude::*;

fn parse(s: &[u8]) -> Result<Option<(Request, usize)>, HttpError> {
    parse_request(s, &Limits::default())
}

#[test]
fn simple_get() {
    let req = b"GET /v1/inspect?key=alice%40example.com&x=a+b HTTP/1.1\r\nHost: x\r\n\r\n";
    let (r, n) = parse(req).unwrap().unwrap();
    assert_eq!(n, req.len());
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/v1/inspect");
    assert_eq!(r.param("key"), Some("alice@example.com"));
    assert_eq!(r.param("x"), Some("a b"));
    assert_eq!(r.header("host"), Some("x"));
    assert!(r.body.is_empty());
}

#[test]
fn body_with_content_length() {
    let req = b"POST /v1/reload HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcEXTRA";
    let (r, n) = parse(req).unwrap().unwrap();
    assert_eq!(r.body, b"abc");
    assert_eq!(n, req.len() - 5);
    // Incomplete body: wait.
    assert_eq!(parse(&req[..req.len() - 7]).unwrap(), None);
}

#[test]
fn incomplete_head_waits() {
    assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap(), None);
    assert_eq!(parse(b"").unwrap(), None);
}

#[test]
fn refusals() {
    let bad: &[(&[u8], u16)] = &[
        (b"GET / HTTP/1.1\nHost: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\n\r\n", 400),
        (b"GET /\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\n\r\n", 400),
        (b"G(T / HTTP/1.1\r\n\r\n", 400),
        (b"GET http://x/ HTTP/1.1\r\n\r\n", 400),
        (b"GET /%zz HTTP/1.1\r\n\r\n", 400),
        (b"GET /?k=%ff HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nName : v\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            400,
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n",
            413,
        ),
    ];
    for (req, status) in bad {
        match parse(req) {
            Err(e) => assert_eq!(e.status(), *status, "{}", String::from_utf8_lossy(req)),
            Ok(r) => panic!("accepted {:?}: {r:?}", String::from_utf8_lossy(req)),
        }
    }
}

#[test]
fn head_too_large() {
    let mut req = b"GET / HTTP/1.1\r\nX: ".to_vec();
    req.resize(10_000, b'a');
    assert_eq!(parse(&req).unwrap_err().status(), 413);
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..40 {
        many.extend_from_slice(format!("X{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(parse(&many).unwrap_err().status(), 413);
}

#[test]
fn response_round_trip() {
    let r = Response::error(404, "no such endpoint");
    let wire = r.to_bytes(false);
    let text = String::from_utf8(wire.clone()).unwrap();
    assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"));
    assert!(text.contains("Connection: close\r\n"));
    let (status, body) = parse_response(&wire).unwrap();
    assert_eq!(status, 404);
    assert_eq!(body, r.body);
    let head = r.to_bytes(true);
    assert_eq!(
        parse_response(&head).unwrap_err(),
        HttpError::Bad("truncated body")
    );
    assert!(parse_response(b"nonsense").is_err());
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$&'*+.^_`|~-]{1,12}"
}

proptest! {
    #[test]
    fn never_panics_and_used_is_bounded(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(Some((_, used))) = parse(&data) {
            prop_assert!(used <= data.len());
        }
    }

    #[test]
    fn valid_requests_round_trip(
        method in token(),
        segs in proptest::collection::vec("[^\\x00]{0,8}", 1..4),
        params in proptest::collection::vec(("[^\\x00]{1,8}", "[^\\x00]{0,12}"), 0..4),
        headers in proptest::collection::vec((token(), "[ -~]{0,20}"), 0..6),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let path: String = segs.iter().map(|s| format!("/{s}")).collect();
        let mut target: String = segs.iter().map(|s| format!("/{}", percent_encode(s))).collect();
        if !params.is_empty() {
            target.push('?');
            let q: Vec<String> = params
                .iter()
                .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                .collect();
            target.push_str(&q.join("&"));
        }
        let headers: Vec<(String, String)> = headers
            .into_iter()
            .filter(|(n, _)| {
                let n = n.to_ascii_lowercase();
                n != "content-length" && n != "transfer-encoding"
            })
            .collect();
        let mut wire = format!("{method} {target} HTTP/1.1\r\n");
        for (n, v) in &headers {
            wire.push_str(&format!("{n}: {v}\r\n"));
        }
        wire.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut wire = wire.into_bytes();
        wire.extend_from_slice(&body);
        let (r, used) = parse(&wire).unwrap().unwrap();
        prop_assert_eq!(used, wire.len());
        prop_assert_eq!(&r.method, &method);
        prop_assert_eq!(&r.path, &path);
        prop_assert_eq!(&r.query, &params);
        prop_assert_eq!(&r.body, &body);
        prop_assert_eq!(r.headers.len(), headers.len() + 1);
        for ((n, v), (pn, pv)) in headers.iter().zip(&r.headers) {
            prop_assert_eq!(&n.to_ascii_lowercase(), pn);
            prop_assert_eq!(v.trim_matches([' ', '\t']), pv.as_str());
        }
        // Every strict prefix is "incomplete", never an error or a different request.
        for cut in 0..wire.len() {
            prop_assert_eq!(parse(&wire[..cut]).unwrap(), None);
        }
    }

    #[test]
    fn percent_round_trip(s in "\\PC{0,20}") {
        prop_assert_eq!(percent_decode(&percent_encode(&s), true).unwrap(), s);
    }
}
