use super::super::http::ct_eq;
use super::*;
use tokio::io::AsyncReadExt;

#[test]
fn constant_time_compare() {
    assert!(ct_eq(b"abcdef", b"abcdef"));
    assert!(!ct_eq(b"abcdef", b"abcdeg"));
    assert!(!ct_eq(b"abc", b"abcd"));
    assert!(ct_eq(b"", b""));
}

#[test]
fn another_users_socket_is_refused_or_replaced_by_root_only() {
    use Existing::*;
    let ok = |uid| Some(Ok(uid));
    // Our own: stale is replaced, live is a running floodgate.
    assert_eq!(existing_socket(1000, false, None, 1000), Replace(None));
    assert_eq!(existing_socket(1000, true, ok(1000), 1000), InUse);
    // Root's socket is trusted by everyone.
    assert_eq!(existing_socket(0, true, ok(0), 1000), InUse);
    assert_eq!(existing_socket(0, false, None, 1000), Replace(None));
    // Another user's: by file owner or by the process answering, refused by name...
    assert_eq!(existing_socket(4242, false, None, 1000), Refuse(4242));
    assert_eq!(existing_socket(1000, true, ok(4242), 1000), Refuse(4242));
    assert_eq!(existing_socket(4242, true, ok(4242), 1000), Refuse(4242));
    // ... and replaced by root, which can and must not be kept out.
    assert_eq!(
        existing_socket(4242, true, ok(4242), 0),
        Replace(Some(4242))
    );
    assert_eq!(existing_socket(0, true, ok(4242), 0), Replace(Some(4242)));
    // A live socket whose peer cannot be read is judged by its owner.
    let unread = Some(Err(io::Error::other("no peer")));
    assert_eq!(existing_socket(1000, true, unread, 1000), InUse);
}

/// A metrics listener on a free port with `bounds`; it stops when the token is dropped.
async fn metrics_listener(bounds: Bounds) -> (std::net::SocketAddr, tokio_util::sync::DropGuard) {
    let (addr, _, stop) = counted_metrics_listener(bounds).await;
    (addr, stop)
}

/// [`metrics_listener`], with its registry (whose counts it serves and where it counts
/// its cut connections).
async fn counted_metrics_listener(
    bounds: Bounds,
) -> (
    std::net::SocketAddr,
    Arc<super::super::Metrics>,
    tokio_util::sync::DropGuard,
) {
    let m = Arc::new(super::super::Metrics::new());
    m.commands.inc_by(3);
    let stop = CancellationToken::new();
    let listener = Listener::new(
        "metrics address",
        "metrics",
        Mode::Metrics(m.clone()),
        bounds,
        m.clone(),
        None,
    );
    let addr = serve_tcp("127.0.0.1:0".parse().unwrap(), listener, stop.clone())
        .await
        .unwrap();
    (addr, m, stop.drop_guard())
}

/// What came back for one raw request.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// Sends `req` as it is (then ends the sending side when `half_close`) and reads the
/// answer up to the server's close.
async fn raw(addr: std::net::SocketAddr, req: &[u8], half_close: bool) -> Answer {
    let work = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(req).await.unwrap();
        if half_close {
            s.shutdown().await.unwrap();
        }
        let mut out = Vec::new();
        // A reset after the answer (the server closed with request bytes unread) ends it.
        let _ = s.read_to_end(&mut out).await;
        out
    };
    let out = tokio::time::timeout(Duration::from_secs(30), work)
        .await
        .expect("an answer within 30s");
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {text:?}"));
    Answer {
        status: head[9..12].parse().unwrap(),
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// Asserts a JSON error answer with `status` whose message holds `words`, with the
/// fields every answer carries.
fn assert_error(a: &Answer, status: u16, words: &str) {
    assert_eq!(a.status, status, "{a:?}");
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap_or_else(|_| panic!("{a:?}"));
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(msg.contains(words), "{words}: {a:?}");
    for field in [
        "Content-Type: application/json",
        "Connection: close",
        "Cache-Control: no-store",
    ] {
        assert!(a.head.contains(field), "{field}: {a:?}");
    }
    let length = format!("Content-Length: {}", a.body.len());
    assert!(a.head.contains(&length), "{length}: {a:?}");
}

#[tokio::test]
async fn metrics_listener_answers_only_metrics() {
    let (addr, _stop) = metrics_listener(Bounds::default()).await;
    let a = raw(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false).await;
    assert_eq!(a.status, 200);
    assert!(a.body.contains("\nfloodgate_commands_total 3\n"), "{a:?}");
    for field in ["Connection: close", "Cache-Control: no-store"] {
        assert!(a.head.contains(field), "{field}: {a:?}");
    }
    let a = raw(addr, b"GET /v1/top HTTP/1.1\r\n\r\n", false).await;
    assert_error(&a, 404, "no endpoint /v1/top: try /metrics");
    let a = raw(addr, b"POST /metrics HTTP/1.1\r\n\r\n", false).await;
    assert_error(&a, 405, "/metrics takes GET, HEAD, not POST");
    let a = raw(addr, b"GET /metrics HTTP/1.1\nX: y\r\n\r\n", false).await;
    assert_error(&a, 400, "CRLF");
    // Bytes after the request are not read: one request per connection.
    let a = raw(addr, b"GET /metrics HTTP/1.1\r\nX: y\r\n\r\n   ", false).await;
    assert_eq!(a.status, 200);
    // HEAD: the length of what GET would send, no body.
    let a = raw(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n", true).await;
    assert_eq!(a.status, 200);
    assert!(a.body.is_empty(), "{a:?}");
    assert!(!a.head.contains("Content-Length: 0\r\n"), "{a:?}");
    assert!(a.head.contains("Content-Length: "), "{a:?}");
}

#[tokio::test]
async fn the_admin_client_speaks_to_the_listener() {
    use super::super::client::exchange;
    let (addr, _stop) = metrics_listener(Bounds::default()).await;
    let tcp = || async { tokio::net::TcpStream::connect(addr).await.unwrap() };
    let (status, body) = exchange(tcp().await, "GET", "/metrics", None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("\nfloodgate_commands_total 3\n"));
    let (status, body) = exchange(tcp().await, "HEAD", "/metrics", None)
        .await
        .unwrap();
    assert_eq!((status, body.len()), (200, 0));
    let (status, body) = exchange(tcp().await, "DELETE", "/metrics", Some("t"))
        .await
        .unwrap();
    assert_eq!(status, 405);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"], "/metrics takes GET, HEAD, not DELETE");
    let (status, _) = exchange(tcp().await, "GET", "/%7e", None).await.unwrap();
    assert_eq!(status, 404);
}

#[tokio::test]
async fn bad_requests_get_json_answers() {
    let (addr, _stop) = metrics_listener(Bounds::default()).await;
    let mut long_head = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    long_head.resize(9_000, b'a');
    long_head.extend_from_slice(b"\r\n\r\n");
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..40 {
        many.extend_from_slice(format!("X{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let cases: &[(&[u8], bool, u16, &str)] = &[
        (
            b"GET /metrics HTTP/1.1\r\nHost: x\n\r\n",
            false,
            400,
            "CRLF",
        ),
        (
            b"GET /metrics HTTP/1.1\r\nX: a\rb\r\n\r\n",
            false,
            400,
            "CRLF",
        ),
        (b"GET /metrics\x00 HTTP/1.1\r\n\r\n", false, 400, "NUL"),
        (b"G(T /metrics HTTP/1.1\r\n\r\n", false, 400, "bad request"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", false, 400, "bad request"),
        (
            b"GET /metrics HTTP/1.1\r\nName : v\r\n\r\n",
            false,
            400,
            "bad request",
        ),
        (
            b"GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n",
            false,
            400,
            "bad request",
        ),
        (
            b"GET http://x/metrics HTTP/1.1\r\nHost: x\r\n\r\n",
            false,
            400,
            "origin-form",
        ),
        (b"GET /%zz HTTP/1.1\r\n\r\n", false, 400, "percent escape"),
        (b"GET /?k=%ff HTTP/1.1\r\n\r\n", false, 400, "not UTF-8"),
        (
            b"POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            false,
            400,
            "Transfer-Encoding is not supported",
        ),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
            false,
            400,
            "bad request",
        ),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            false,
            400,
            "bad request",
        ),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n",
            false,
            413,
            "request too large: body",
        ),
        (&long_head, false, 413, "request too large: request head"),
        (&many, false, 413, "request too large: request head"),
        (b"GET /x", true, 400, "request ended early"),
        // The metrics address reads no body: the answer comes from the head, whatever
        // follows it.
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nab",
            true,
            405,
            "takes GET, HEAD",
        ),
    ];
    for (req, half_close, status, words) in cases {
        let a = raw(addr, req, *half_close).await;
        assert_error(&a, *status, words);
    }
}

#[tokio::test]
async fn slow_requests_get_408() {
    let bounds = Bounds {
        request_timeout: Duration::from_millis(300),
        ..Bounds::default()
    };
    let (addr, m, _stop) = counted_metrics_listener(bounds).await;
    for req in [&b""[..], b"GET /metrics HTTP/1.1\r\n"] {
        let a = raw(addr, req, false).await;
        assert_error(&a, 408, "request not received in time");
    }
    assert_eq!(
        m.admin_connections_refused_of("metrics", "request_timeout"),
        2
    );
    // A body that never comes is not waited for: the metrics address takes none.
    let a = raw(
        addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 10000\r\n\r\nabc",
        false,
    )
    .await;
    assert_error(&a, 405, "takes GET, HEAD");
}

#[tokio::test]
async fn the_body_is_bounded() {
    let bounds = Bounds {
        limits: Limits {
            max_body: 8,
            ..Limits::default()
        },
        ..Bounds::default()
    };
    let (addr, _stop) = metrics_listener(bounds).await;
    let a = raw(
        addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 9\r\n\r\n123456789",
        false,
    )
    .await;
    assert_error(&a, 413, "request too large: body");
    // Within the bound, the request reaches the endpoint (which takes no POST).
    let a = raw(
        addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 8\r\n\r\n12345678",
        false,
    )
    .await;
    assert_error(&a, 405, "takes GET, HEAD");
}

/// A connection to `to` from the loopback address `from` (another client as far as the
/// listener can tell).
async fn connect_from(from: [u8; 4], to: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket.connect(to).await.unwrap()
}

#[tokio::test]
async fn idle_connections_of_other_addresses_make_room_for_a_real_request() {
    let bounds = Bounds {
        max_connections: 4,
        max_per_address: 2,
        ..Bounds::default()
    };
    let (addr, m, _stop) = counted_metrics_listener(bounds).await;
    // One that sends half a head (slowloris), then 50 that send nothing, from two flood
    // addresses: each address gets two places, the rest are refused at once.
    let mut slow = connect_from([127, 0, 0, 2], addr).await;
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    let mut idle = Vec::new();
    for i in 0..50u8 {
        idle.push(connect_from([127, 0, 0, 2 + i % 2], addr).await);
    }
    // A client of its own address is answered: the listener holds four, all within their
    // grace time, and an address with two waiting gives one up for it.
    let mut c = connect_from([127, 0, 0, 1], addr).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out))
        .await
        .expect("answered")
        .unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "{out:?}");
    let per_address = m.admin_connections_refused_of("metrics", "per_address");
    assert!(per_address >= 51 - 4, "{per_address}");
    // A refused one got its 429 before the close.
    let mut out = Vec::new();
    let last = idle.last_mut().unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), last.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 429 "), "{text}");
    assert!(text.contains("Retry-After: 1\r\n"), "{text}");
    assert!(
        text.contains("too many connections from your address"),
        "{text}"
    );
    // The slow one, the oldest of an address with two waiting, made room for the client
    // (two more waiting than the client's address had): closed without an answer.
    assert_eq!(m.admin_connections_refused_of("metrics", "evicted"), 1);
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut out)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?} {out:?}");
}

#[tokio::test]
async fn a_client_that_sends_after_50ms_beside_a_flood_is_answered() {
    let bounds = Bounds {
        max_connections: 8,
        max_per_address: 4,
        ..Bounds::default()
    };
    let (addr, m, _stop) = counted_metrics_listener(bounds).await;
    // The flood fills the listener from two addresses, then keeps coming while the client
    // connects and waits 50 ms: each new flood connection is refused (its address is at
    // its bound, or nothing may be cut), never the client's.
    let mut flood = Vec::new();
    for i in 0..8u8 {
        flood.push(connect_from([127, 0, 1, 1 + i % 2], addr).await);
    }
    let client = tokio::spawn(async move {
        let mut c = connect_from([127, 0, 0, 1], addr).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).await.unwrap();
        out
    });
    let more = tokio::spawn(async move {
        for i in 0..300u16 {
            let from = [127, 0, 1, 1 + (i % 3) as u8];
            flood.push(connect_from(from, addr).await);
        }
        flood
    });
    let out = tokio::time::timeout(Duration::from_secs(5), client)
        .await
        .expect("answered")
        .unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "{out:?}");
    let _flood = more.await.unwrap();
    assert!(m.admin_connections_refused_of("metrics", "per_address") > 0);
}

#[tokio::test]
async fn connections_being_answered_are_never_cut_and_new_ones_wait() {
    let bounds = Bounds {
        max_connections: 2,
        ..Bounds::default()
    };
    let (addr, m, _stop) = counted_metrics_listener(bounds).await;
    // Requests one after the other on fresh connections: each answered, none cut.
    for _ in 0..20 {
        let a = raw(addr, b"GET /metrics HTTP/1.1\r\n\r\n", false).await;
        assert_eq!(a.status, 200);
    }
    assert_eq!(m.admin_connections_refused_of("metrics", "evicted"), 0);
    assert_eq!(m.admin_connections_refused_of("metrics", "full"), 0);
}

#[tokio::test]
async fn an_answer_nobody_reads_is_cut_after_the_write_timeout() {
    let bounds = Bounds {
        write_timeout: Duration::from_millis(300),
        ..Bounds::default()
    };
    let m = Arc::new(super::super::Metrics::new());
    let listener = Arc::new(Listener::new(
        "metrics address",
        "metrics",
        Mode::Metrics(m.clone()),
        bounds,
        m.clone(),
        None,
    ));
    // A pipe far smaller than the metrics page, whose far end sends a request and never
    // reads.
    let (ours, mut theirs) = tokio::io::duplex(512);
    theirs
        .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let (slot, _) = listener
        .slots
        .admit(None, Instant::now(), || false)
        .unwrap();
    let started = tokio::time::Instant::now();
    tokio::time::timeout(
        Duration::from_secs(5),
        serve_conn(ours, Peer::Unix(None), slot, listener.clone()),
    )
    .await
    .expect("the connection ends after the write timeout");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        m.admin_connections_refused_of("metrics", "write_timeout"),
        1
    );
    // What was written is a truncated answer: the head, not the whole page.
    let mut got = Vec::new();
    theirs.read_to_end(&mut got).await.unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(got.len() < m.render().len(), "{}", got.len());
}

#[tokio::test]
async fn a_request_waits_for_a_free_handler_until_its_request_timeout() {
    let bounds = Bounds {
        request_timeout: Duration::from_millis(300),
        ..Bounds::default()
    };
    let m = Arc::new(super::super::Metrics::new());
    let listener = Listener::new(
        "metrics address",
        "metrics",
        Mode::Metrics(m.clone()),
        bounds,
        m.clone(),
        None,
    );
    // Every handler taken (by slow requests, as far as the listener can tell).
    let handlers = listener.handlers.clone();
    let taken = handlers
        .clone()
        .acquire_many_owned(MAX_HANDLERS as u32)
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let addr = serve_tcp("127.0.0.1:0".parse().unwrap(), listener, stop.clone())
        .await
        .unwrap();
    let _stop = stop.drop_guard();
    let a = raw(addr, b"GET /metrics HTTP/1.1\r\n\r\n", false).await;
    assert_error(&a, 503, "busy");
    assert!(a.head.contains("Retry-After: 1"), "{a:?}");
    assert_eq!(m.admin_connections_refused_of("metrics", "busy"), 1);
    // A handler free again: served.
    drop(taken);
    let a = raw(addr, b"GET /metrics HTTP/1.1\r\n\r\n", false).await;
    assert_eq!(a.status, 200, "{a:?}");
}
