//! Alerts end to end: floodgate between raw SMTP clients and the recording upstream, a
//! webhook listener on 127.0.0.1 (a tiny HTTP server here) and a command (`tee`).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A webhook receiver: records each POST body (JSON) and answers `status`.
struct Hook {
    port: u16,
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Hook {
    fn start(status: &'static str) -> Hook {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { return };
                conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut request_line = String::new();
                if r.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                if r.read_exact(&mut body).is_err() {
                    continue;
                }
                let _ = write!(conn, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                if let Ok(v) = serde_json::from_slice(&body) {
                    g.lock().unwrap().push((request_line.trim().to_string(), v));
                }
            }
        });
        Hook { port, got }
    }

    fn bodies(&self) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn wait(&self, n: usize) -> Vec<Value> {
        wait_until(Duration::from_secs(20), "webhook deliveries", || {
            let b = self.bodies();
            (b.len() >= n).then_some(b)
        })
    }
}

fn alerts_config(hook: &Hook, out: &Path, period: &str, per_minute: u32) -> String {
    format!(
        r#"
[[limit]]
name = "per-sender"
ratelimit = "2 / 1h / per_mail / strict / ${{sender_address}}"
action = "warn"

[alerts]
period = "{period}"
max_per_minute = {per_minute}
webhook = "http://127.0.0.1:{}/alert"
webhook_timeout = "5s"
command = ["/usr/bin/tee", "-a", "{}"]
command_timeout = "5s"
"#,
        hook.port,
        out.display()
    )
}

fn send(fg: &Floodgate, sender: &str, n: usize) {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    for _ in 0..n {
        assert_eq!(c.cmd(&format!("MAIL FROM:<{sender}>")).code, 250);
        assert_eq!(c.cmd("RCPT TO:<r@example.com>").code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(b"Subject: t\r\n\r\nhi\r\n.\r\n");
        assert_eq!(c.reply().code, 250, "warn mode relays");
    }
    assert_eq!(c.cmd("QUIT").code, 221);
}

fn alerts_in_log(fg: &Floodgate) -> Vec<Value> {
    fg.stderr()
        .lines()
        .filter_map(|l| l.split_once("floodgate::alert: ").map(|(_, j)| j))
        .map(|j| serde_json::from_str(j).expect("alert log line is JSON"))
        .collect()
}

fn keys(v: &[Value]) -> Vec<String> {
    v.iter()
        .map(|a| a["key"].as_str().unwrap_or("-").to_string())
        .collect()
}

#[test]
fn one_alert_per_key_and_period() {
    let rec = Recorder::plain();
    let hook = Hook::start("200 OK");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("alerts.out");
    // A period long enough that the 22 messages below all fall in it; then it is waited out.
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&alerts_config(&hook, &out, "4s", 100)),
    );
    // a@ crosses at its second message and keeps sending: one alert.
    send(&fg, "a@example.org", 22);
    // b@: its own alert.
    send(&fg, "b@example.org", 3);
    let got = hook.wait(2);
    assert_eq!(keys(&got), ["a@example.org", "b@example.org"]);
    let a = &got[0];
    assert_eq!(a["event"], "floodgate.alert");
    assert_eq!(a["limit"], "per-sender");
    assert_eq!(a["limit_value"], "2");
    assert_eq!(a["period"], "1h");
    assert_eq!(a["action"], "warn");
    assert_eq!(a["stage"], "mail");
    assert_eq!(a["client_ip"], "127.0.0.1");
    assert_eq!(a["suppressed"], 0);
    assert!(a["rate"].as_f64().unwrap() >= 2.0, "{a}");
    assert!(a["first_at"].as_str().unwrap().ends_with('Z'), "{a}");
    assert_eq!(hook.got.lock().unwrap()[0].0, "POST /alert HTTP/1.1");
    // After the period: again.
    thread::sleep(Duration::from_millis(4500));
    send(&fg, "a@example.org", 2);
    let got = hook.wait(3);
    assert_eq!(
        keys(&got),
        ["a@example.org", "b@example.org", "a@example.org"]
    );
    // The command got the same JSON lines on stdin; the log has them too.
    let cmd: Vec<Value> = wait_until(Duration::from_secs(20), "command output", || {
        let t = std::fs::read_to_string(&out).ok()?;
        let v: Vec<Value> = t
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (v.len() >= 3).then_some(v)
    });
    assert_eq!(keys(&cmd), keys(&got));
    fg.wait_stderr_count("floodgate::alert", 3, Duration::from_secs(20));
    assert_eq!(keys(&alerts_in_log(&fg)), keys(&got));
    // Nothing more arrives late.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(hook.bodies().len(), 3);
    assert_eq!(rec.messages().len(), 27);
}

#[test]
fn max_per_minute_suppresses_and_reports() {
    let rec = Recorder::plain();
    let hook = Hook::start("200 OK");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("alerts.out");
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&alerts_config(&hook, &out, "1h", 2)),
    );
    for k in 0..5 {
        send(&fg, &format!("k{k}@example.org"), 3);
    }
    let got = hook.wait(2);
    assert_eq!(keys(&got), ["k0@example.org", "k1@example.org"]);
    fg.wait_stderr(
        "alerts suppressed: max_per_minute reached",
        Duration::from_secs(10),
    );
    // At the end of the minute: the summary of the three suppressed alerts.
    let got = wait_until(Duration::from_secs(90), "the suppression summary", || {
        let b = hook.bodies();
        (b.len() >= 3).then_some(b)
    });
    assert_eq!(got.len(), 3);
    assert_eq!(got[2]["event"], "floodgate.alert.suppressed");
    assert_eq!(got[2]["suppressed"], 3);
}

#[test]
fn webhook_refusal_is_logged_and_session_unaffected() {
    let rec = Recorder::plain();
    let hook = Hook::start("503 Service Unavailable");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("alerts.out");
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(&alerts_config(&hook, &out, "1h", 10)),
    );
    send(&fg, "a@example.org", 4);
    hook.wait(1);
    fg.wait_stderr(
        "webhook answered 503 Service Unavailable",
        Duration::from_secs(20),
    );
    assert_eq!(rec.messages().len(), 4);
}

fn check(dir: &Path, extra: &str) -> Output {
    let p = dir.join("c.toml");
    std::fs::write(
        &p,
        format!("[[listener]]\naddress = \"127.0.0.1:0\"\n\n[upstream]\naddress = \"127.0.0.1:25\"\n\n{extra}"),
    )
    .unwrap();
    run_with_timeout(
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&p),
        Duration::from_secs(30),
    )
}

#[test]
fn alerts_config_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    for (extra, line, col, word) in [
        ("[alerts]\nperiod = \"soon\"\n", 8, 10, "period"),
        ("[alerts]\nmax_per_minute = 0\n", 8, 18, "max_per_minute"),
        ("[alerts]\nwebhook = \"ftp://x/\"\n", 8, 11, "webhook"),
        (
            "[alerts]\ncommand = [\"sh\", \"-c\", \"x\"]\n",
            8,
            11,
            "absolute path",
        ),
        ("[alerts]\ncommand = []\n", 8, 11, "command"),
        ("[alerts]\nwebhok = \"http://x/\"\n", 8, 1, "webhok"),
    ] {
        let out = check(dir.path(), extra);
        assert!(!out.ok(), "{extra}: {out}");
        let want = format!("{}:{line}:{col}: ", cfg.display());
        assert!(out.stderr.contains(&want), "{extra}: want {want}\n{out}");
        assert!(out.stderr.contains(word), "{extra}: {out}");
    }
    let out = check(
        dir.path(),
        "[alerts]\nwebhook = \"https://127.0.0.1:9/x\"\nmax_per_minute = 5\n",
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("alerts: period=(each limit's) max_per_minute=5"),
        "{out}"
    );
}
