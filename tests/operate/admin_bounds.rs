//! The admin address and the metrics address under connections that never send a request or
//! never read their answer, through the real binary: 5,000 idle connections to each leave
//! `GET /metrics`, a console page and SMTP sessions answering within 2 s, with floodgate's
//! descriptors bounded; clients that do not read a large answer are cut after
//! `[admin] write_timeout` while others are served. The times are printed.

use crate::common;
use crate::loadkit;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "bounds-test-token-0123456789";
/// Idle connections opened to each address.
const IDLE: usize = 5_000;

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

/// One request on a fresh connection, the whole answer read within `limit`; returns the
/// status, the answer and the time it took (connect included).
fn timed_get(
    addr: SocketAddr,
    target: &str,
    extra: &str,
    limit: Duration,
) -> (u16, String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, limit).expect("connect");
    s.set_read_timeout(Some(limit)).unwrap();
    s.set_write_timeout(Some(limit)).unwrap();
    write!(s, "GET {target} HTTP/1.1\r\nHost: {addr}\r\n{extra}\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("GET {target}: {e} after {:?}", t.elapsed()));
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text, t.elapsed())
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

/// Opens `n` connections to `addr` that send nothing, within `limit` in all. (A connection
/// that finds the kernel's listen queue full waits for its SYN to be sent again, a second
/// or more: on a loaded machine the flood takes a while.)
fn idle_connections(addr: SocketAddr, n: usize, limit: Duration) -> Vec<TcpStream> {
    let deadline = Instant::now() + limit;
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} connections opened in {limit:?}",
            conns.len()
        );
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => conns.push(s),
            Err(e) => panic!("connection {} to {addr}: {e}", conns.len()),
        }
    }
    conns
}

#[test]
fn five_thousand_idle_connections_leave_metrics_console_and_smtp_answering() {
    // Two sets of idle connections, and room for the requests and the other tests' files
    // (the tests of this binary run side by side).
    let limit = loadkit::raise_nofile(2 * IDLE as u64 + 2_000);
    assert!(
        limit >= 2 * IDLE as u64 + 200,
        "the open-file limit ({limit}) cannot hold {IDLE} connections to each address"
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
    let idle_admin = idle_connections(admin, IDLE, Duration::from_secs(180));
    let idle_metrics = idle_connections(metrics, IDLE, Duration::from_secs(180));
    println!(
        "{} idle connections opened in {:?}",
        idle_admin.len() + idle_metrics.len(),
        t.elapsed()
    );
    // Each listener holds at most [admin] max_connections (64) of them, and one more for
    // the moment between cutting the oldest and its task closing it.
    let (on_admin, on_metrics) = (held(admin), held(metrics));
    println!("connections floodgate holds: {on_admin} on the admin address, {on_metrics} on the metrics address");
    assert!(
        on_admin <= 65 && on_metrics <= 65,
        "{on_admin} {on_metrics}"
    );

    let two = Duration::from_secs(2);
    let (status, scrape, took) = timed_get(metrics, "/metrics", "", two);
    println!("GET /metrics with {IDLE} idle connections on each address: {took:?}");
    assert_eq!(status, 200, "{scrape}");
    assert!(took < two, "{took:?}");
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let (status, page, took) = timed_get(admin, "/console/", &bearer, two);
    println!("GET /console/ with {IDLE} idle connections on each address: {took:?}");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Overview"), "{page}");
    assert!(took < two, "{took:?}");
    let (status, _, took) = timed_get(admin, "/console/login", "", two);
    println!("GET /console/login with {IDLE} idle connections on each address: {took:?}");
    assert_eq!(status, 200);
    assert!(took < two, "{took:?}");
    let (status, _, took) = timed_get(admin, "/metrics", &bearer, two);
    assert_eq!(status, 200);
    assert!(took < two, "{took:?}");

    // SMTP still opens and greets.
    let t = Instant::now();
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    println!(
        "SMTP greeting with the idle connections open: {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < two, "{:?}", t.elapsed());
    assert_eq!(c.cmd("EHLO laptop.test").code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);

    // The idle connections were cut to make room, and counted.
    let (_, scrape, _) = timed_get(metrics, "/metrics", "", two);
    for listener in ["admin", "metrics"] {
        let evicted = refused(&scrape, listener, "evicted");
        assert!(
            evicted >= (IDLE - 64) as u64,
            "{listener}: {evicted} evicted"
        );
        assert_eq!(refused(&scrape, listener, "write_timeout"), 0);
    }
    drop(idle_admin);
    drop(idle_metrics);
    assert!(fg.stderr().contains("admin address listening"));
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
    // Their descriptors are closed.
    assert_eq!(held(admin), 0);
}
