//! The console's login through the real binary: wrong tokens slow their own client address
//! down, doubling, and no other; wrong tokens from 2,000 addresses share the minute's tries
//! (`[admin] login_failures_per_minute`) and the right token works once they stop; the
//! right token still works once the wait is over; over
//! TLS (`[admin.tls]`, curl against the development CA) the session cookie is `Secure`;
//! `allow_remote = true` without TLS is refused by name unless the config opts out.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "login-test-token-0123456789";

fn token_file(dir: &Path) -> String {
    let t = dir.join("token");
    std::fs::write(&t, format!("{TOKEN}\n")).unwrap();
    t.display().to_string()
}

/// A connection to `to` from the local address `from` (another loopback address: another
/// client as far as floodgate can tell).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(format!("{from}:0").parse().unwrap())
            .expect("bind another loopback address");
        tokio::time::timeout(REPLY_TIMEOUT, socket.connect(to))
            .await
            .expect("connect in time")
            .expect("connect")
    });
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// The status and the whole answer of a login posting `token`, from `from`.
fn post_login(from: &str, to: SocketAddr, token: &str) -> (u16, String) {
    let mut s = connect_from(from, to);
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    let body = format!("token={token}");
    write!(
        s,
        "POST /console/login HTTP/1.1\r\nHost: {to}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    (text[9..12].parse().unwrap(), text)
}

/// Posts `token` from `from` until it is looked at (not 429). Returns that answer, when
/// its request was sent and when its answer had come. Bounded.
fn login_when_heard(from: &str, to: SocketAddr, token: &str) -> (u16, String, Instant, Instant) {
    let first = Instant::now();
    loop {
        let sent = Instant::now();
        let (status, text) = post_login(from, to, token);
        if status != 429 {
            return (status, text, sent, Instant::now());
        }
        assert!(text.contains("Retry-After: "), "{text}");
        assert!(
            first.elapsed() < Duration::from_secs(30),
            "still 429 after 30 s: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn wrong_tokens_slow_their_address_doubling_and_no_other() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let addr = closed_port();
    let base = Duration::from_millis(250);
    let extra = format!(
        "[admin]\nsocket = \"admin.sock\"\naddress = \"{addr}\"\ntoken_file = \"{}\"\n\
         login_base_delay = \"250ms\"\nlogin_max_delay = \"30s\"\n",
        token_file(dir.path())
    );
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&extra),
    );
    // Four wrong tokens from 127.0.0.1, each sent as soon as the address is heard again.
    // The server heard each between its sending and its answer, so the time from sending
    // one to the answer of the next is at least the wait the first earned: base, 2·base,
    // 4·base (a little less as the count decays; 5 % allowed).
    let mut heard = Vec::new();
    for _ in 0..4 {
        let (status, text, sent, answered) =
            login_when_heard("127.0.0.1", addr, "wrong-token-0123456789");
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("wrong token"), "{text}");
        heard.push((sent, answered));
    }
    let waits: Vec<Duration> = heard.windows(2).map(|w| w[1].1 - w[0].0).collect();
    println!("waits between wrong tokens from one address (base 250ms): {waits:?}");
    for (i, w) in waits.iter().enumerate() {
        let at_least = base * (1 << i) * 95 / 100;
        assert!(*w >= at_least, "wait {i}: {w:?} < {at_least:?}");
    }
    // The 4th wrong token earned 8·base: meanwhile 127.0.0.1 gets 429 even with the right
    // token, with Retry-After in whole seconds.
    let (status, text) = post_login("127.0.0.1", addr, TOKEN);
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("Retry-After: 2\r\n"), "{text}");
    assert!(
        text.contains("too many wrong tokens from your address"),
        "{text}"
    );
    assert!(!text.contains("Set-Cookie"), "{text}");
    // Another address is not slowed: its wrong token is looked at and answered 401 at
    // once, and the right one works after its own (first) wait.
    let (status, text) = post_login("127.0.0.2", addr, "wrong-token-0123456789");
    assert_eq!(status, 401, "{text}");
    let t = Instant::now();
    let (status, text, _, _) = login_when_heard("127.0.0.2", addr, TOKEN);
    assert_eq!(status, 303, "{text}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // The right token from 127.0.0.1 works once its wait is over.
    let (status, text, _, answered) = login_when_heard("127.0.0.1", addr, TOKEN);
    assert_eq!(status, 303, "{text}");
    assert!(text.contains("Set-Cookie: floodgate_console="), "{text}");
    assert!(
        !text.contains("Secure"),
        "plain HTTP: no Secure cookie: {text}"
    );
    let waited = answered - heard[3].0;
    assert!(waited >= base * 8 * 95 / 100, "{waited:?}");
    // And it forgot the address's wrong tokens: the next wrong one waits the base again.
    let (status, _) = post_login("127.0.0.1", addr, "wrong-token-0123456789");
    assert_eq!(status, 401);
    let (status, text) = post_login("127.0.0.1", addr, TOKEN);
    assert_eq!(status, 429);
    assert!(text.contains("Retry-After: 1\r\n"), "{text}");
    // Each wrong token is logged with its address and wait.
    let log = fg.stderr();
    assert!(log.contains("wrong token"), "{log}");
    assert!(log.contains("client=127.0.0.2"), "{log}");
}

#[test]
fn wrong_tokens_from_two_thousand_addresses_share_the_minutes_tries() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let addr = closed_port();
    let per_minute = 60;
    let extra = format!(
        "[admin]\nsocket = \"admin.sock\"\naddress = \"{addr}\"\ntoken_file = \"{}\"\n\
         login_failures_per_minute = {per_minute}\n",
        token_file(dir.path())
    );
    let _fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&extra));
    // One wrong token from each of 2,000 addresses in 127/8: as many are looked at as the
    // bucket holds (60) plus what it refilled meanwhile (one a second); every other one is
    // answered 429 naming the many addresses, its token not looked at.
    let started = Instant::now();
    let (mut looked_at, mut refused) = (0u64, 0u64);
    for i in 0..2_000u32 {
        let from = format!("127.3.{}.{}", i / 250, 1 + i % 250);
        let (status, text) = post_login(&from, addr, "wrong-token-0123456789");
        match status {
            401 => looked_at += 1,
            429 => {
                assert!(text.contains("many addresses"), "{text}");
                assert!(text.contains("Retry-After: "), "{text}");
                refused += 1;
            }
            _ => panic!("{from}: {text}"),
        }
    }
    let secs = started.elapsed().as_secs() + 1;
    println!(
        "2,000 addresses, one wrong token each, in {:?}: {looked_at} looked at, {refused} refused",
        started.elapsed()
    );
    assert!(looked_at >= per_minute, "{looked_at}");
    assert!(looked_at <= per_minute + secs, "{looked_at} in {secs} s");
    assert_eq!(looked_at + refused, 2_000);
    // Meanwhile no token is looked at, not even the right one from a fresh address, nor a
    // bearer token on the API.
    let (status, text) = post_login("127.4.0.1", addr, TOKEN);
    assert_eq!(status, 429, "{text}");
    assert!(!text.contains("Set-Cookie"), "{text}");
    let mut s = connect_from("127.4.0.2", addr);
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    write!(
        s,
        "GET /v1/top HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 429"), "{out}");
    assert!(out.contains("many addresses"), "{out}");
    // The guessing stopped: the right token works as soon as a try is back.
    let (status, text, _, _) = login_when_heard("127.4.0.1", addr, TOKEN);
    assert_eq!(status, 303, "{text}");
    assert!(text.contains("Set-Cookie: floodgate_console="), "{text}");
}

#[test]
fn the_console_over_tls_sets_a_secure_cookie() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let addr = closed_port();
    let extra = format!(
        "[admin]\nsocket = \"admin.sock\"\naddress = \"{addr}\"\ntoken_file = \"{}\"\n\
         [admin.tls]\ncertificate = \"{}\"\nprivate_key = \"{}\"\n",
        token_file(dir.path()),
        dev_cert("server.crt").display(),
        dev_cert("server.key").display()
    );
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&extra),
    );
    let url = format!("https://{addr}/console/login");
    let curl = |args: &[&str]| {
        let out = run_with_timeout(
            Command::new("curl")
                .args(["-sS", "--max-time", "10", "--cacert"])
                .arg(ca_file())
                .args(args),
            Duration::from_secs(20),
        );
        assert!(out.ok(), "{out}");
        out.stdout
    };
    let head = curl(&[
        "-D",
        "-",
        "-o",
        "/dev/null",
        "--data",
        &format!("token={TOKEN}"),
        &url,
    ]);
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .unwrap_or_else(|| panic!("no cookie: {head}"))
        .trim()
        .to_string();
    let attributes: Vec<&str> = cookie.split("; ").collect();
    for want in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(attributes.contains(&want), "{want}: {cookie}");
    }
    // The cookie opens the pages over TLS.
    let session = format!("Cookie: {}", attributes[0]);
    let page = curl(&[
        "-H",
        &session,
        "-w",
        "\nstatus=%{http_code}",
        &format!("https://{addr}/console/"),
    ]);
    assert!(page.ends_with("status=200"), "{page}");
    assert!(page.contains("Overview"), "{page}");
    // Plain HTTP on the TLS address gets no answer, and is counted.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    s.write_all(b"GET /console/ HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(!out.starts_with(b"HTTP/1.1 200"), "{out:?}");
    let scrape = admin_get(&fg.admin_socket(), "/metrics");
    assert!(
        scrape.contains(
            "floodgate_admin_connections_refused_total{listener=\"admin\",reason=\"tls_handshake\"} 1\n"
        ),
        "{scrape}"
    );
    // A key that cannot be read: `check` and `run` refuse the config, naming it.
    let bad = dir.path().join("bad.toml");
    let text = FloodgateConfig::new(rec.addr())
        .extra(&extra.replace("server.key", "missing.key"))
        .toml();
    std::fs::write(&bad, text).unwrap();
    for verb in ["check", "run"] {
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args([verb, "--config"])
                .arg(&bad),
            Duration::from_secs(30),
        );
        assert!(!out.ok() && !out.timed_out, "{verb}: {out}");
        assert!(
            out.stderr.contains("[admin.tls]") && out.stderr.contains("missing.key"),
            "{verb}: {out}"
        );
    }
}

#[test]
fn allow_remote_without_tls_is_refused_unless_the_config_opts_out() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let addr = closed_port();
    let admin = format!(
        "[admin]\nsocket = \"admin.sock\"\naddress = \"{addr}\"\ntoken_file = \"{}\"\n\
         allow_remote = true\n",
        token_file(dir.path())
    );
    let cfg = FloodgateConfig::new(rec.addr()).extra(&admin);
    let path = dir.path().join("floodgate.toml");
    let text = cfg.toml();
    std::fs::write(&path, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l == "allow_remote = true")
        .unwrap()
        + 1;
    for verb in ["check", "run"] {
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args([verb, "--config"])
                .arg(&path),
            Duration::from_secs(30),
        );
        assert!(!out.ok() && !out.timed_out, "{verb}: {out}");
        let want = format!(
            "{}:{line}:16: [admin] allow_remote = true without [admin.tls]",
            path.display()
        );
        assert!(out.stderr.contains(&want), "{verb}: {want}\n{out}");
        assert!(
            out.stderr.contains("allow_remote_without_tls = true"),
            "{verb}: {out}"
        );
    }
    // With the explicit opt-out it starts and serves.
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .extra(&format!("{admin}allow_remote_without_tls = true\n")),
    );
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    write!(
        s,
        "GET /v1/top HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    drop(fg);
}
