//! `GET /metrics` after scripted sessions through the real binary: exact counts, and no
//! label value that names a user or a client address.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;

/// One HTTP request over any stream; returns (status, body).
fn http(mut s: impl Read + Write, req: &str) -> (u16, String) {
    s.write_all(req.as_bytes()).expect("send request");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read answer");
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn get_tcp(addr: SocketAddr, path: &str) -> (u16, String) {
    let s = TcpStream::connect(addr).expect("connect metrics");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    http(s, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"))
}

/// The value of one series (name with its labels, as rendered), as written.
fn raw_sample<'a>(text: &'a str, series: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
}

/// The value of one series, a whole number.
fn sample(text: &str, series: &str) -> u64 {
    raw_sample(text, series)
        .parse()
        .unwrap_or_else(|_| panic!("series {series} is not an integer"))
}

/// The value of one series, a number with a fraction (a ratio gauge).
fn fsample(text: &str, series: &str) -> f64 {
    raw_sample(text, series)
        .parse()
        .unwrap_or_else(|_| panic!("series {series} is not a number"))
}

/// The open sessions of workers 0 and 1.
fn worker_sessions(text: &str) -> (u64, u64) {
    (
        sample(text, r#"floodgate_worker_sessions{worker="0"}"#),
        sample(text, r#"floodgate_worker_sessions{worker="1"}"#),
    )
}

fn auth_plain(c: &mut RawClient, user: &str, password: &str) -> Reply {
    let token = b64_encode(format!("\0{user}\0{password}").as_bytes());
    c.cmd(&format!("AUTH PLAIN {token}"))
}

#[test]
fn scripted_sessions_give_exact_counts() {
    let rec = Recorder::plain();
    let metrics = closed_port();
    let cfg = FloodgateConfig::new(rec.addr())
        .auth_without_tls(true)
        .log_level("info")
        .extra(&format!(
            r#"
[metrics]
address = "{metrics}"

[[limit]]
name = "per-user"
when = "authenticated"
count = "recipients"
key = "${{authenticated_id}}"
algorithm = "bucket"
rate = "7 / 1h"
burst = "7"
action = "defer"
"#
        ));
    let fg = Floodgate::start(&cfg);

    // Session 1: STARTTLS, AUTH, two messages (3 + 2 recipients). 14 command lines.
    let out = smtplib(
        fg.addr("submission"),
        r#"
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.ehlo("one.test")
s.starttls(context=ctx())
s.ehlo("one.test")
token = base64.b64encode(("\0%s\0%s" % (USER, PASSWORD)).encode()).decode()
out("auth", s.docmd("AUTH", "PLAIN " + token)[0])
r1 = s.sendmail("alice@example.org", ["a1@example.com", "a2@example.com", "a3@example.com"], b"Subject: one\r\n\r\nfirst\r\n")
r2 = s.sendmail("alice@example.org", ["b1@example.com", "b2@example.com"], b"Subject: two\r\n\r\nsecond\r\n")
out("refused", len(r1) + len(r2))
s.quit()
"#,
        Duration::from_secs(60),
    );
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("auth").as_deref(), Some("235"), "{out}");
    assert_eq!(out.field("refused").as_deref(), Some("0"), "{out}");

    // Session 2: a failed AUTH, a good one, one message with the 8th recipient deferred.
    // 9 command lines.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("two.test").code, 250);
    assert_eq!(auth_plain(&mut c, USER, "wrong").class(), 5);
    assert_eq!(auth_plain(&mut c, USER, PASSWORD).code, 235);
    assert_eq!(c.cmd("MAIL FROM:<alice@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<c1@example.com>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<c2@example.com>").code, 250);
    let deferred = c.cmd("RCPT TO:<c3@example.com>");
    assert_eq!(deferred.class(), 4, "{deferred:?}");
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: three\r\n\r\nthird\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    drop(c);

    let msgs = rec.messages();
    assert_eq!(msgs.len(), 3);
    let rcpts: usize = msgs.iter().map(|m| m.rcpts.len()).sum();
    assert_eq!(rcpts, 7);

    // Sessions are counted open until their task ends: wait for both to close.
    let text = wait_until(Duration::from_secs(10), "both sessions closed", || {
        let (status, body) = get_tcp(metrics, "/metrics");
        assert_eq!(status, 200);
        (sample(&body, "floodgate_sessions_open") == 0).then_some(body)
    });
    let want: &[(&str, u64)] = &[
        ("floodgate_sessions_total{listener=\"plain\"}", 1),
        ("floodgate_sessions_total{listener=\"submission\"}", 1),
        ("floodgate_sessions_total{listener=\"submissions\"}", 0),
        ("floodgate_commands_total", 23),
        ("floodgate_messages_relayed_total", 3),
        ("floodgate_recipients_relayed_total", 7),
        ("floodgate_refused_total", 1),
        (
            "floodgate_policy_verdicts_total{limit=\"per-user\",action=\"defer\"}",
            1,
        ),
        ("floodgate_upstream_connects_total", 2),
        ("floodgate_upstream_errors_total{kind=\"connect\"}", 0),
        (
            "floodgate_tls_handshakes_total{side=\"client\",result=\"ok\"}",
            1,
        ),
        (
            "floodgate_tls_handshakes_total{side=\"client\",result=\"failed\"}",
            0,
        ),
        ("floodgate_auth_total{result=\"success\"}", 2),
        ("floodgate_auth_total{result=\"failure\"}", 1),
        (
            "floodgate_connections_refused_total{cap=\"max_connections\"}",
            0,
        ),
        ("floodgate_store_errors_total{kind=\"unavailable\"}", 0),
    ];
    for (series, n) in want {
        assert_eq!(sample(&text, series), *n, "{series}\n{text}");
    }
    // Bytes: what upstream received for the three messages, as floodgate sized them
    // (the data without its final ".CRLF").
    let bytes: usize = msgs.iter().map(|m| m.data.len()).sum();
    assert_eq!(
        sample(&text, "floodgate_bytes_relayed_total"),
        bytes as u64,
        "{text}"
    );
    assert!(sample(&text, "floodgate_store_decisions_total") > 0);
    assert_eq!(
        sample(&text, "floodgate_store_decision_seconds_count"),
        sample(&text, "floodgate_store_decisions_total")
    );

    // No label value names the user or the client address.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some((_, labels)) = line.split_once('{') {
            for bad in [USER, "127.0.0.1", "example.org", "example.com"] {
                assert!(!labels.contains(bad), "label with {bad}: {line}");
            }
        }
    }

    // The admin socket serves the same exposition.
    let s = UnixStream::connect(fg.admin_socket()).expect("admin socket");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    let (status, body) = http(s, "GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 200);
    assert_eq!(sample(&body, "floodgate_messages_relayed_total"), 3);
    // The metrics address serves nothing else.
    assert_eq!(get_tcp(metrics, "/v1/top").0, 404);
}

#[test]
fn metrics_address_must_be_loopback() {
    let rec = Recorder::plain();
    let cfg = FloodgateConfig::new(rec.addr()).extra("[metrics]\naddress = \"0.0.0.0:9465\"\n");
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = run_with_timeout(
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(20),
    );
    assert!(!out.ok(), "{out}");
    assert!(out.stderr.contains("is not a loopback address"), "{out}");
    assert!(out.stderr.contains("f.toml:"), "{out}");
}

/// With two workers, sessions are spread evenly whichever worker's event loop accepts them
/// (without balancing, a run of connections usually lands on one worker), and a session
/// handed to the other worker relays like any other.
#[test]
fn sessions_are_spread_evenly_over_the_workers() {
    let rec = Recorder::plain();
    let metrics = closed_port();
    let cfg = FloodgateConfig::new(rec.addr())
        .server("workers", "2")
        .extra(&format!("[metrics]\naddress = \"{metrics}\"\n"));
    let fg = Floodgate::start(&cfg);
    let addr = fg.addr("submission");

    // One at a time, each fully set up before the next: every accept sees the counts of
    // all the sessions before it.
    const N: usize = 20;
    let mut clients = Vec::new();
    for i in 0..N {
        let mut c = RawClient::connect_greeted(addr);
        assert_eq!(c.ehlo(&format!("c{i}.test")).code, 250);
        clients.push(c);
    }
    let text = get_tcp(metrics, "/metrics").1;
    assert_eq!(worker_sessions(&text), (10, 10), "\n{text}");
    let handoffs = sample(&text, "floodgate_worker_handoffs_total");
    assert!(handoffs <= N as u64, "{handoffs}");
    for w in ["0", "1"] {
        let busy = fsample(
            &text,
            &format!("floodgate_worker_busy_ratio{{worker=\"{w}\"}}"),
        );
        assert!((0.0..=1.0).contains(&busy), "worker {w}: {busy}\n{text}");
    }

    relay_all_then_close(clients, &rec, metrics);
}

/// With `placement = "pack"` and two workers, the first worker's loop takes sessions while
/// it has room (16 sessions, or three quarters of a core), then the second's, and once both
/// are full the counts even out; a session handed to the second worker relays like any other.
#[test]
fn sessions_fill_the_first_worker_then_spread() {
    let rec = Recorder::plain();
    let metrics = closed_port();
    let cfg = FloodgateConfig::new(rec.addr())
        .server("workers", "2")
        .server("placement", "\"pack\"")
        .extra(&format!("[metrics]\naddress = \"{metrics}\"\n"));
    let fg = Floodgate::start(&cfg);
    let addr = fg.addr("submission");

    // One at a time, each fully set up before the next: every choice sees the sessions
    // before it. Idle sessions keep the loops far from busy, but a debug build's first
    // sessions, or other tests on the same cores, can keep a loop busy for a while, and
    // placement rightly avoids a busy loop; so each connection waits until both loops'
    // busy shares are low, as they are under light load.
    let quiet = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = get_tcp(metrics, "/metrics").1;
            let busy = ["0", "1"].map(|w| {
                fsample(
                    &text,
                    &format!("floodgate_worker_busy_ratio{{worker=\"{w}\"}}"),
                )
            });
            if busy.iter().all(|&b| b < 0.3) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a loop stays busy: {busy:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    const N: usize = 40;
    let mut clients = Vec::new();
    for i in 0..N {
        quiet();
        let mut c = RawClient::connect_greeted(addr);
        assert_eq!(c.ehlo(&format!("c{i}.test")).code, 250);
        clients.push(c);
        if i + 1 == 16 {
            let text = get_tcp(metrics, "/metrics").1;
            assert_eq!(worker_sessions(&text), (16, 0), "\n{text}");
        }
    }
    // Both full (16 each), the rest go to the less loaded loop. A loop that is busy at the
    // instant of a choice (descheduled by other tests, say) is passed over for that one
    // session, so allow one such choice.
    let text = get_tcp(metrics, "/metrics").1;
    let (w0, w1) = worker_sessions(&text);
    assert_eq!(w0 + w1, N as u64, "\n{text}");
    assert!(w0.abs_diff(w1) <= 2, "({w0}, {w1})\n{text}");
    // Whichever worker's loop accepted each one: a session is handed over only when the
    // other worker serves it.
    let handoffs = sample(&text, "floodgate_worker_handoffs_total");
    assert!(handoffs <= N as u64, "{handoffs}");
    for w in ["0", "1"] {
        let busy = fsample(
            &text,
            &format!("floodgate_worker_busy_ratio{{worker=\"{w}\"}}"),
        );
        assert!((0.0..0.75).contains(&busy), "worker {w}: {busy}\n{text}");
    }

    relay_all_then_close(clients, &rec, metrics);
}

/// Sends one message through each client, on whichever worker its session runs, checks that
/// every one arrived, closes them all and waits until the workers count no session.
fn relay_all_then_close(mut clients: Vec<RawClient>, rec: &Recorder, metrics: SocketAddr) {
    // Every session relays, on whichever worker it runs.
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}@dest.test>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(b"Subject: spread\r\n\r\nx\r\n.\r\n");
        assert_eq!(c.reply().code, 250);
        assert_eq!(c.cmd("QUIT").code, 221);
    }
    let mut got: Vec<String> = rec.messages().into_iter().flat_map(|m| m.rcpts).collect();
    got.sort();
    let mut want: Vec<String> = (0..clients.len())
        .map(|i| format!("r{i}@dest.test"))
        .collect();
    want.sort();
    assert_eq!(got, want);

    // The counts follow the sessions down.
    drop(clients);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = get_tcp(metrics, "/metrics").1;
        let open = worker_sessions(&text);
        if open == (0, 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still open: {open:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
