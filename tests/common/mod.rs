//! Support for floodgate's integration tests (std + tempfile + serde_json only).
//!
//! * [`Recorder`]: the recording SMTP upstream (`tests/upstream/recorder.py`), started on
//!   127.0.0.1 port 0, killed on drop; its JSON-lines record parsed into [`Message`]s.
//! * [`FloodgateConfig`] / [`Floodgate`]: a config file written into a temp dir and the
//!   real binary (`CARGO_BIN_EXE_floodgate run --config ...`), its `listening` lines
//!   parsed, stderr kept in a file and printed when a test fails, killed on drop.
//! * [`swaks`], [`python`], [`smtplib`]: real clients run with a time limit.
//! * [`RawClient`]: byte-exact SMTP over plain TCP with bounded reads.
//! * [`postfix::Postfix`]: a private real Postfix (with Dovecot SASL) as the smart host.
//!
//! Every wait is bounded; running out of time fails the test with a message saying what
//! was awaited. Nothing here binds or connects beyond 127.0.0.1 / ::1.
#![allow(dead_code)] // each test crate uses a different subset of these helpers

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

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

/// Runs the admin verb `floodgate ARGS --socket SOCKET` (bounded like every client).
pub fn admin_verb(socket: &Path, args: &[&str]) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(args)
            .arg("--socket")
            .arg(socket),
        Duration::from_secs(30),
    )
}

/// The `by` of an admin verb run by this test over the admin socket: `user:` and this
/// process's user name (as floodgate reads it off the socket's peer credentials).
pub fn socket_actor() -> String {
    let uid = ::floodgate::admin::peer::my_uid();
    format!("user:{}", ::floodgate::admin::peer::user_name(uid))
}

/// [`admin_verb`] with `--json`, which must succeed; its answer parsed.
pub fn admin_json(socket: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = admin_verb(socket, &a);
    assert!(out.ok(), "{out}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"))
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

pub mod book;
pub mod campaign;
pub mod corpus;
pub mod daemon;
pub mod delivered;
pub mod dovecot;
pub mod exim;
mod floodgate;
pub mod postfix;
mod raw;
mod recorder;
pub mod redis;
pub mod restrict;

pub use floodgate::*;
pub use raw::*;
// Not every test crate uses the recorder (the real-Postfix tests do not).
#[allow(unused_imports)]
pub use recorder::*;
