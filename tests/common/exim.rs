//! A real Exim 4 as floodgate's smart host: Debian's `exim4-daemon-heavy`, unpacked by
//! `.ci/install-exim.sh` into /opt/exim4 (`EXIM_BIN` overrides the binary's path), run as
//! root with a private configuration, spool, log and mail directory in a temp dir.
//!
//! Reached as `common::exim` (std + tempfile only).
//!
//! The configuration is `tests/common/exim.conf`, filled in per daemon.
//!
//! One daemon listens on three loopback ports (see [`EximPort`]): one expecting a PROXY
//! header from 127.0.0.1 (floodgate), one without `hosts_proxy`, and one that also limits
//! each host to one connection at a time. Every accepted message is delivered to one
//! maildir file ([`Exim::messages`]) carrying an `X-Exim-Vars` header with what Exim
//! believed about the session (client address, ports, proxy, TLS, authenticated id).
//!
//! Recipients: any address at [`LOCAL_DOMAIN`] or [`VIA_FLOODGATE_DOMAIN`] is accepted
//! from anyone; any other domain only after AUTH (`relay not permitted` otherwise). A
//! message for [`VIA_FLOODGATE_DOMAIN`] without an `X-Exim-Client` header is not
//! delivered locally but sent on by Exim's smtp transport to 127.0.0.1 at the port in
//! its `X-Floodgate-Port` header (Exim as a client of floodgate), adding `X-Exim-Client`.
//!
//! The daemon is started under a small `sh` watchdog that holds a pipe from this process:
//! when the test binary exits, however it exits, the pipe closes and the watchdog stops
//! Exim by PID and removes the temp dir. [`Exim::shared`] is one daemon for a whole test
//! binary; [`Exim::start`] gives a private one, stopped by PID on drop.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Where `.ci/install-exim.sh` unpacks the binary.
pub const DEFAULT_EXIM_BIN: &str = "/opt/exim4/usr/sbin/exim4";
/// The user Exim's authenticators accept.
pub const EXIM_USER: &str = "alice";
/// [`EXIM_USER`]'s password.
pub const EXIM_PASSWORD: &str = "s3cret";
/// Exim's `primary_hostname` (and the name in its greeting and Received headers).
pub const EXIM_HOSTNAME: &str = "exim.test";
/// Recipients here are accepted without AUTH and delivered locally.
pub const LOCAL_DOMAIN: &str = "example.test";
/// Recipients here are accepted without AUTH and sent on through floodgate.
pub const VIA_FLOODGATE_DOMAIN: &str = "via-floodgate.test";
/// Exim's `message_size_limit`, in bytes.
pub const EXIM_SIZE_LIMIT: u64 = 10_000_000;
/// How many main-log lines a failure shows.
const MAINLOG_TAIL: usize = 80;
/// How long Exim may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One of the shared daemon's listening ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EximPort {
    /// `hosts_proxy = 127.0.0.1`: a connection from 127.0.0.1 must start with a PROXY
    /// header (floodgate with `client_identity = "proxy-v2"`).
    Proxy,
    /// No `hosts_proxy`: a PROXY header here is read as SMTP commands.
    Plain,
    /// As [`EximPort::Proxy`], plus `smtp_accept_max_per_host = 1`. Exim counts a
    /// host's connections to all of the daemon's ports, so only a private daemon
    /// ([`Exim::start`]) gives a test a count of its own.
    OnePerHost,
}

/// The binary to run: `EXIM_BIN`, else [`DEFAULT_EXIM_BIN`].
pub fn exim_bin() -> PathBuf {
    std::env::var_os("EXIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_EXIM_BIN))
}

/// Fails the test with what to do when Exim cannot be run here: tests that need a real
/// Exim must never pass without one.
fn require_exim() -> PathBuf {
    let bin = exim_bin();
    assert!(
        bin.is_file(),
        "Exim is not installed at {} (set EXIM_BIN to use another): run .ci/install-exim.sh \
         (called by .ci/install.sh), which unpacks Debian's exim4-daemon-heavy there",
        bin.display()
    );
    let uid = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().map(str::to_string))
        })
        .unwrap_or_default();
    assert_eq!(
        uid,
        "0",
        "the Exim tests run {} as root with a private configuration (-C); Exim gives up \
         root for -C when called by anyone else, and then cannot run a daemon",
        bin.display()
    );
    bin
}

/// A free loopback port (bound once, then released).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// The repository's development certificate for upstreams (`certs/dev/upstream.*`).
fn dev_cert(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("certs")
        .join("dev")
        .join(name)
}

/// The three ports of one daemon.
#[derive(Debug, Clone, Copy)]
struct Ports {
    proxy: u16,
    plain: u16,
    one_per_host: u16,
}

/// The configuration file for a daemon in `dir` on `ports`: `exim.conf` (next to this
/// file) with every `@NAME@` replaced.
fn config_text(bin: &Path, dir: &Path, ports: Ports) -> String {
    let values = [
        ("@EXIM_PATH@", bin.display().to_string()),
        ("@DIR@", dir.display().to_string()),
        ("@HOSTNAME@", EXIM_HOSTNAME.to_string()),
        ("@LOCAL_DOMAIN@", LOCAL_DOMAIN.to_string()),
        ("@VIA_FLOODGATE_DOMAIN@", VIA_FLOODGATE_DOMAIN.to_string()),
        ("@PROXY_PORT@", ports.proxy.to_string()),
        ("@PLAIN_PORT@", ports.plain.to_string()),
        ("@ONE_PER_HOST_PORT@", ports.one_per_host.to_string()),
        ("@SIZE_LIMIT@", EXIM_SIZE_LIMIT.to_string()),
        ("@CERT@", dev_cert("upstream.crt").display().to_string()),
        ("@KEY@", dev_cert("upstream.key").display().to_string()),
        ("@USER@", EXIM_USER.to_string()),
        ("@PASSWORD@", EXIM_PASSWORD.to_string()),
    ];
    let mut text = include_str!("exim.conf").to_string();
    for (name, value) in values {
        text = text.replace(name, &value);
    }
    if let Some(left) = placeholder(&text) {
        panic!("exim.conf has a placeholder config_text does not fill: {left}");
    }
    text
}

/// The first `@NAME@` (upper-case letters and `_`) in `text`.
fn placeholder(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(start) = rest.find('@') {
        let after = &rest[start + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(after.len());
        if len > 0 && after[len..].starts_with('@') {
            return Some(&rest[start..start + len + 2]);
        }
        rest = after;
    }
    None
}

/// Starts `bin` as a foreground daemon (`-bdf`) under an `sh` watchdog that stops it by
/// PID (and removes `dir`) when its stdin closes. Returns the watchdog, its stdin and
/// Exim's PID.
fn spawn_watched(bin: &Path, conf: &Path, dir: &Path) -> (Child, ChildStdin, u32) {
    const WATCHDOG: &str = r#"dir=$1; shift
"$@" </dev/null >&2 &
pid=$!
echo "$pid"
read -r _ || true
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rm -rf -- "$dir""#;
    let stderr = File::create(dir.join("exim.stderr")).expect("exim stderr file");
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("exim-watchdog")
        .arg(dir)
        .arg(bin)
        .arg("-C")
        .arg(conf)
        .arg("-bdf")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start /bin/sh for {}: {e}", bin.display()));
    let stdin = child.stdin.take().expect("stdin piped");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .expect("read Exim's pid from the watchdog");
    let pid = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("watchdog printed {line:?} instead of Exim's pid"));
    (child, stdin, pid)
}

/// True while process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// A running Exim daemon.
pub struct Exim {
    watchdog: Child,
    /// Closing it tells the watchdog to stop Exim.
    watchdog_stdin: Option<ChildStdin>,
    pid: u32,
    ports: Ports,
    dir: TempDir,
}

impl Exim {
    /// The daemon shared by every test of this binary, started on first use. Tests that
    /// share it tell their messages apart by sender or recipient.
    pub fn shared() -> &'static Exim {
        static SHARED: OnceLock<Exim> = OnceLock::new();
        SHARED.get_or_init(Exim::start)
    }

    /// A private daemon, stopped by PID when dropped.
    pub fn start() -> Exim {
        let bin = require_exim();
        let mut failures = Vec::new();
        // A port picked free may be taken before Exim binds it: try again with others.
        for _ in 0..3 {
            match Exim::try_start(&bin) {
                Ok(exim) => return exim,
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "Exim did not start (3 attempts):\n{}",
            failures.join("\n----\n")
        );
    }

    fn try_start(bin: &Path) -> Result<Exim, String> {
        let dir = TempDir::new().expect("tempdir");
        // Deliveries run as Debian-exim (Debian's build never delivers as root).
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        for sub in ["spool", "log", "mail"] {
            fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        fs::set_permissions(dir.path().join("mail"), fs::Permissions::from_mode(0o1777))
            .expect("chmod mail");
        let ports = Ports {
            proxy: free_port(),
            plain: free_port(),
            one_per_host: free_port(),
        };
        let conf = dir.path().join("exim.conf");
        fs::write(&conf, config_text(bin, dir.path(), ports)).expect("write exim.conf");
        let (watchdog, stdin, pid) = spawn_watched(bin, &conf, dir.path());
        let mut exim = Exim {
            watchdog,
            watchdog_stdin: Some(stdin),
            pid,
            ports,
            dir,
        };
        let ready = format!("daemon started: pid={pid},");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if exim.mainlog().contains(&ready) {
                return Ok(exim);
            }
            let gone = !alive(pid);
            if gone || Instant::now() >= deadline {
                let why = if gone {
                    "Exim exited before listening".to_string()
                } else {
                    format!("Exim did not log {ready:?} within {START_TIMEOUT:?}")
                };
                let report = format!("{why}\n{}", exim.diagnostics());
                exim.stop();
                return Err(report);
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Everything that explains a failure: the config and Exim's logs and stderr.
    pub fn diagnostics(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        // The last lines of the main log: the shared daemon's log holds every test's.
        let mainlog = read("log/mainlog");
        let lines: Vec<&str> = mainlog.lines().collect();
        let tail = lines[lines.len().saturating_sub(MAINLOG_TAIL)..].join("\n");
        format!(
            "--- exim.conf ---\n{}\n--- mainlog (last {MAINLOG_TAIL} lines) ---\n{}\n--- paniclog ---\n{}\n--- rejectlog ---\n{}\n--- stderr ---\n{}",
            read("exim.conf"),
            tail,
            read("log/paniclog"),
            read("log/rejectlog"),
            read("exim.stderr"),
        )
    }

    /// The address of one of the daemon's ports.
    pub fn addr(&self, port: EximPort) -> SocketAddr {
        let p = match port {
            EximPort::Proxy => self.ports.proxy,
            EximPort::Plain => self.ports.plain,
            EximPort::OnePerHost => self.ports.one_per_host,
        };
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    /// The daemon's PID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temp dir (config, spool, log, mail).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Exim's main log so far.
    pub fn mainlog(&self) -> String {
        fs::read_to_string(self.dir.path().join("log/mainlog")).unwrap_or_default()
    }

    /// The main log's lines that contain every one of `parts`.
    pub fn log_lines(&self, parts: &[&str]) -> Vec<String> {
        self.mainlog()
            .lines()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_string)
            .collect()
    }

    /// Waits (bounded by `limit`) for at least `n` main-log lines holding every one of
    /// `parts`; panics with the diagnostics when time runs out.
    pub fn wait_log(&self, parts: &[&str], n: usize, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        loop {
            let lines = self.log_lines(parts);
            if lines.len() >= n {
                return lines;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {limit:?} waiting for {n} Exim log line(s) with {parts:?}\n{}",
                    self.diagnostics()
                );
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Every message delivered so far (maildir `new/`), oldest first.
    pub fn messages(&self) -> Vec<EximMessage> {
        let new = self.dir.path().join("mail").join("new");
        let Ok(entries) = fs::read_dir(&new) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        // Maildir names start with the delivery time in seconds and microseconds.
        files.sort();
        files
            .into_iter()
            .filter_map(|p| fs::read(&p).ok().map(|raw| EximMessage::parse(p, raw)))
            .collect()
    }

    /// The delivered messages whose envelope sender is `sender`.
    pub fn messages_from(&self, sender: &str) -> Vec<EximMessage> {
        self.messages()
            .into_iter()
            .filter(|m| m.return_path.eq_ignore_ascii_case(sender))
            .collect()
    }

    /// Waits (bounded by `limit`) until at least `n` messages from `sender` are
    /// delivered, then returns them all; panics with the diagnostics on time-out.
    pub fn wait_messages_from(&self, sender: &str, n: usize, limit: Duration) -> Vec<EximMessage> {
        let deadline = Instant::now() + limit;
        loop {
            let msgs = self.messages_from(sender);
            if msgs.len() >= n {
                return msgs;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {limit:?} waiting for {n} message(s) from <{sender}> \
                     in Exim's maildir (have {})\n{}",
                    msgs.len(),
                    self.diagnostics()
                );
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Stops Exim by PID and waits (bounded) for the watchdog.
    fn stop(&mut self) {
        if alive(self.pid) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        // Closing the pipe lets the watchdog finish (it kills again, harmlessly).
        if let Some(mut stdin) = self.watchdog_stdin.take() {
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.watchdog.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

impl Drop for Exim {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("--- Exim ---\n{}", self.diagnostics());
        }
        self.stop();
    }
}

/// One delivered message as Exim wrote it (LF line ends).
#[derive(Debug, Clone)]
pub struct EximMessage {
    /// The maildir file.
    pub path: PathBuf,
    /// The whole file.
    pub raw: Vec<u8>,
    /// The envelope sender (`Return-path`, without angle brackets).
    pub return_path: String,
    /// The envelope recipients (`Envelope-to`).
    pub envelope_to: Vec<String>,
}

impl EximMessage {
    fn parse(path: PathBuf, raw: Vec<u8>) -> EximMessage {
        let mut m = EximMessage {
            path,
            raw,
            return_path: String::new(),
            envelope_to: Vec::new(),
        };
        m.return_path = m
            .header("Return-path")
            .first()
            .map(|v| {
                v.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
            .unwrap_or_default();
        m.envelope_to = m
            .header("Envelope-to")
            .first()
            .map(|v| {
                v.split(',')
                    .map(|a| a.trim().to_string())
                    .filter(|a| !a.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        m
    }

    /// The header section (up to the first empty line), lossily decoded.
    pub fn head(&self) -> String {
        crate::common::delivered::head(&self.raw)
    }

    /// The bytes after the header section's empty line.
    pub fn body(&self) -> &[u8] {
        crate::common::delivered::body(&self.raw)
    }

    /// Every value of header `name` (case-insensitive), unfolded, in order.
    pub fn header(&self, name: &str) -> Vec<String> {
        crate::common::delivered::header_values(&self.head(), name)
    }

    /// The `X-Exim-Vars` header as a map: Exim's variables at the time of DATA. Exim
    /// appends the header, so a message that passed Exim twice has two; this is the
    /// last (the final arrival's).
    pub fn vars(&self) -> BTreeMap<String, String> {
        let header = self.header("X-Exim-Vars");
        let line = header.last().map(String::as_str).unwrap_or_default();
        line.split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// One `X-Exim-Vars` value (`""` when Exim's variable was empty or is missing).
    pub fn var(&self, name: &str) -> String {
        self.vars().remove(name).unwrap_or_default()
    }
}
