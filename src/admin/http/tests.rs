use super::guard::{HeadCheck, BARE_LINE_END};
use super::*;
use proptest::prelude::*;

/// hyper's parts of a request to `target` with `headers`.
fn parts(method: &str, target: &str, headers: &[(&str, &[u8])]) -> hyper::http::request::Parts {
    let mut b = hyper::Request::builder().method(method).uri(target);
    for (n, v) in headers {
        b = b.header(*n, HeaderValue::from_bytes(v).unwrap());
    }
    b.body(()).unwrap().into_parts().0
}

#[test]
fn request_from_hyper_parts() {
    let p = parts(
        "GET",
        "/v1/inspect?key=alice%40example.com&x=a+b&flag",
        &[("Host", b"x"), ("X-Padded", b"  v \t")],
    );
    let r = Request::from_parts(&p, b"body".to_vec()).unwrap();
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/v1/inspect");
    assert_eq!(r.param("key"), Some("alice@example.com"));
    assert_eq!(r.param("x"), Some("a b"));
    assert_eq!(r.param("flag"), Some(""));
    assert_eq!(r.header("host"), Some("x"));
    assert_eq!(r.header("x-padded"), Some("v"));
    assert_eq!(r.body, b"body");
    let r = Request::from_parts(&parts("POST", "/a%20b+c", &[]), Vec::new()).unwrap();
    assert_eq!(r.path, "/a b+c", "+ is a space only in the query");
}

#[test]
fn bearer_token_of_the_authorization_header() {
    let with = |v: &[u8]| {
        Request::from_parts(&parts("GET", "/", &[("Authorization", v)]), Vec::new()).unwrap()
    };
    assert_eq!(with(b"Bearer  s3cret ").bearer(), Some("s3cret"));
    assert_eq!(with(b"Basic czNjcmV0").bearer(), None);
    let none = Request::from_parts(&parts("GET", "/", &[]), Vec::new()).unwrap();
    assert_eq!(none.bearer(), None);
}

#[test]
fn request_refusals() {
    let bad: &[(hyper::http::request::Parts, &str)] = &[
        (parts("GET", "http://x/v1/top", &[]), "origin-form"),
        (parts("OPTIONS", "*", &[]), "origin-form"),
        (parts("GET", "/%zz", &[]), "percent escape"),
        (parts("GET", "/?k=%ff", &[]), "not UTF-8"),
        (parts("GET", "/?k=%4", &[]), "percent escape"),
        (parts("GET", "/", &[("x", b"caf\xe9")]), "not UTF-8"),
    ];
    for (p, words) in bad {
        let e = Request::from_parts(p, Vec::new()).unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.to_string().contains(words), "{}: {e}", p.uri);
        let r = Response::from(e);
        assert_eq!(r.status, 400);
        assert!(String::from_utf8_lossy(&r.body).contains(words));
    }
}

#[test]
fn response_into_hyper() {
    let mut r = Response::error(401, "wrong bearer token");
    r.headers.push(("Set-Cookie", "a=b; HttpOnly".into()));
    r.headers.push(("Set-Cookie", "c=d".into()));
    let h = r.clone().into_hyper();
    assert_eq!(h.status(), 401);
    let get = |n: &str| -> Vec<&str> {
        h.headers()
            .get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(get("content-type"), ["application/json"]);
    assert_eq!(get("content-length"), [r.body.len().to_string().as_str()]);
    assert_eq!(get("connection"), ["close"]);
    assert_eq!(get("cache-control"), ["no-store"]);
    assert_eq!(get("www-authenticate"), ["Bearer"]);
    assert_eq!(get("set-cookie"), ["a=b; HttpOnly", "c=d"]);
    assert!(Response::error(404, "x")
        .into_hyper()
        .headers()
        .get("www-authenticate")
        .is_none());
    // What hyper cannot send becomes a 500 that says so.
    let mut bad = Response::text(200, "text/plain", "x".into());
    bad.headers.push(("Location", "/a\r\nInjected: yes".into()));
    let h = bad.clone().into_hyper();
    assert_eq!(h.status(), 500);
    assert!(h.headers().get("injected").is_none());
    // The wire form written by hand carries the same fields, and no invalid one.
    let wire = String::from_utf8(bad.to_bytes()).unwrap();
    assert!(
        wire.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"),
        "{wire}"
    );
    assert!(!wire.contains("Injected"), "{wire}");
    let wire = String::from_utf8(r.to_bytes()).unwrap();
    assert!(wire.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{wire}");
    for field in [
        "\r\nConnection: close\r\n",
        "\r\nCache-Control: no-store\r\n",
        "\r\nWWW-Authenticate: Bearer\r\n",
        "\r\nSet-Cookie: c=d\r\n",
    ] {
        assert!(wire.contains(field), "{field}: {wire}");
    }
    assert!(
        wire.ends_with("\r\n\r\n{\"error\":\"wrong bearer token\"}\n"),
        "{wire}"
    );
}

#[test]
fn head_check() {
    let ok = |b: &[u8]| {
        let mut c = HeadCheck::default();
        c.feed(b).map(|()| c.done())
    };
    assert_eq!(ok(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Ok(true));
    assert_eq!(ok(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(false));
    // Blank lines before the request line are not its end.
    assert_eq!(ok(b"\r\n\r\nGET / HTTP/1.1\r\n"), Ok(false));
    // After the head, the body is not looked at.
    assert_eq!(ok(b"POST / HTTP/1.1\r\n\r\n\n\r\x00"), Ok(true));
    for bad in [
        &b"GET / HTTP/1.1\nHost: x\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: x\n\r\n",
        b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\r\n",
        b"GET /\x00 HTTP/1.1\r\n\r\n",
        b"\n",
    ] {
        assert_eq!(
            ok(bad),
            Err(BARE_LINE_END),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

proptest! {
    #[test]
    fn head_check_is_the_same_in_any_chunks(
        data in proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(0u8), Just(b'a')],
            0..40,
        ),
        cuts in proptest::collection::vec(0usize..40, 0..4),
    ) {
        let mut whole = HeadCheck::default();
        let want = whole.feed(&data).map(|()| whole.done());
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
        cuts.sort_unstable();
        let mut chunked = HeadCheck::default();
        let mut got = Ok(());
        let mut start = 0;
        for end in cuts.into_iter().chain([data.len()]) {
            got = chunked.feed(&data[start..end]);
            if got.is_err() {
                break;
            }
            start = end;
        }
        prop_assert_eq!(got.map(|()| chunked.done()), want);
    }

    #[test]
    fn crlf_heads_pass_and_a_bare_lf_is_refused(
        lines in proptest::collection::vec("[ -~]{1,20}", 1..6),
        at in 0usize..6,
    ) {
        let head: String = lines.iter().map(|l| format!("{l}\r\n")).collect::<String>() + "\r\n";
        let mut c = HeadCheck::default();
        prop_assert_eq!(c.feed(head.as_bytes()), Ok(()));
        prop_assert!(c.done());
        let ends: Vec<usize> = head.match_indices("\r\n").map(|(i, _)| i).collect();
        let cut = ends[at % ends.len()];
        let mut bare = head.clone().into_bytes();
        bare.remove(cut);
        prop_assert_eq!(HeadCheck::default().feed(&bare), Err(BARE_LINE_END));
    }

    #[test]
    fn percent_round_trip(s in "\\PC{0,20}") {
        prop_assert_eq!(percent_decode(&percent_encode(&s), true).unwrap(), s.clone());
        prop_assert_eq!(percent_decode(&percent_encode(&s), false).unwrap(), s);
    }
}
