//! The admin address and the metrics address under connections that never send a request,
//! send a head and never its body, or never read their answer, through the real binary:
//! 1,000 slow bodies and 5,000 idle connections to each, from one address and from sixteen
//! others, leave `GET /metrics`, a console page (by token and by session cookie) and the
//! login page answering within 1 s (the acceptance bound between two processes), and
//! a client that sends its request 50 ms after connecting answered while the flood goes on,
//! with floodgate's descriptors bounded; a request without a token gets its 401 without its
//! body being read; clients that do not read a large answer are cut after
//! `[admin] write_timeout` while others are served. The times are printed.

use crate::common;
use crate::loadkit;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "bounds-test-token-0123456789";
/// Idle connections opened to each address.
const IDLE: usize = 5_000;
/// Connections sending a head announcing a body that never comes, to each address.
const SLOW: usize = 1_000;
/// The acceptance bound of an answer while the flood is open.
const ONE: Duration = Duration::from_secs(1);
/// How long a probe's answer is waited for: a flood that silences an address leaves its
/// clients unanswered for minutes or for ever.
const PATIENCE: Duration = Duration::from_secs(5);
/// Connections cut or refused that a listener may still hold beside its bound while their
/// tasks wait for the loaded machine to run them: the flood is 6,000 a listener.
const SETTLING: usize = 8;
/// Tries of a probe: the machine running the tests (a debug build beside the other tests of
/// this binary, a browser among them) may stall one answer past [`ONE`] by itself.
const TRIES: usize = 3;

/// A connection to `to` from the local address `from` (another loopback address: another
/// client as far as floodgate can tell; Linux answers for all of 127/8), connected within
/// 10 s.
pub(crate) fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else {
        panic!("{to}: IPv4 only")
    };
    let sockaddr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns (handed to TcpStream,
    // which closes it, or closed here on failure); the structs passed live across each call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        // Linux bounds a blocking connect by the send timeout.
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        let local = sockaddr(from, 0);
        if libc::bind(fd, std::ptr::from_ref(&local).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(*to.ip(), to.port());
        if libc::connect(fd, std::ptr::from_ref(&remote).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// The flood's source for its `i`-th connection: every other one from 127.0.0.2, the rest
/// spread over sixteen addresses 127.2.0.1 to 127.2.0.16.
fn flood_source(i: usize) -> Ipv4Addr {
    if i % 2 == 0 {
        Ipv4Addr::new(127, 0, 0, 2)
    } else {
        Ipv4Addr::new(127, 2, 0, 1 + (i / 2 % 16) as u8)
    }
}

/// Opens `n` flood connections to `addr` within `limit` in all, each sending `what(i)`
/// (nothing, or a head whose body never comes). A connection floodgate refused may fail to
/// take the write: kept all the same (its descriptor stays open on this side).
fn flood(
    addr: SocketAddr,
    n: usize,
    limit: Duration,
    what: impl Fn(usize) -> String,
) -> Vec<TcpStream> {
    let deadline = Instant::now() + limit;
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} connections opened in {limit:?}",
            conns.len()
        );
        let i = conns.len();
        let mut s = connect_from(flood_source(i), addr)
            .unwrap_or_else(|e| panic!("connection {i} to {addr}: {e}"));
        let _ = s.write_all(what(i).as_bytes());
        conns.push(s);
    }
    conns
}

/// A head announcing a 10,000-byte body that never comes, without a token.
fn slow_body(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 10000\r\n\r\n"
    )
}

/// Connections with a descriptor of their own (not listening, not orphaned after close) on
/// the local side of `addr`: the ones floodgate holds for that listener (its clients' ends
/// have other ports).
fn held(addr: SocketAddr) -> usize {
    let table = if addr.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(table).unwrap();
    let port = format!(":{:04X}", addr.port());
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[1].ends_with(&port) && f[3] != "0A" && f[9] != "0"
        })
        .count()
}

/// One request (`head` then `body`) on a fresh connection from 127.0.0.1, sent `delay`
/// after connecting, the whole answer read within `limit`; returns the status, the answer
/// and the time it took from the sending (connect included when `delay` is zero).
fn timed_request(
    addr: SocketAddr,
    head: &str,
    body: &str,
    delay: Duration,
    limit: Duration,
) -> (u16, String, Duration) {
    let connected = Instant::now();
    let mut s = connect_from(Ipv4Addr::LOCALHOST, addr).expect("connect");
    s.set_read_timeout(Some(limit)).unwrap();
    s.set_write_timeout(Some(limit)).unwrap();
    std::thread::sleep(delay);
    let t = if delay.is_zero() {
        connected
    } else {
        Instant::now()
    };
    s.write_all(format!("{head}\r\n{body}").as_bytes())
        .unwrap_or_else(|e| panic!("{head:?}: {e}"));
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{head:?}: {e} after {:?}", t.elapsed()));
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text, t.elapsed())
}

/// One GET on a fresh connection from 127.0.0.1, the whole answer read within `limit`.
fn timed_get(
    addr: SocketAddr,
    target: &str,
    extra: &str,
    limit: Duration,
) -> (u16, String, Duration) {
    let head = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n{extra}");
    timed_request(addr, &head, "", Duration::ZERO, limit)
}

/// The value of one series in a scrape.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
        .parse()
        .unwrap()
}

fn refused(scrape: &str, listener: &str, reason: &str) -> u64 {
    sample(
        scrape,
        &format!(
            "floodgate_admin_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
        ),
    )
}

/// A scrape of the metrics address.
fn scrape_now(metrics: SocketAddr) -> String {
    timed_get(metrics, "/metrics", "", REPLY_TIMEOUT).1
}

fn token_file(dir: &Path) -> String {
    let t = dir.join("token");
    std::fs::write(&t, format!("{TOKEN}\n")).unwrap();
    t.display().to_string()
}

/// Asserts that `probe` is answered with `status`, within [`ONE`] in one of [`TRIES`]
/// tries (each answered within [`PATIENCE`]), and prints its times.
fn within_one(what: &str, probe: impl Fn() -> (u16, String, Duration), want: u16) -> String {
    for _ in 0..TRIES {
        let (status, text, took) = probe();
        println!("{what} beside the flood: {took:?}");
        assert_eq!(status, want, "{what}: {text}");
        if took < ONE {
            return text;
        }
    }
    panic!("{what}: no answer within {ONE:?} in {TRIES} tries")
}

/// The probes of the acceptance, each answered within [`ONE`]: `/metrics` on both
/// addresses, a console page by token and by session cookie, the login page, and a client
/// that sends its request 50 ms after connecting, on both addresses.
fn probes(admin: SocketAddr, metrics: SocketAddr) {
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    within_one(
        "GET /metrics",
        || timed_get(metrics, "/metrics", "", PATIENCE),
        200,
    );
    let page = within_one(
        "GET /console/ by token",
        || timed_get(admin, "/console/", &bearer, PATIENCE),
        200,
    );
    assert!(page.contains("Overview"), "{page}");
    within_one(
        "GET /console/login",
        || timed_get(admin, "/console/login", "", PATIENCE),
        200,
    );
    within_one(
        "GET /metrics on the admin address",
        || timed_get(admin, "/metrics", &bearer, PATIENCE),
        200,
    );
    let form = format!("token={TOKEN}");
    let login = format!(
        "POST /console/login HTTP/1.1\r\nHost: {admin}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
        form.len()
    );
    let answer = within_one(
        "POST /console/login",
        || timed_request(admin, &login, &form, Duration::ZERO, PATIENCE),
        303,
    );
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no cookie: {answer}"));
    let page = within_one(
        "GET /console/held by session cookie",
        || {
            timed_get(
                admin,
                "/console/held",
                &format!("Cookie: {cookie}\r\n"),
                PATIENCE,
            )
        },
        200,
    );
    assert!(page.contains("Held"), "{page}");
    let late = Duration::from_millis(50);
    within_one(
        "GET /metrics sent 50 ms after connecting",
        || {
            timed_request(
                metrics,
                &format!("GET /metrics HTTP/1.1\r\nHost: {metrics}\r\n"),
                "",
                late,
                PATIENCE,
            )
        },
        200,
    );
    within_one(
        "GET /console/login sent 50 ms after connecting",
        || {
            timed_request(
                admin,
                &format!("GET /console/login HTTP/1.1\r\nHost: {admin}\r\n"),
                "",
                late,
                PATIENCE,
            )
        },
        200,
    );
}

#[test]
fn slow_bodies_and_idle_connections_leave_metrics_console_and_login_answering() {
    // Two floods of slow bodies and idle connections, the flood that goes on during the
    // probes, and room for the requests and the other tests' files (the tests of this
    // binary run side by side).
    let want = 2 * (IDLE + SLOW) as u64 + 4_000;
    let limit = loadkit::raise_nofile(want);
    assert!(
        limit >= want - 1_500,
        "the open-file limit ({limit}) cannot hold the flood"
    );
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let admin = closed_port();
    let metrics = closed_port();
    let extra = format!(
        "[metrics]\naddress = \"{metrics}\"\n\
         [admin]\nsocket = \"admin.sock\"\naddress = \"{admin}\"\ntoken_file = \"{}\"\n",
        token_file(dir.path())
    );
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&extra),
    );
    let t = Instant::now();
    let open = Duration::from_secs(180);
    // Half the admin address's slow bodies are login forms (read within the request
    // timeout), half admin API requests without a token (401 at once, unread).
    let slow_admin = flood(admin, SLOW, open, |i| {
        slow_body(if i % 4 < 2 {
            "/console/login"
        } else {
            "/v1/reload"
        })
    });
    let slow_metrics = flood(metrics, SLOW, open, |_| slow_body("/metrics"));
    let idle_admin = flood(admin, IDLE, open, |_| String::new());
    let idle_metrics = flood(metrics, IDLE, open, |_| String::new());
    println!(
        "{} slow bodies and {} idle connections opened in {:?}",
        slow_admin.len() + slow_metrics.len(),
        idle_admin.len() + idle_metrics.len(),
        t.elapsed()
    );
    // Each listener holds at most [admin] max_connections (64) of them, and the few cut or
    // refused whose tasks have not yet closed them (on a loaded machine, up to
    // [`SETTLING`]); the steady state is the least of a few readings.
    let steady = |addr| {
        (0..5)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(50));
                held(addr)
            })
            .min()
            .unwrap()
    };
    let (on_admin, on_metrics) = (steady(admin), steady(metrics));
    println!("connections floodgate holds: {on_admin} on the admin address, {on_metrics} on the metrics address");
    assert!(
        on_admin <= 64 + SETTLING && on_metrics <= 64 + SETTLING,
        "{on_admin} {on_metrics}"
    );

    // The flood goes on during the probes: new idle connections from its seventeen
    // addresses, to both listeners, until the probes end (at most 4,000).
    let going = Arc::new(AtomicBool::new(true));
    let more = {
        let going = going.clone();
        std::thread::spawn(move || {
            let mut conns = Vec::new();
            while going.load(Ordering::Relaxed) && conns.len() < 4_000 {
                let to = if conns.len() % 2 == 0 { admin } else { metrics };
                if let Ok(s) = connect_from(flood_source(conns.len() / 2), to) {
                    conns.push(s);
                }
            }
            conns.len()
        })
    };
    probes(admin, metrics);
    going.store(false, Ordering::Relaxed);
    println!(
        "{} more flood connections during the probes",
        more.join().unwrap()
    );

    // SMTP still opens and greets.
    let greeted = (0..TRIES).any(|_| {
        let t = Instant::now();
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        let took = t.elapsed();
        println!("SMTP greeting with the flood open: {took:?}");
        assert_eq!(c.cmd("EHLO laptop.test").code, 250);
        assert_eq!(c.cmd("QUIT").code, 221);
        took < ONE
    });
    assert!(greeted, "no SMTP greeting within {ONE:?} in {TRIES} tries");

    // The flood was refused at once (its address beyond its bound, or nothing that could
    // be cut) or cut to make room, and counted: all but the 64 held, the slow bodies
    // answered from their heads, and the login forms that timed out.
    let scrape = scrape_now(metrics);
    for listener in ["admin", "metrics"] {
        let count = |reason| refused(&scrape, listener, reason);
        let (per_address, full, evicted) = (count("per_address"), count("full"), count("evicted"));
        println!(
            "{listener}: {per_address} refused per address, {full} refused full, {evicted} \
             evicted, {} request timeouts",
            count("request_timeout")
        );
        assert!(per_address > 0, "{listener}");
        assert!(
            per_address + full + evicted >= (IDLE - 64) as u64,
            "{listener}: {per_address} {full} {evicted}"
        );
        assert_eq!(count("write_timeout"), 0);
    }
    drop((slow_admin, slow_metrics, idle_admin, idle_metrics));
    assert!(fg.stderr().contains("admin address listening"));
}

#[test]
fn a_body_is_read_only_after_the_heads_credentials() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let admin = closed_port();
    let extra = format!(
        "[admin]\nsocket = \"admin.sock\"\naddress = \"{admin}\"\ntoken_file = \"{}\"\n\
         request_timeout = \"1s\"\nconsole_actions = true\n",
        token_file(dir.path())
    );
    let _fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&extra));
    // With the right token the body is read: one that never comes ends in 408.
    let head = format!(
        "POST /v1/reload HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 10000\r\n"
    );
    let (got, text, _) = timed_request(admin, &head, "", Duration::ZERO, REPLY_TIMEOUT);
    assert_eq!(got, 408, "{text}");
    // The login form has no token before its body: read within the request timeout.
    let head =
        format!("POST /console/login HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 10000\r\n");
    let (got, text, _) = timed_request(admin, &head, "token=abc", Duration::ZERO, REPLY_TIMEOUT);
    assert_eq!(got, 408, "{text}");
    assert!(text.contains("request not received in time"), "{text}");
    // Heads announcing a body that never comes: answered from the head alone, not after
    // the request timeout (408), and closed. (The wrong token comes last: it makes
    // 127.0.0.1 wait before its next token.)
    let unread = [
        ("/v1/reload", "", 401, "missing Authorization: Bearer TOKEN"),
        (
            "/console/act/reset?key=a",
            "",
            401,
            "log in with the admin token",
        ),
        (
            "/console/act/reset?key=a",
            "Cookie: floodgate_console=no-such-session\r\n",
            401,
            "log in with the admin token",
        ),
        ("/console/logout", "", 303, "see /console/login"),
        (
            "/v1/reload",
            "Authorization: Bearer wrong-token-0123456789\r\n",
            401,
            "wrong bearer token",
        ),
    ];
    for (target, extra, status, words) in unread {
        let head =
            format!("POST {target} HTTP/1.1\r\nHost: {admin}\r\n{extra}Content-Length: 10000\r\n");
        let (got, text, _) = timed_request(admin, &head, "", Duration::ZERO, REPLY_TIMEOUT);
        assert_eq!(got, status, "{target}: {text}");
        assert!(text.contains(words), "{target}: {text}");
        assert!(!text.contains("not received in time"), "{target}: {text}");
    }
    // A request without a token whose body was sent gets its 401 whole (the unread body
    // does not reset the connection under the answer).
    let head = format!("POST /v1/reload HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 5000\r\n");
    let (got, text, _) = timed_request(
        admin,
        &head,
        &"x".repeat(5000),
        Duration::ZERO,
        REPLY_TIMEOUT,
    );
    assert_eq!(got, 401, "{text}");
    assert!(text.ends_with("}\n"), "{text}");
}

#[test]
fn one_address_beyond_its_bound_is_refused_at_once_and_others_are_not() {
    let rec = Recorder::plain();
    let metrics = closed_port();
    let extra = format!(
        "[metrics]\naddress = \"{metrics}\"\n[admin]\nsocket = \"admin.sock\"\n\
         max_connections_per_address = 3\n"
    );
    let _fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&extra));
    let from = Ipv4Addr::new(127, 0, 0, 7);
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| connect_from(from, metrics).unwrap())
        .collect();
    // The fourth from that address: 429 with Retry-After, closed.
    let mut s = connect_from(from, metrics).unwrap();
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 429 "), "{text}");
    assert!(text.contains("Retry-After: 1\r\n"), "{text}");
    assert!(
        text.contains("too many connections from your address"),
        "{text}"
    );
    // Another address is served; once one of the three sends its request, the address
    // has room again.
    let (status, _, _) = timed_get(metrics, "/metrics", "", REPLY_TIMEOUT);
    assert_eq!(status, 200);
    let mut first = idle.into_iter().next().unwrap();
    first.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    first
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    first.read_to_end(&mut out).unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200 OK"), "{out:?}");
    let mut s = connect_from(from, metrics).unwrap();
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert_eq!(refused(&text, "metrics", "per_address"), 1, "{text}");
}

/// A store snapshot with `n` keys of the per-user limit, each named with `len` characters,
/// so that `/v1/top?n=N` is a large answer.
fn snapshot_with_long_keys(path: &Path, n: u32, len: usize) {
    use floodgate::limit::ewma::EwmaState;
    use floodgate::store::{MemoryStore, Record};
    let store = MemoryStore::default();
    let now_us = floodgate::store::now_micros();
    for i in 0..n {
        store.insert_record(
            &format!("1h/per_rcpt/{i:06}{}", "u".repeat(len)),
            Record::Ewma(EwmaState {
                time_us: now_us,
                rate: f64::from(i % 500),
            }),
        );
    }
    store.save_snapshot(path).unwrap();
}

#[test]
fn clients_that_never_read_a_large_answer_are_cut_after_the_write_timeout() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let snapshot = dir.path().join("state");
    snapshot_with_long_keys(&snapshot, 2_500, 300);
    let admin = closed_port();
    let metrics = closed_port();
    let extra = format!(
        "[[limit]]\nname = \"per-user\"\nstage = \"rcpt\"\n\
         ratelimit = \"100 / 1h / per_rcpt / ${{authenticated_id}}\"\naction = \"defer\"\n\
         [store]\nbackend = \"memory\"\npath = \"{}\"\n\
         [metrics]\naddress = \"{metrics}\"\n\
         [admin]\nsocket = \"admin.sock\"\naddress = \"{admin}\"\ntoken_file = \"{}\"\n\
         write_timeout = \"10s\"\n",
        snapshot.display(),
        token_file(dir.path())
    );
    let _fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&extra),
    );
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    // The whole answer, read: its length.
    let (status, whole, took) = timed_get(admin, "/v1/top?n=2500", &bearer, REPLY_TIMEOUT);
    assert_eq!(status, 200);
    println!("the large answer: {} bytes in {took:?}", whole.len());
    assert!(whole.len() > 1_000_000, "{}", whole.len());

    // More clients than there are handlers (16) ask for it and never read.
    let sent = Instant::now();
    let slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(admin).unwrap();
            write!(s, "GET /v1/top?n=2500 HTTP/1.1\r\nHost: x\r\n{bearer}\r\n").unwrap();
            s
        })
        .collect();
    // Wait until every one has its answer started (the handlers build the answers one
    // after the other on the admin thread): from then on they only hold their connections.
    for s in &slow {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(s.peek(&mut b).expect("the answer starts"), 1);
    }
    println!("20 large answers started after {:?}", sent.elapsed());
    assert_eq!(held(admin), 20);
    // Others are served meanwhile, on both addresses.
    let two = Duration::from_secs(2);
    let (status, _, took) = timed_get(metrics, "/metrics", "", two);
    assert_eq!(status, 200);
    assert!(took < two, "{took:?}");
    let (status, page, took) = timed_get(admin, "/console/", &bearer, two);
    println!("GET /console/ beside 20 clients not reading: {took:?}");
    assert_eq!(status, 200, "{page}");
    assert!(took < two, "{took:?}");

    // The slow ones are cut once their answers have stalled for write_timeout: each then
    // reads what was sent before the cut, short of the whole answer, and the end.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, scrape, _) = timed_get(metrics, "/metrics", "", two);
        if refused(&scrape, "admin", "write_timeout") >= 20 {
            break;
        }
        assert!(Instant::now() < deadline, "not cut within 60 s:\n{scrape}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cut_after = sent.elapsed();
    println!("20 clients not reading cut after {cut_after:?} (write_timeout 10s)");
    assert!(cut_after >= Duration::from_secs(10), "{cut_after:?}");
    assert_eq!(refused(&scrape_now(metrics), "admin", "write_timeout"), 20);
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(got.len() < whole.len(), "{} of {}", got.len(), whole.len());
    }
    // Their descriptors are closed (the server frees a slot once it has seen the close:
    // wait for it, bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    while held(admin) != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        held(admin),
        0,
        "{}",
        std::fs::read_to_string("/proc/net/tcp").unwrap()
    );
}
