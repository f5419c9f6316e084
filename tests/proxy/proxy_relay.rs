//! floodgate relays real clients' mail to the recording upstream: plain, STARTTLS + AUTH,
//! implicit TLS, pipelining, many recipients, a 20 MB message, RSET/QUIT mid-transaction,
//! XCLIENT, TLS towards upstream, upstream rejections passed through.
//!
//! Each test starts its own recorder and floodgate (config contract in
//! tests/common/mod.rs) on 127.0.0.1 port 0.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn start(rec: &Recorder) -> Floodgate {
    Floodgate::start(&FloodgateConfig::new(rec.addr()))
}

/// swaks arguments common to every run: server, envelope, HELO name.
fn swaks_base(addr: std::net::SocketAddr, to: &str) -> Vec<String> {
    [
        "--server",
        &addr.to_string(),
        "--from",
        "sender@client.test",
        "--to",
        to,
        "--helo",
        "swaks.client.test",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_swaks(args: Vec<String>, extra: &[&str]) -> Output {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(extra);
    swaks(&all)
}

fn tls_args() -> Vec<String> {
    vec![
        "--tls".into(),
        "--tls-verify".into(),
        "--tls-ca-path".into(),
        ca_file().to_string_lossy().into_owned(),
    ]
}

#[test]
fn check_accepts_the_test_config() {
    let cfg = FloodgateConfig::new("127.0.0.1:2525".parse().unwrap());
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("floodgate.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check")
            .arg("--config")
            .arg(&path),
        Duration::from_secs(30),
    );
    assert!(
        out.ok(),
        "floodgate check refused the harness config:\n{out}"
    );
}

#[test]
fn plain_swaks_message_reaches_upstream_unchanged() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    let out = run_swaks(
        swaks_base(fg.addr("plain"), "rcpt@dest.test"),
        &[
            "--header",
            "Subject: plain",
            "--body",
            "hello\n.dot line\nbye",
        ],
    );
    assert!(out.ok(), "{out}");
    let m = rec.messages();
    assert_eq!(m.len(), 1, "{out}");
    assert_eq!(m[0].mail_from, "sender@client.test");
    assert_eq!(m[0].rcpts, ["rcpt@dest.test"]);
    assert!(!m[0].bare_lf && !m[0].bare_cr);
    let data = String::from_utf8_lossy(&m[0].data);
    assert!(data.contains("Subject: plain\r\n"), "{data}");
    // Relayed as one BDAT chunk (the recorder offers CHUNKING): the line as the message has
    // it, its stuffing dot taken off.
    assert!(m[0].bdat);
    assert!(data.contains("\r\n.dot line\r\n"), "{data}");
}

#[test]
fn starttls_then_auth_plain_and_login_with_swaks() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    for mech in ["PLAIN", "LOGIN"] {
        let mut args = swaks_base(fg.addr("submission"), "r@dest.test");
        args.extend(tls_args());
        let out = run_swaks(args, &["-a", mech, "-au", USER, "-ap", PASSWORD]);
        assert!(out.ok(), "AUTH {mech}: {out}");
        assert!(out.text().contains("<~  235 "), "{out}");
    }
    let m = rec.messages();
    assert_eq!(m.len(), 2);
    for msg in &m {
        assert_eq!(
            msg.auth_user.as_deref(),
            Some(USER),
            "upstream validated AUTH"
        );
    }
    let auths = rec.events_of("auth");
    let mechs: Vec<_> = auths
        .iter()
        .map(|a| a["mechanism"].as_str().unwrap())
        .collect();
    assert_eq!(mechs, ["PLAIN", "LOGIN"]);
}

#[test]
fn starttls_auth_with_smtplib_and_a_refused_password() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    let out = smtplib(
        fg.addr("submission"),
        r#"
with smtplib.SMTP(HOST, PORT, local_hostname="py.client.test", timeout=20) as s:
    s.ehlo()
    out("starttls_offered", s.has_extn("starttls"))
    s.starttls(context=ctx())
    s.ehlo()
    out("auth_after_tls", s.esmtp_features.get("auth", ""))
    s.user, s.password = USER, "wrong"
    try:
        s.auth("PLAIN", s.auth_plain)
        out("bad", "accepted")
    except smtplib.SMTPAuthenticationError as e:
        out("bad", "%d %s" % (e.smtp_code, e.smtp_error.decode()))
    s.user, s.password = USER, PASSWORD
    code, _ = s.auth("LOGIN", s.auth_login, initial_response_ok=False)
    out("login", code)
    s.sendmail("py@client.test", ["a@dest.test", "b@dest.test"], "Subject: py\r\n\r\nbody\r\n")
    out("sent", "ok")
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("starttls_offered").as_deref(), Some("True"));
    assert!(
        out.field("auth_after_tls").unwrap().contains("PLAIN"),
        "{out}"
    );
    assert!(out.field("bad").unwrap().starts_with("535 5.7.8"), "{out}");
    assert_eq!(out.field("login").as_deref(), Some("235"));
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].rcpts, ["a@dest.test", "b@dest.test"]);
    assert_eq!(m[0].auth_user.as_deref(), Some(USER));
}

#[test]
fn implicit_tls_with_swaks_and_smtplib() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    let out = run_swaks(
        swaks_base(fg.addr("submissions"), "r@dest.test"),
        &[
            "--tls-on-connect",
            "--tls-verify",
            "--tls-ca-path",
            ca_file().to_str().unwrap(),
            "-a",
            "PLAIN",
            "-au",
            USER,
            "-ap",
            PASSWORD,
        ],
    );
    assert!(out.ok(), "{out}");
    let out = smtplib(
        fg.addr("submissions"),
        r#"
with smtplib.SMTP_SSL(HOST, PORT, timeout=20, context=ctx()) as s:
    s.ehlo()
    out("starttls_offered", s.has_extn("starttls"))
    s.login(USER, PASSWORD)
    s.sendmail("py@client.test", ["c@dest.test"], "Subject: implicit\r\n\r\nx\r\n")
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("starttls_offered").as_deref(), Some("False"));
    let m = rec.messages();
    assert_eq!(m.len(), 2);
    assert!(m.iter().all(|m| m.auth_user.as_deref() == Some(USER)));
}

#[test]
fn pipelining_with_swaks_and_in_one_raw_write() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    let out = run_swaks(
        swaks_base(fg.addr("plain"), "a@dest.test,b@dest.test,c@dest.test"),
        &["--pipeline"],
    );
    assert!(out.ok(), "{out}");

    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("raw.client.test");
    assert!(ehlo.keywords().contains(&"PIPELINING".to_string()));
    // MAIL, RCPT x2, DATA in one write; then the message, a second transaction and QUIT
    // in one write.
    c.send(b"MAIL FROM:<raw@client.test>\r\nRCPT TO:<x@dest.test>\r\nRCPT TO:<y@dest.test>\r\nDATA\r\n");
    let codes: Vec<u16> = c.replies(4).iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 250, 354]);
    c.send(
        b"Subject: one\r\n\r\nfirst\r\n.\r\nMAIL FROM:<raw@client.test>\r\nRCPT TO:<z@dest.test>\r\nDATA\r\n",
    );
    let codes: Vec<u16> = c.replies(4).iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 250, 354]);
    c.send(b"Subject: two\r\n\r\nsecond\r\n.\r\nQUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221]);

    let m = rec.messages();
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].rcpts, ["a@dest.test", "b@dest.test", "c@dest.test"]);
    assert_eq!(m[1].rcpts, ["x@dest.test", "y@dest.test"]);
    assert_eq!(m[1].data, b"Subject: one\r\n\r\nfirst\r\n");
    assert_eq!(m[2].rcpts, ["z@dest.test"]);
    assert_eq!(m[2].data, b"Subject: two\r\n\r\nsecond\r\n");
}

#[test]
fn hundred_recipients_in_one_message() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    let out = smtplib(
        fg.addr("plain"),
        r#"
rcpts = ["r%03d@dest.test" % i for i in range(100)]
with smtplib.SMTP(HOST, PORT, timeout=30) as s:
    refused = s.sendmail("many@client.test", rcpts, "Subject: 100\r\n\r\nhundred\r\n")
    out("refused", len(refused))
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("refused").as_deref(), Some("0"));
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    let want: Vec<String> = (0..100).map(|i| format!("r{i:03}@dest.test")).collect();
    assert_eq!(m[0].rcpts, want);
}

#[test]
fn twenty_megabyte_message_arrives_byte_exact() {
    let rec = Recorder::plain();
    let fg = start(&rec);
    let out = smtplib(
        fg.addr("plain"),
        r#"
parts, total, i = [], 0, 0
base = "".join(chr(33 + (k % 94)) for k in range(990))
while total < 20 * 1024 * 1024:
    # lines of 990..998 octets, every 97th starting with a dot (stuffed on the wire)
    line = ("." if i % 97 == 0 else "") + ("%07d " % i) + base[: 982 + (i % 8)]
    parts.append(line)
    total += len(line) + 2
    i += 1
msg = ("Subject: big\r\n\r\n" + "\r\n".join(parts) + "\r\n").encode()
assert max(len(p) for p in parts) <= 998
with smtplib.SMTP(HOST, PORT, timeout=120) as s:
    s.sendmail("big@client.test", ["big@dest.test"], msg)
out("sha256", hashlib.sha256(msg).hexdigest())
out("size", len(msg))
"#,
        Duration::from_secs(240),
    );
    assert!(out.ok(), "{out}");
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(
        Some(m[0].content_sha256.clone()),
        out.field("sha256"),
        "content differs"
    );
    let size: usize = out.field("size").unwrap().parse().unwrap();
    assert!(size >= 20 * 1024 * 1024);
    // One BDAT chunk (the recorder offers CHUNKING): the message itself, its dot lines
    // unstuffed from the client's DATA.
    assert!(m[0].bdat);
    assert_eq!(m[0].data.len(), size);
    assert!(!m[0].bare_lf && !m[0].bare_cr);
}

#[test]
fn rset_and_quit_mid_transaction_leave_no_message() {
    let rec = Recorder::plain();
    let fg = start(&rec);

    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    assert_eq!(c.cmd("RSET").code, 250);
    // After RSET a RCPT without MAIL is out of sequence, wherever it is answered.
    let r = c.cmd("RCPT TO:<b@dest.test>");
    assert_eq!(r.code, 503, "{}", r.text());
    assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    c.send(b"QUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [221]);

    // The client vanishes in the middle of DATA: nothing may be delivered.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    c.send(b"MAIL FROM:<a@client.test>\r\nRCPT TO:<b@dest.test>\r\nDATA\r\n");
    assert_eq!(c.replies(3)[2].code, 354);
    c.send(b"Subject: cut\r\n\r\nhalf a message\r\n");
    drop(c);

    rec.wait_idle();
    assert!(rec.messages().is_empty(), "{:?}", rec.messages());
}

#[test]
fn xclient_tells_upstream_the_client_address_and_helo() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity("xclient"));
    let out = run_swaks(swaks_base(fg.addr("plain"), "r@dest.test"), &[]);
    assert!(out.ok(), "{out}");
    let x = rec.events_of("xclient");
    assert!(!x.is_empty(), "upstream saw no XCLIENT");
    assert_eq!(x[0]["attrs"]["ADDR"].as_str(), Some("127.0.0.1"));
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(
        m[0].xclient.get("ADDR").map(String::as_str),
        Some("127.0.0.1")
    );
    let helo_seen = m[0].xclient.get("HELO").map(String::as_str) == Some("swaks.client.test")
        || m[0].helo.as_deref() == Some("swaks.client.test");
    assert!(helo_seen, "client HELO not passed on: {m:?}");
}

#[test]
fn tls_towards_upstream_starttls_and_implicit() {
    for (opts, mode) in [
        (
            RecorderOptions {
                tls: true,
                ..RecorderOptions::default()
            },
            "starttls",
        ),
        (
            RecorderOptions {
                implicit_tls: true,
                ..RecorderOptions::default()
            },
            "implicit",
        ),
    ] {
        let rec = Recorder::start(opts);
        let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).upstream_tls(mode));
        let out = run_swaks(swaks_base(fg.addr("plain"), "r@dest.test"), &[]);
        assert!(out.ok(), "upstream tls={mode}: {out}");
        let m = rec.messages();
        assert_eq!(m.len(), 1, "upstream tls={mode}");
        assert!(
            m[0].tls,
            "upstream tls={mode}: message went upstream without TLS"
        );
    }
}

#[test]
fn upstream_recipient_rejections_reach_the_client() {
    let rec = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["unknown".into()],
        defer_rcpt: vec!["later".into()],
        ..RecorderOptions::default()
    });
    let fg = start(&rec);
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
    let r = c.cmd("RCPT TO:<unknown@dest.test>");
    assert_eq!((r.code, r.enhanced().as_deref()), (550, Some("5.1.1")));
    let r = c.cmd("RCPT TO:<later@dest.test>");
    assert_eq!((r.code, r.enhanced().as_deref()), (450, Some("4.2.1")));
    assert_eq!(c.cmd("RCPT TO:<fine@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: r\r\n\r\nx\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].rcpts, ["fine@dest.test"]);
}

#[test]
fn sigterm_stops_an_idle_floodgate_cleanly() {
    let rec = Recorder::plain();
    let mut fg = start(&rec);
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.cmd("QUIT").code, 221);
    let status = fg.terminate();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}
