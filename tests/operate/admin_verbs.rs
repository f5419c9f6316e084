//! The admin verbs through the real binary: inspect, reset, top and reload against a
//! running floodgate (memory store, and Redis), the token-guarded TCP address, bad HTTP,
//! and the CLI with no floodgate running.

use crate::common;
use crate::common::redis as redis_server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

const LIMITS: &str = r#"
[[limit]]
name = "msgs-10"
stage = "mail"
when = "authenticated"
ratelimit = "10 / 1h / strict / per_mail / ${authenticated_id}"
action = "warn"

[[limit]]
name = "msgs-3"
stage = "mail"
when = "authenticated"
ratelimit = "3 / 2h / strict / per_mail / ${authenticated_id}"
action = "warn"

[[limit]]
name = "rcpt-bucket"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "defer"
"#;

fn users() -> RecorderOptions {
    RecorderOptions {
        users: vec![
            (USER.into(), PASSWORD.into()),
            ("bob".into(), "b0bpass".into()),
        ],
        ..RecorderOptions::default()
    }
}

fn start(rec: &Recorder, extra: &str) -> Floodgate {
    Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(extra),
    )
}

fn limit<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["limit"] == name)
        .unwrap_or_else(|| panic!("no limit {name} in {v}"))
}

/// A session on the plain listener authenticated as `user`; sends `n` messages of one
/// recipient each (the bucket lets the first through, defers the rest at RCPT).
fn send(fg: &Floodgate, user: &str, password: &str, n: usize) -> Vec<u16> {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{user}\0{password}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mut codes = Vec::new();
    for i in 0..n {
        assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
        let r = c.cmd(&format!("RCPT TO:<r{i}@example.com>"));
        codes.push(r.code);
        if r.code == 250 {
            assert_eq!(c.cmd("DATA").code, 354);
            c.send(b"Subject: t\r\n\r\nhi\r\n.\r\n");
            assert_eq!(c.reply().code, 250);
        } else {
            assert_eq!(c.cmd("RSET").code, 250);
        }
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    codes
}

#[test]
fn inspect_top_reset_and_reload_on_the_memory_store() {
    let rec = Recorder::start(users());
    let fg = start(&rec, LIMITS);
    let sock = fg.admin_socket();
    // alice: 4 MAIL commands (one message relayed, three deferred at RCPT); bob: 1.
    assert_eq!(send(&fg, USER, PASSWORD, 4), [250, 450, 450, 450]);
    assert_eq!(send(&fg, "bob", "b0bpass", 1), [250]);
    assert_eq!(rec.messages().len(), 2);

    // inspect: the strict per_mail limits counted 4 MAILs; 10 is under, 3 is over and
    // decays under after p·ln(rate/m).
    let v = admin_json(&sock, &["inspect", USER]);
    assert_eq!(v["key"], USER);
    let ten = limit(&v, "msgs-10");
    assert_eq!(ten["key"], "1h/per_mail/alice");
    let rate = ten["value"].as_f64().unwrap();
    assert!(rate > 3.99 && rate <= 4.0, "{v}");
    assert_eq!(ten["over"], false);
    assert_eq!(ten["until_under_secs"], 0.0);
    let three = limit(&v, "msgs-3");
    assert_eq!(three["over"], true);
    let t = three["until_under_secs"].as_f64().unwrap();
    let want = 7200.0 * (rate / 3.0).ln();
    assert!((t - want).abs() < 5.0, "{t} vs {want}");
    let bucket = limit(&v, "rcpt-bucket");
    assert_eq!(bucket["key"], "bucket/rcpt-bucket/alice");
    assert_eq!(bucket["algorithm"], "bucket");
    assert_eq!(bucket["stored"], true);
    // The human table names every limit.
    let table = admin_verb(&sock, &["inspect", USER]);
    assert!(table.ok(), "{table}");
    assert!(table.stdout.starts_with("LIMIT"), "{table}");
    for name in ["msgs-10", "msgs-3", "rcpt-bucket", "1h/per_mail/alice"] {
        assert!(table.stdout.contains(name), "{table}");
    }

    // top: alice's EWMA keys above bob's; --limit keeps one limit; -n bounds.
    let v = admin_json(&sock, &["top"]);
    let entries = v["entries"].as_array().unwrap();
    let first: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["key"].as_str().unwrap(), e["limit"].as_str().unwrap()))
        .collect();
    let pos = |k: &str, l: &str| first.iter().position(|e| *e == (k, l)).unwrap();
    assert!(pos("2h/per_mail/alice", "msgs-3") < pos("2h/per_mail/bob", "msgs-3"));
    assert!(pos("2h/per_mail/alice", "msgs-3") < pos("1h/per_mail/alice", "msgs-10"));
    assert!(pos("1h/per_mail/alice", "msgs-10") < pos("1h/per_mail/bob", "msgs-10"));
    let ratios: Vec<f64> = entries
        .iter()
        .map(|e| e["ratio"].as_f64().unwrap())
        .collect();
    assert!(ratios.windows(2).all(|w| w[0] >= w[1]), "{ratios:?}");
    let v = admin_json(&sock, &["top", "--limit", "msgs-10", "-n", "1"]);
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["key"], "1h/per_mail/alice");
    assert_eq!(entries[0]["limit"], "msgs-10");
    let out = admin_verb(&sock, &["top", "--limit", "nope"]);
    assert!(
        !out.ok() && out.stderr.contains("no limit named \"nope\""),
        "{out}"
    );

    // reload: a changed limit is picked up.
    let cfg = std::fs::read_to_string(fg.config_path()).unwrap();
    fg.write_config(&cfg.replace("\"10 / 1h / strict", "\"2 / 1h / strict"));
    let out = admin_verb(&sock, &["reload"]);
    assert!(out.ok(), "{out}");
    assert_eq!(out.stdout, "configuration reloaded\n");
    let v = admin_json(&sock, &["inspect", USER]);
    assert_eq!(limit(&v, "msgs-10")["limit_value"], 2.0);
    assert_eq!(limit(&v, "msgs-10")["over"], true);
    // A broken config is refused with its file and line; the old one stays.
    fg.write_config(&format!(
        "{cfg}\n[[limit]]\nname = \"broken\"\nratelimit = \"x\"\n"
    ));
    let out = admin_verb(&sock, &["reload"]);
    assert!(!out.ok(), "{out}");
    let path = fg.config_path().display().to_string();
    assert!(out.stderr.contains(&format!("{path}:")), "{out}");
    let v = admin_json(&sock, &["inspect", USER]);
    assert_eq!(limit(&v, "msgs-10")["limit_value"], 2.0);
    assert!(v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["limit"] != "broken"));
}

#[test]
fn reset_lets_a_deferred_user_send_again() {
    let rec = Recorder::plain();
    let fg = start(&rec, LIMITS);
    let sock = fg.admin_socket();
    assert_eq!(send(&fg, USER, PASSWORD, 2), [250, 450]);
    assert_eq!(rec.messages().len(), 1);
    // Still deferred in a new session.
    assert_eq!(send(&fg, USER, PASSWORD, 1), [450]);
    let out = admin_verb(&sock, &["reset", USER]);
    assert!(out.ok(), "{out}");
    // Three records: one per EWMA limit (1h and 2h keys), and the bucket.
    assert_eq!(out.stdout, "alice: removed 3 records\n");
    assert_eq!(send(&fg, USER, PASSWORD, 1), [250]);
    let msgs = rec.messages();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1].rcpts, ["r0@example.com"]);
    let v = admin_json(&sock, &["inspect", USER]);
    assert_eq!(limit(&v, "rcpt-bucket")["stored"], true);
    // Nothing left to reset for a key never seen.
    assert_eq!(
        admin_json(&sock, &["reset", "nobody"])["removed"],
        0,
        "unknown key"
    );
}

#[test]
fn verbs_on_the_redis_store() {
    let redis = redis_server::RedisServer::start();
    let rec = Recorder::start(users());
    let fg = start(
        &rec,
        &format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{LIMITS}",
            redis.url()
        ),
    );
    let sock = fg.admin_socket();
    assert_eq!(send(&fg, USER, PASSWORD, 4), [250, 450, 450, 450]);
    assert_eq!(send(&fg, "bob", "b0bpass", 1), [250]);
    let v = admin_json(&sock, &["inspect", USER]);
    let rate = limit(&v, "msgs-10")["value"].as_f64().unwrap();
    assert!(rate > 3.99 && rate <= 4.0, "{v}");
    assert_eq!(limit(&v, "msgs-3")["over"], true);
    let v = admin_json(&sock, &["top", "--limit", "msgs-3"]);
    let keys: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["2h/per_mail/alice", "2h/per_mail/bob"]);
    assert_eq!(v["partial"], false);
    let v = admin_json(&sock, &["top", "-n", "2"]);
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    assert_eq!(admin_json(&sock, &["reset", USER])["removed"], 3);
    assert_eq!(send(&fg, USER, PASSWORD, 1), [250]);
    let v = admin_json(&sock, &["inspect", USER]);
    let rate = limit(&v, "msgs-10")["value"].as_f64().unwrap();
    assert!(rate > 0.99 && rate <= 1.0, "{v}");
}

fn raw_http(addr: SocketAddr, req: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    (text[9..12].parse().unwrap(), text)
}

#[test]
fn token_guarded_tcp_address_and_bad_http() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let token_file = dir.path().join("token");
    let token = "0123456789abcdef-test-token";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let addr = closed_port();
    let fg = start(
        &rec,
        &format!(
            "[admin]\nsocket = \"admin.sock\"\naddress = \"{addr}\"\ntoken_file = \"{}\"\n{LIMITS}",
            token_file.display()
        ),
    );
    let get = |auth: &str| {
        raw_http(
            addr,
            format!("GET /v1/inspect?key=alice HTTP/1.1\r\n{auth}\r\n").as_bytes(),
        )
    };
    let (st, text) = get("");
    assert_eq!(st, 401, "{text}");
    assert!(text.contains("missing Authorization"), "{text}");
    assert_eq!(
        get("Authorization: Bearer wrong-token-of-some-len\r\n").0,
        401
    );
    // Each wrong token makes the address wait (1 s, then 2 s): a token presented meanwhile,
    // right or wrong, is not looked at: 429 with Retry-After.
    let retry_after = |text: &str| -> u64 {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("Retry-After: "))
            .unwrap_or_else(|| panic!("no Retry-After in {text}"));
        line.trim().parse().unwrap()
    };
    let (st, text) = get(&format!("Authorization: Bearer {token}x\r\n"));
    assert_eq!(st, 429, "{text}");
    assert!(text.contains("too many wrong tokens"), "{text}");
    std::thread::sleep(Duration::from_secs(retry_after(&text)));
    assert_eq!(get(&format!("Authorization: Bearer {token}x\r\n")).0, 401);
    let (st, text) = get(&format!("Authorization: Bearer {token}\r\n"));
    assert_eq!(st, 429, "{text}");
    assert_eq!(retry_after(&text), 2, "{text}");
    std::thread::sleep(Duration::from_secs(2));
    let (st, text) = get(&format!("Authorization: Bearer {token}\r\n"));
    assert_eq!(st, 200, "{text}");
    assert!(text.contains("\"1h/per_mail/alice\""), "{text}");

    // Bad requests on the admin socket get 400/404/405/413 with a clear body.
    let sock = fg.admin_socket();
    let ask = |req: &[u8]| {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        s.write_all(req).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let text = String::from_utf8_lossy(&out).into_owned();
        (text[9..12].parse::<u16>().unwrap(), text)
    };
    let cases: &[(&[u8], u16, &str)] = &[
        (
            b"GET /v1/inspect?key=a HTTP/1.1\nHost: x\r\n\r\n",
            400,
            "CRLF",
        ),
        (
            b"GET /v1/nothing HTTP/1.1\r\n\r\n",
            404,
            "no endpoint /v1/nothing",
        ),
        (b"GET /v1/reset?key=a HTTP/1.1\r\n\r\n", 405, "takes POST"),
        (b"POST /v1/top HTTP/1.1\r\n\r\n", 405, "takes GET"),
        (b"GET /v1/inspect HTTP/1.1\r\n\r\n", 400, "needs ?key=KEY"),
        (b"GET /v1/top?n=0 HTTP/1.1\r\n\r\n", 400, "n must be"),
        (
            b"POST /v1/reload HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n",
            413,
            "too large",
        ),
        (
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "Transfer-Encoding",
        ),
        (b"GET /x", 400, "ended early"),
    ];
    for (req, status, words) in cases {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        s.write_all(req).unwrap();
        if req.ends_with(b"/x") {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let text = String::from_utf8_lossy(&out).into_owned();
        assert_eq!(&text[9..12], status.to_string(), "{text}");
        assert!(text.contains(words), "{words}: {text}");
    }
    let (st, _) = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(st, 200);
    // The socket is private to floodgate's user.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn cli_without_a_running_floodgate() {
    let dir = tempfile::TempDir::new().unwrap();
    let sock = dir.path().join("none.sock");
    let out = admin_verb(&sock, &["inspect", "alice"]);
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr.contains(&format!(
            "cannot connect to admin socket {} (waited 5s): No such file or directory",
            sock.display()
        )),
        "{out}"
    );
    assert!(
        out.stderr
            .contains("is floodgate running with [admin] socket?"),
        "{out}"
    );
    // With --config, the socket comes from the config.
    let rec_addr = closed_port();
    let cfg = FloodgateConfig::new(rec_addr).extra("[admin]\nsocket = \"x/admin.sock\"\n");
    let path = dir.path().join("f.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["reload", "--config"])
            .arg(&path),
        Duration::from_secs(20),
    );
    assert!(!out.ok(), "{out}");
    let want = dir.path().join("x/admin.sock");
    assert!(out.stderr.contains(&want.display().to_string()), "{out}");
}

#[test]
fn socket_file_is_replaced_when_stale_and_removed_at_exit() {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().unwrap();
    let sock = dir.path().join("stale.sock");
    // A stale socket: bound, then its listener gone.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let mut fg = start(&rec, &format!("[admin]\nsocket = \"{}\"\n", sock.display()));
    let v = admin_json(&sock, &["top"]);
    assert_eq!(v["entries"].as_array().unwrap().len(), 0);
    assert!(fg.terminate().success());
    assert!(!sock.exists(), "socket left behind");
}

/// A socket that another local user put at the admin socket path (the temporary directory
/// is shared): the verbs send it nothing and say whose it is, and floodgate run by root
/// replaces it with its own. The squatter runs as uid 65534, which needs root here.
#[test]
fn another_users_socket_is_neither_trusted_nor_kept() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("another_users_socket_is_neither_trusted_nor_kept: needs root, not run");
        return;
    }
    // A sticky, world-writable directory, as the temporary directory is.
    let dir = tempfile::Builder::new()
        .prefix("floodgate-squat")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = dir.path().join("admin.sock");
    let squatter = r#"
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    data = c.recv(65536)
    print("received", len(data), flush=True)
    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"entries": []}')
    c.close()
"#;
    /// Killed however the test ends (a squatter left running would hold the test's pipes).
    struct Squatter(std::process::Child);
    impl Drop for Squatter {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut sq = Squatter(
        std::process::Command::new("python3")
            .args(["-c", squatter])
            .arg(&sock)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3"),
    );
    let mut out = std::io::BufReader::new(sq.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");

    let got = admin_verb(&sock, &["top"]);
    assert!(!got.ok(), "{got}");
    assert!(
        got.stderr.contains(&format!(
            "admin socket {} is served by uid 65534, neither this user (uid 0) nor root",
            sock.display()
        )),
        "{got}"
    );

    // floodgate (root) takes the path over; the verbs then reach floodgate itself.
    let rec = Recorder::plain();
    let mut fg = start(&rec, &format!("[admin]\nsocket = \"{}\"\n", sock.display()));
    let v = admin_json(&sock, &["top"]);
    assert!(v["entries"].as_array().is_some(), "{v}");
    assert!(
        fg.stderr()
            .contains("replacing another user's socket at the admin socket path"),
        "{}",
        fg.stderr()
    );
    assert!(fg.terminate().success());
    drop(sq);
    // The squatter was connected to once (by the refused verb) and sent nothing.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(
        rest.trim(),
        "received 0",
        "the verb sent the squatter: {rest}"
    );
}
