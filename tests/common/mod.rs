//! Support for floodgate's integration tests (std + tempfile + serde_json only).
//!
//! * [`Recorder`]: the recording SMTP upstream (`tests/upstream/recorder.py`), started on
//!   127.0.0.1 port 0, killed on drop; its JSON-lines record parsed into [`Message`]s.
//! * [`FloodgateConfig`] / [`Floodgate`]: a config file written into a temp dir and the
//!   real binary (`CARGO_BIN_EXE_floodgate run --config ...`), its `listening` lines
//!   parsed, stderr kept in a file and printed when a test fails, killed on drop.
//! * [`swaks`], [`python`], [`smtplib`]: real clients run with a time limit.
//! * [`RawClient`]: byte-exact SMTP over plain TCP with bounded reads.
//!
//! Every wait is bounded; running out of time fails the test with a message saying what
//! was awaited. Nothing here binds or connects beyond 127.0.0.1 / ::1.
#![allow(dead_code)] // each test crate uses a different subset of these helpers

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// How long a process may take to announce itself (READY / listening lines).
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a raw client waits for one reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(15);
/// Default time limit for one swaks or Python client run.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The user every recorder accepts unless a test says otherwise.
pub const USER: &str = "alice";
/// `USER`'s password.
pub const PASSWORD: &str = "s3cret";

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file in `certs/dev/` (development certificates, NOT FOR PRODUCTION).
pub fn dev_cert(name: &str) -> PathBuf {
    repo_root().join("certs").join("dev").join(name)
}

/// `certs/dev/ca.crt`, the CA that signed floodgate's and the recorder's certificates.
pub fn ca_file() -> PathBuf {
    dev_cert("ca.crt")
}

/// A loopback address where nothing listens (bound once, then released).
pub fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr")
}

/// Polls `check` every 25 ms until it returns `Some`, for at most `limit`; panics with
/// `what` when time runs out.
pub fn wait_until<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(25));
    }
}

// ---------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------

/// Reads `child`'s stdout line by line on a thread; lines arrive on the returned channel.
/// The thread keeps draining after the caller stops listening, so the pipe never fills.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // The receiver may be gone; keep reading anyway.
            let _ = tx.send(line);
        }
    });
    rx
}

/// Sends SIGTERM to `child` (via kill(1): the tests use std only).
fn sigterm(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Waits for `child` to exit for at most `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The result of running a client program.
#[derive(Debug)]
pub struct Output {
    /// Exit code (`None` when killed by a signal or by the time limit).
    pub code: Option<i32>,
    /// Everything written on stdout.
    pub stdout: String,
    /// Everything written on stderr.
    pub stderr: String,
    /// True when the time limit ran out and the process was killed.
    pub timed_out: bool,
}

impl Output {
    /// stdout followed by stderr.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// True when the program exited with status 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The value of the first stdout line `KEY=value`, if any.
    pub fn field(&self, key: &str) -> Option<String> {
        let prefix = format!("{key}=");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit={:?} timed_out={}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.timed_out, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with stdin closed and output captured in files, killing it after `limit`.
pub fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Output {
    let dir = TempDir::new().expect("tempdir");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let status = wait_exit(&mut child, limit);
    let timed_out = status.is_none();
    if timed_out {
        let _ = child.kill();
        let _ = child.wait();
    }
    let read = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
    Output {
        code: status.and_then(|s| s.code()),
        stdout: read(&out_path),
        stderr: read(&err_path),
        timed_out,
    }
}

/// Runs swaks with `args` (plus `--timeout 20`), for at most [`CLIENT_TIMEOUT`].
pub fn swaks(args: &[&str]) -> Output {
    run_with_timeout(
        Command::new("swaks").args(["--timeout", "20"]).args(args),
        CLIENT_TIMEOUT,
    )
}

/// Runs `python3 -c script args...` for at most `limit`.
pub fn python(script: &str, args: &[&str], limit: Duration) -> Output {
    run_with_timeout(
        Command::new("python3").arg("-c").arg(script).args(args),
        limit,
    )
}

/// Lines put before every [`smtplib`] snippet: imports, `HOST`, `PORT`, `CA` (the dev CA
/// path), `USER`, `PASSWORD`, `ctx()` (a verifying TLS context) and `out(key, value)`
/// which prints `key=value` for [`Output::field`].
pub const SMTPLIB_PRELUDE: &str = r#"
import base64, hashlib, json, smtplib, socket, ssl, sys, time
HOST, PORT, CA, USER, PASSWORD = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def ctx():
    return ssl.create_default_context(cafile=CA)
def out(key, value):
    print("%s=%s" % (key, value), flush=True)
"#;

/// Runs a Python snippet after [`SMTPLIB_PRELUDE`] against `addr`, for at most `limit`.
pub fn smtplib(addr: SocketAddr, body: &str, limit: Duration) -> Output {
    let script = format!("{SMTPLIB_PRELUDE}\n{body}");
    let ca = ca_file();
    python(
        &script,
        &[
            &addr.ip().to_string(),
            &addr.port().to_string(),
            ca.to_str().expect("utf-8 path"),
            USER,
            PASSWORD,
        ],
        limit,
    )
}

// ---------------------------------------------------------------------------------------
// The recording upstream
// ---------------------------------------------------------------------------------------

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
    /// `--fault-after N` bytes of DATA for die-mid-data.
    pub fault_after: u64,
    /// `--delay S` for the slow fault.
    pub delay: f64,
    /// `--idle-timeout S`.
    pub idle_timeout: f64,
    /// Address to bind (a loopback address).
    pub host: String,
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

    /// The recorded events of one kind (`session_start`, `command`, `tls`, `xclient`,
    /// `auth`, `message`, `session_end`).
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

// ---------------------------------------------------------------------------------------
// floodgate
// ---------------------------------------------------------------------------------------

/// One `[[listener]]` of a test config.
#[derive(Debug, Clone)]
pub struct ListenerSpec {
    /// Listener name (printed on its `listening` line).
    pub name: String,
    /// `none`, `starttls` or `implicit`.
    pub tls: String,
    /// Bind address; `127.0.0.1:0` picks a free port.
    pub address: String,
}

impl ListenerSpec {
    /// A listener on 127.0.0.1, free port.
    pub fn new(name: &str, tls: &str) -> ListenerSpec {
        ListenerSpec {
            name: name.into(),
            tls: tls.into(),
            address: "127.0.0.1:0".into(),
        }
    }
}

/// The parameters of a test config; [`FloodgateConfig::toml`] renders the contract format.
#[derive(Debug, Clone)]
pub struct FloodgateConfig {
    /// The upstream (usually a [`Recorder`]).
    pub upstream: SocketAddr,
    /// `[upstream] tls`.
    pub upstream_tls: String,
    /// `[upstream] client_identity`: none, xclient or proxy-v2.
    pub client_identity: String,
    /// Listeners, in order.
    pub listeners: Vec<ListenerSpec>,
    /// `[log] level`.
    pub log_level: String,
    /// TOML appended verbatim (e.g. an `[smtp]` section). Must not repeat the sections
    /// written here: server, timeouts, tls, upstream, log.
    pub extra: String,
}

impl FloodgateConfig {
    /// Three listeners (`plain` none, `submission` starttls, `submissions` implicit) in
    /// front of `upstream`, plain upstream, no client identity, debug logs.
    pub fn new(upstream: SocketAddr) -> FloodgateConfig {
        FloodgateConfig {
            upstream,
            upstream_tls: "none".into(),
            client_identity: "none".into(),
            listeners: vec![
                ListenerSpec::new("plain", "none"),
                ListenerSpec::new("submission", "starttls"),
                ListenerSpec::new("submissions", "implicit"),
            ],
            log_level: "debug".into(),
            extra: String::new(),
        }
    }

    /// Sets `client_identity`.
    pub fn identity(mut self, identity: &str) -> Self {
        self.client_identity = identity.into();
        self
    }

    /// Sets the upstream TLS mode.
    pub fn upstream_tls(mut self, mode: &str) -> Self {
        self.upstream_tls = mode.into();
        self
    }

    /// Appends TOML.
    pub fn extra(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }

    /// Sets the log level.
    pub fn log_level(mut self, level: &str) -> Self {
        self.log_level = level.into();
        self
    }

    /// The config file text.
    pub fn toml(&self) -> String {
        let path = |p: PathBuf| p.to_str().expect("utf-8 path").replace('\\', "\\\\");
        let mut t = String::new();
        t.push_str("# written by tests/common/mod.rs\n");
        t.push_str("[server]\nhostname = \"floodgate.test\"\nshutdown_grace = \"2s\"\n\n");
        t.push_str(
            "[timeouts]\ncommand = \"60s\"\ndata = \"120s\"\nsession = \"10m\"\n\
             tls_handshake = \"10s\"\nupstream_connect = \"5s\"\nupstream_reply = \"30s\"\n\n",
        );
        for l in &self.listeners {
            t.push_str(&format!(
                "[[listener]]\nname = \"{}\"\naddress = \"{}\"\ntls = \"{}\"\nproxy_protocol = false\n\n",
                l.name, l.address, l.tls
            ));
        }
        t.push_str(&format!(
            "[tls]\ncertificate = \"{}\"\nprivate_key = \"{}\"\n\n",
            path(dev_cert("server.crt")),
            path(dev_cert("server.key"))
        ));
        t.push_str(&format!(
            "[upstream]\naddress = \"{}\"\ntls = \"{}\"\nclient_identity = \"{}\"\n\
             server_name = \"localhost\"\nca_file = \"{}\"\nhelo_name = \"floodgate.test\"\n\n",
            self.upstream,
            self.upstream_tls,
            self.client_identity,
            path(ca_file())
        ));
        t.push_str(&format!(
            "[log]\nlevel = \"{}\"\nformat = \"text\"\n\n",
            self.log_level
        ));
        t.push_str(&self.extra);
        t
    }
}

/// A bound listener as floodgate reported it.
#[derive(Debug, Clone)]
pub struct Listening {
    /// Listener name.
    pub name: String,
    /// The real bound address.
    pub addr: SocketAddr,
    /// TLS mode.
    pub tls: String,
}

/// Parses `listening <name> <bound-address> <tls-mode>`.
pub fn parse_listening(line: &str) -> Option<Listening> {
    let rest = line.trim_end().strip_prefix("listening ")?;
    let mut parts = rest.rsplitn(3, ' ');
    let tls = parts.next()?.to_string();
    let addr = parts.next()?.parse().ok()?;
    let name = parts.next()?.to_string();
    Some(Listening { name, addr, tls })
}

/// A running floodgate (`floodgate run --config FILE`), killed on drop.
pub struct Floodgate {
    child: Child,
    listeners: Vec<Listening>,
    stderr: PathBuf,
    config: PathBuf,
    dir: TempDir,
}

impl Floodgate {
    /// Writes `cfg` to a temp dir, starts floodgate and waits (bounded) for one
    /// `listening` line per listener.
    pub fn start(cfg: &FloodgateConfig) -> Floodgate {
        let dir = TempDir::new().expect("tempdir");
        let config = dir.path().join("floodgate.toml");
        fs::write(&config, cfg.toml()).expect("write config");
        let stderr = dir.path().join("floodgate.stderr");
        let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start floodgate");
        let lines = stdout_lines(&mut child);
        let deadline = Instant::now() + START_TIMEOUT;
        let mut listeners = Vec::new();
        let mut seen = Vec::new();
        while listeners.len() < cfg.listeners.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(l) = parse_listening(&line) {
                        listeners.push(l);
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let status = wait_exit(&mut child, Duration::from_millis(200));
                    let _ = child.kill();
                    let _ = child.wait();
                    let why = match status {
                        Some(st) => format!("floodgate exited ({st}) before printing"),
                        None => format!("floodgate did not print within {START_TIMEOUT:?}"),
                    };
                    panic!(
                        "{why} {} `listening` line(s)\nconfig:\n{}\nstdout:\n{}\nstderr:\n{}",
                        cfg.listeners.len(),
                        cfg.toml(),
                        seen.join("\n"),
                        fs::read_to_string(&stderr).unwrap_or_default()
                    );
                }
            }
        }
        for (want, got) in cfg.listeners.iter().zip(&listeners) {
            assert_eq!(
                (&want.name, &want.tls),
                (&got.name, &got.tls),
                "listening lines must come in config order"
            );
        }
        Floodgate {
            child,
            listeners,
            stderr,
            config,
            dir,
        }
    }

    /// The bound address of the listener called `name`.
    pub fn addr(&self, name: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("no listener {name:?} in {:?}", self.listeners))
            .addr
    }

    /// All listeners, in config order.
    pub fn listeners(&self) -> &[Listening] {
        &self.listeners
    }

    /// floodgate's stderr (its log) so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.stderr).unwrap_or_default()).into_owned()
    }

    /// The config file path.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The temp dir holding config and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        sigterm(&self.child);
        wait_exit(&mut self.child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("floodgate did not exit within 20 s of SIGTERM"))
    }
}

impl Drop for Floodgate {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- floodgate stderr ---\n{}", self.stderr());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Raw SMTP client
// ---------------------------------------------------------------------------------------

/// Bytes as an escaped string for assertion messages (`b"a\r\n"` shows as `a\r\n`).
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().to_string()
}

/// One complete SMTP reply.
#[derive(Clone, PartialEq, Eq)]
pub struct Reply {
    /// The three-digit code (of the last line).
    pub code: u16,
    /// Text of each line after `code` and the separator.
    pub lines: Vec<String>,
    /// The bytes as received, CRLFs included.
    pub raw: Vec<u8>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", show(&self.raw))
    }
}

impl Reply {
    /// The enhanced status code (`4.4.1`) at the start of the last line, if any.
    pub fn enhanced(&self) -> Option<String> {
        let first = self.lines.last()?.split(' ').next()?;
        let parts: Vec<&str> = first.split('.').collect();
        let ok = parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        ok.then(|| first.to_string())
    }

    /// `code` is in the given class (2, 3, 4 or 5).
    pub fn class(&self) -> u16 {
        self.code / 100
    }

    /// The first word of each line after the first, upper-cased (EHLO keywords).
    pub fn keywords(&self) -> Vec<String> {
        self.lines
            .iter()
            .skip(1)
            .filter_map(|l| l.split(' ').next())
            .map(str::to_ascii_uppercase)
            .collect()
    }

    /// The whole reply as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}

/// Finds one complete reply at the start of `buf`; returns it and its length.
pub fn parse_reply(buf: &[u8]) -> Option<Result<(Reply, usize), String>> {
    let mut pos = 0;
    let mut lines = Vec::new();
    loop {
        let end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let line = &buf[pos..end];
        let next = end + 2;
        if line.len() < 3 || !line[..3].iter().all(u8::is_ascii_digit) {
            return Some(Err(format!(
                "not an SMTP reply line: {:?}",
                String::from_utf8_lossy(line)
            )));
        }
        let code: u16 = std::str::from_utf8(&line[..3]).ok()?.parse().ok()?;
        let sep = line.get(3).copied();
        lines.push(String::from_utf8_lossy(line.get(4..).unwrap_or_default()).into_owned());
        match sep {
            None | Some(b' ') => {
                return Some(Ok((
                    Reply {
                        code,
                        lines,
                        raw: buf[..next].to_vec(),
                    },
                    next,
                )))
            }
            Some(b'-') => pos = next,
            Some(_) => {
                return Some(Err(format!(
                    "bad reply separator: {:?}",
                    String::from_utf8_lossy(line)
                )))
            }
        }
    }
}

/// A byte-exact SMTP client over plain TCP; every read is bounded by [`REPLY_TIMEOUT`].
pub struct RawClient {
    stream: TcpStream,
    buf: Vec<u8>,
    eof: bool,
}

impl RawClient {
    /// Connects (bounded) to `addr`.
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        RawClient {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Connects and reads the greeting, which must be 220.
    pub fn connect_greeted(addr: SocketAddr) -> RawClient {
        let mut c = RawClient::connect(addr);
        let g = c.reply();
        assert_eq!(g.code, 220, "greeting: {}", g.text());
        c
    }

    /// Writes `bytes` in one write call.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap_or_else(|e| {
            panic!(
                "send {:?}: {e}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )
        });
    }

    /// Writes `bytes` in one write call; an error (peer gone) is returned, not fatal.
    pub fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one reply: `Ok`, or `Err` describing EOF / reset / timeout / garbage.
    pub fn try_reply(&mut self) -> Result<Reply, String> {
        loop {
            if let Some(r) = parse_reply(&self.buf) {
                let (reply, n) = r?;
                self.buf.drain(..n);
                return Ok(reply);
            }
            if self.eof {
                return Err(format!(
                    "connection closed; unparsed bytes {:?}",
                    String::from_utf8_lossy(&self.buf)
                ));
            }
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(format!(
                        "no complete reply within {REPLY_TIMEOUT:?}; have {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ))
                }
                Err(e) => return Err(format!("read error: {e}")),
            }
        }
    }

    /// Reads one reply or fails the test.
    pub fn reply(&mut self) -> Reply {
        self.try_reply().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Reads `n` replies.
    pub fn replies(&mut self, n: usize) -> Vec<Reply> {
        (0..n).map(|_| self.reply()).collect()
    }

    /// Sends `line` + CRLF and reads the reply.
    pub fn cmd(&mut self, line: &str) -> Reply {
        self.send(format!("{line}\r\n").as_bytes());
        self.reply()
    }

    /// Reads replies until the server closes the connection (bounded per read).
    /// A read timeout fails the test: the server was expected to close.
    pub fn replies_until_close(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        loop {
            match self.try_reply() {
                Ok(r) => out.push(r),
                Err(e) if self.eof || e.starts_with("read error") => {
                    assert!(
                        self.buf.is_empty(),
                        "trailing bytes before close: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                    return out;
                }
                Err(e) => panic!("server did not close: {e}; replies so far: {out:?}"),
            }
        }
    }

    /// True if the server has closed (or reset) the connection; reads are bounded.
    pub fn is_closed(&mut self) -> bool {
        if self.eof {
            return true;
        }
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => {
                self.buf.push(b[0]);
                false
            }
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }

    /// Sends EHLO and returns the reply (asserting 250).
    pub fn ehlo(&mut self, name: &str) -> Reply {
        let r = self.cmd(&format!("EHLO {name}"));
        assert_eq!(r.code, 250, "EHLO: {}", r.text());
        r
    }

    /// Half-closes the sending side.
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}
