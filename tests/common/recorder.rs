//! The recording upstream: `tests/upstream/recorder.py` as a child process, and its
//! JSON-lines record parsed into [`Message`]s.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use super::*;

/// Options for [`Recorder::start`]; `Default` is a plain server with user alice:s3cret.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    /// Load `certs/dev/upstream.{crt,key}` and offer STARTTLS.
    pub tls: bool,
    /// TLS from the first byte (implies `tls`).
    pub implicit_tls: bool,
    /// `NAME:PASSWORD` pairs; defaults to alice:s3cret.
    pub users: Vec<(String, String)>,
    /// `--reject-rcpt` substrings (550 5.1.1).
    pub reject_rcpt: Vec<String>,
    /// `--defer-rcpt` substrings (450 4.2.1).
    pub defer_rcpt: Vec<String>,
    /// `--fault` (none, refuse, die-mid-data, garbage, slow, reset-after-data-cmd).
    pub fault: String,
    /// `--fault-after N` bytes of DATA (or BDAT chunks) for die-mid-data.
    pub fault_after: u64,
    /// `--delay S` for the slow fault.
    pub delay: f64,
    /// `--idle-timeout S`.
    pub idle_timeout: f64,
    /// Address to bind (a loopback address).
    pub host: String,
    /// `--proxy-protocol`: expect a PROXY v2 header before the greeting.
    pub proxy_protocol: bool,
    /// `--no-chunking`: no CHUNKING in EHLO, BDAT refused.
    pub no_chunking: bool,
    /// `--no-ehlo`: EHLO answered 502, as by a server that knows only HELO.
    pub no_ehlo: bool,
    /// `--proxy-missing-reply`: with `proxy_protocol`, the reply when no header came within
    /// `--proxy-timeout` (0.5 s here).
    pub proxy_missing_reply: Option<String>,
    /// `--proxy-missing-503`: with `proxy_protocol`, no header within 0.5 s: greet, then 503
    /// to every command but QUIT (as Exim for a host in `hosts_proxy`).
    pub proxy_missing_503: bool,
    /// `--xclient-attrs`: what EHLO lists after XCLIENT (`Some("")`: no XCLIENT); the
    /// recorder's default is Postfix 3.7's list.
    pub xclient_attrs: Option<String>,
    /// `--xclient-reply`: answer every XCLIENT with this reply.
    pub xclient_reply: Option<String>,
    /// `--xclient-ipv4-only`: 501 to an IPv6 ADDR, as an IPv4-only Postfix.
    pub xclient_ipv4_only: bool,
    /// `--xclient-after-ehlo`: 550 to an XCLIENT that does not follow an EHLO, as Exim.
    pub xclient_after_ehlo: bool,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        Self {
            tls: false,
            implicit_tls: false,
            users: vec![(USER.into(), PASSWORD.into())],
            reject_rcpt: vec![],
            defer_rcpt: vec![],
            fault: "none".into(),
            fault_after: 1024,
            delay: 1.0,
            idle_timeout: 30.0,
            host: "127.0.0.1".into(),
            proxy_protocol: false,
            no_chunking: false,
            no_ehlo: false,
            proxy_missing_reply: None,
            proxy_missing_503: false,
            xclient_attrs: None,
            xclient_reply: None,
            xclient_ipv4_only: false,
            xclient_after_ehlo: false,
        }
    }
}

/// A running `tests/upstream/recorder.py`.
pub struct Recorder {
    child: Child,
    addr: SocketAddr,
    record: PathBuf,
    stderr: PathBuf,
    _dir: TempDir,
}

/// One message as the recorder accepted it.
#[derive(Debug, Clone)]
pub struct Message {
    /// Recorder session number.
    pub session: u64,
    /// The reverse path (without angle brackets).
    pub mail_from: String,
    /// MAIL parameters as sent.
    pub mail_params: Vec<String>,
    /// Accepted recipients, in order.
    pub rcpts: Vec<String>,
    /// The wire bytes between 354 and the final `.CRLF` (dot-stuffed).
    pub data: Vec<u8>,
    /// sha256 (hex) of the content after dot-unstuffing.
    pub content_sha256: String,
    /// A bare LF occurred in the data.
    pub bare_lf: bool,
    /// A bare CR occurred in the data.
    pub bare_cr: bool,
    /// The EHLO/HELO name upstream saw.
    pub helo: Option<String>,
    /// The session upstream began with EHLO (not HELO).
    pub esmtp: bool,
    /// The AUTH identity upstream validated (or XCLIENT LOGIN).
    pub auth_user: Option<String>,
    /// XCLIENT attributes in force.
    pub xclient: BTreeMap<String, String>,
    /// Whether the upstream session was under TLS.
    pub tls: bool,
    /// Sent with BDAT rather than DATA.
    pub bdat: bool,
}

fn s(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Standard base64 decoding (the recorder's `data_b64`); characters outside the
/// alphabet (padding, whitespace) are skipped.
pub fn b64_decode(text: &str) -> Vec<u8> {
    fn val(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for v in text.bytes().filter_map(val) {
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Standard base64 with padding (for building SASL test payloads).
pub fn b64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk.len();
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= n {
                out.push(char::from(T[((v >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl Message {
    fn from_json(v: &Value) -> Message {
        Message {
            session: v["session"].as_u64().unwrap_or_default(),
            mail_from: s(v, "mail_from"),
            mail_params: strings(v, "mail_params"),
            rcpts: strings(v, "rcpts"),
            data: b64_decode(&s(v, "data_b64")),
            content_sha256: s(v, "content_sha256"),
            bare_lf: v["bare_lf"].as_bool().unwrap_or(true),
            bare_cr: v["bare_cr"].as_bool().unwrap_or(true),
            helo: v["helo"].as_str().map(str::to_string),
            esmtp: v["esmtp"].as_bool().unwrap_or(false),
            auth_user: v["auth_user"].as_str().map(str::to_string),
            xclient: v["xclient"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, x)| (k.clone(), x.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            tls: v["tls"].as_bool().unwrap_or(false),
            bdat: v["bdat"].as_bool().unwrap_or(false),
        }
    }
}

impl Recorder {
    /// A plain recorder (no TLS) with the default user.
    pub fn plain() -> Recorder {
        Recorder::start(RecorderOptions::default())
    }

    /// A recorder that offers STARTTLS with `certs/dev/upstream.crt`.
    pub fn with_starttls() -> Recorder {
        Recorder::start(RecorderOptions {
            tls: true,
            ..RecorderOptions::default()
        })
    }

    /// Starts `python3 tests/upstream/recorder.py` and waits (bounded) for `READY <port>`.
    pub fn start(opts: RecorderOptions) -> Recorder {
        let dir = TempDir::new().expect("tempdir");
        let record = dir.path().join("record.jsonl");
        let stderr = dir.path().join("recorder.stderr");
        let script = repo_root().join("tests/upstream/recorder.py");
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .args(["--host", &opts.host, "--port", "0", "--record"])
            .arg(&record)
            .args(["--fault", &opts.fault])
            .args(["--fault-after", &opts.fault_after.to_string()])
            .args(["--delay", &opts.delay.to_string()])
            .args(["--idle-timeout", &opts.idle_timeout.to_string()]);
        if opts.tls || opts.implicit_tls {
            cmd.arg("--cert")
                .arg(dev_cert("upstream.crt"))
                .arg("--key")
                .arg(dev_cert("upstream.key"));
        }
        if opts.implicit_tls {
            cmd.arg("--implicit-tls");
        }
        if opts.proxy_protocol {
            cmd.arg("--proxy-protocol");
        }
        if opts.no_chunking {
            cmd.arg("--no-chunking");
        }
        if opts.no_ehlo {
            cmd.arg("--no-ehlo");
        }
        if let Some(r) = &opts.proxy_missing_reply {
            cmd.args(["--proxy-timeout", "0.5", "--proxy-missing-reply", r]);
        }
        if opts.proxy_missing_503 {
            cmd.args(["--proxy-timeout", "0.5", "--proxy-missing-503"]);
        }
        if let Some(a) = &opts.xclient_attrs {
            cmd.args(["--xclient-attrs", a]);
        }
        if let Some(r) = &opts.xclient_reply {
            cmd.args(["--xclient-reply", r]);
        }
        if opts.xclient_ipv4_only {
            cmd.arg("--xclient-ipv4-only");
        }
        if opts.xclient_after_ehlo {
            cmd.arg("--xclient-after-ehlo");
        }
        for (u, p) in &opts.users {
            cmd.arg("--user").arg(format!("{u}:{p}"));
        }
        for r in &opts.reject_rcpt {
            cmd.args(["--reject-rcpt", r]);
        }
        for r in &opts.defer_rcpt {
            cmd.args(["--defer-rcpt", r]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3 {}: {e}", script.display()));
        let lines = stdout_lines(&mut child);
        let port = match lines.recv_timeout(START_TIMEOUT) {
            Ok(line) => line
                .strip_prefix("READY ")
                .and_then(|p| p.trim().parse::<u16>().ok())
                .unwrap_or_else(|| panic!("recorder printed {line:?} instead of READY <port>")),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "recorder did not print READY within {START_TIMEOUT:?}; stderr:\n{}",
                    fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
        };
        let ip = opts.host.parse().expect("recorder host is an IP address");
        Recorder {
            child,
            addr: SocketAddr::new(ip, port),
            record,
            stderr,
            _dir: dir,
        }
    }

    /// Where the recorder listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every event recorded so far, in order.
    pub fn events(&self) -> Vec<Value> {
        let text = fs::read_to_string(&self.record).unwrap_or_default();
        // The last line may be half-written while the recorder is busy: skip it if so.
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The recorded events of one kind (`session_start`, `proxy`, `command`, `tls`,
    /// `xclient`, `auth`, `message`, `session_end`).
    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == kind)
            .collect()
    }

    /// Every accepted message so far.
    pub fn messages(&self) -> Vec<Message> {
        self.events_of("message")
            .iter()
            .map(Message::from_json)
            .collect()
    }

    /// Every command line upstream received (AUTH lines cut after the mechanism).
    pub fn commands(&self) -> Vec<String> {
        self.events_of("command")
            .iter()
            .map(|e| s(e, "line"))
            .collect()
    }

    /// Waits (bounded) until at least `n` events of `kind` are recorded; returns them.
    pub fn wait_events(&self, kind: &str, n: usize) -> Vec<Value> {
        wait_until(
            Duration::from_secs(20),
            &format!("{n} recorder event(s) {kind:?}"),
            || {
                let evs = self.events_of(kind);
                (evs.len() >= n).then_some(evs)
            },
        )
    }

    /// Waits (bounded) until every upstream session that started has ended.
    pub fn wait_idle(&self) {
        wait_until(
            Duration::from_secs(20),
            "all recorder sessions to end",
            || {
                let evs = self.events();
                let started = evs.iter().filter(|e| e["event"] == "session_start").count();
                let ended = evs.iter().filter(|e| e["event"] == "session_end").count();
                (started == ended).then_some(())
            },
        )
    }

    /// The recorder's stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        sigterm(&self.child);
        if wait_exit(&mut self.child, Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "--- recorder record ({}) ---\n{}\n--- recorder stderr ---\n{}",
                self.record.display(),
                self.events()
                    .iter()
                    .map(|e| {
                        let mut e = e.clone();
                        if let Some(d) = e.get_mut("data_b64") {
                            *d = Value::String("<omitted>".into());
                        }
                        e.to_string()
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                self.stderr()
            );
        }
    }
}
