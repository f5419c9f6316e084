//! floodgate itself: a test config in the contract format and the running binary.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::*;

/// How long after a line is logged it is surely in floodgate's stderr: its log writer writes
/// a line at once after a quiet spell and within 20 ms while lines keep coming; the rest is
/// room for a loaded machine.
pub const LOG_SETTLE: Duration = Duration::from_millis(100);

/// One `[[listener]]` of a test config.
#[derive(Debug, Clone)]
pub struct ListenerSpec {
    /// Listener name (printed on its `listening` line).
    pub name: String,
    /// `none`, `starttls` or `implicit`.
    pub tls: String,
    /// Bind address; `127.0.0.1:0` picks a free port.
    pub address: String,
    /// Accept a PROXY v1/v2 header (from `[server] trusted_proxies` only).
    pub proxy_protocol: bool,
    /// `require_tls = true` (written only when set).
    pub require_tls: bool,
    /// `require_auth = true` (written only when set).
    pub require_auth: bool,
}

impl ListenerSpec {
    /// A listener on 127.0.0.1, free port.
    pub fn new(name: &str, tls: &str) -> ListenerSpec {
        ListenerSpec {
            name: name.into(),
            tls: tls.into(),
            address: "127.0.0.1:0".into(),
            proxy_protocol: false,
            require_tls: false,
            require_auth: false,
        }
    }

    /// The same listener with `require_tls` and `require_auth` as given.
    pub fn requiring(mut self, tls: bool, auth: bool) -> ListenerSpec {
        self.require_tls = tls;
        self.require_auth = auth;
        self
    }

    /// The same listener bound to `address` (e.g. `[::1]:0`).
    pub fn at(mut self, address: &str) -> ListenerSpec {
        self.address = address.into();
        self
    }

    /// The same listener accepting a PROXY header from trusted peers.
    pub fn with_proxy_protocol(mut self) -> ListenerSpec {
        self.proxy_protocol = true;
        self
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
    /// `[server] trusted_proxies` (CIDRs); not written when empty.
    pub trusted_proxies: Vec<String>,
    /// `[server] shutdown_grace` (default `2s`).
    pub shutdown_grace: String,
    /// More `[server]` keys, one `key = value` TOML line each (e.g. `max_errors = 3`).
    pub server_keys: Vec<String>,
    /// `[timeouts]` values by key; [`FloodgateConfig::timeout`] overrides one.
    pub timeouts: Vec<(String, String)>,
    /// TOML appended verbatim (e.g. an `[smtp]` section). Must not repeat the sections
    /// written here: server, timeouts, tls, upstream, log.
    pub extra: String,
    /// `[tls] auth_without_tls` (AUTH on plain listeners, for tests).
    pub auth_without_tls: bool,
    /// More `[upstream]` keys, one `key = value` TOML line each.
    pub upstream_keys: Vec<String>,
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
            trusted_proxies: Vec::new(),
            shutdown_grace: "2s".into(),
            server_keys: Vec::new(),
            timeouts: [
                ("command", "60s"),
                ("data", "120s"),
                ("session", "10m"),
                ("tls_handshake", "10s"),
                ("upstream_connect", "5s"),
                ("upstream_reply", "30s"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            extra: String::new(),
            upstream_keys: Vec::new(),
            auth_without_tls: false,
        }
    }

    /// Replaces the listeners.
    pub fn listeners(mut self, listeners: Vec<ListenerSpec>) -> Self {
        self.listeners = listeners;
        self
    }

    /// Sets `[server] trusted_proxies`.
    pub fn trusted_proxies(mut self, cidrs: &[&str]) -> Self {
        self.trusted_proxies = cidrs.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Sets `[server] shutdown_grace` (a duration string such as `"2s"`).
    pub fn shutdown_grace(mut self, grace: &str) -> Self {
        self.shutdown_grace = grace.into();
        self
    }

    /// Adds a `[server]` key; `value` is TOML (`"3"`, `"\"x\""`).
    pub fn server(mut self, key: &str, value: &str) -> Self {
        self.server_keys.push(format!("{key} = {value}"));
        self
    }

    /// Sets one `[timeouts]` value (a duration string), adding the key if needed.
    pub fn timeout(mut self, key: &str, value: &str) -> Self {
        match self.timeouts.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.into(),
            None => self.timeouts.push((key.into(), value.into())),
        }
        self
    }

    /// One more `[upstream]` key; `value` is TOML (quote strings yourself).
    pub fn upstream_key(mut self, key: &str, value: &str) -> Self {
        self.upstream_keys.push(format!("{key} = {value}"));
        self
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

    /// Allows AUTH before TLS.
    pub fn auth_without_tls(mut self, yes: bool) -> Self {
        self.auth_without_tls = yes;
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
        t.push_str(&format!(
            "[server]\nhostname = \"floodgate.test\"\nshutdown_grace = \"{}\"\n",
            self.shutdown_grace
        ));
        if !self.trusted_proxies.is_empty() {
            let list: Vec<String> = self
                .trusted_proxies
                .iter()
                .map(|c| format!("\"{c}\""))
                .collect();
            t.push_str(&format!("trusted_proxies = [{}]\n", list.join(", ")));
        }
        for line in &self.server_keys {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str("\n[timeouts]\n");
        for (k, v) in &self.timeouts {
            t.push_str(&format!("{k} = \"{v}\"\n"));
        }
        t.push('\n');
        for l in &self.listeners {
            t.push_str(&format!(
                "[[listener]]\nname = \"{}\"\naddress = \"{}\"\ntls = \"{}\"\nproxy_protocol = {}\n",
                l.name, l.address, l.tls, l.proxy_protocol
            ));
            if l.require_tls {
                t.push_str("require_tls = true\n");
            }
            if l.require_auth {
                t.push_str("require_auth = true\n");
            }
            t.push('\n');
        }
        t.push_str(&format!(
            "[tls]\ncertificate = \"{}\"\nprivate_key = \"{}\"\nauth_without_tls = {}\n\n",
            path(dev_cert("server.crt")),
            path(dev_cert("server.key")),
            self.auth_without_tls
        ));
        t.push_str(&format!(
            "[upstream]\naddress = \"{}\"\ntls = \"{}\"\nclient_identity = \"{}\"\n\
             server_name = \"localhost\"\nca_file = \"{}\"\nhelo_name = \"floodgate.test\"\n\n",
            self.upstream,
            self.upstream_tls,
            self.client_identity,
            path(ca_file())
        ));
        for line in &self.upstream_keys {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str(&format!(
            "\n[log]\nlevel = \"{}\"\nformat = \"text\"\n\n",
            self.log_level
        ));
        t.push_str(&self.extra);
        if !self.extra.contains("[admin]") {
            // In the config's own temp dir (relative to the config file).
            t.push_str("\n[admin]\nsocket = \"admin.sock\"\n");
        }
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

/// The whole answer (head and body) to a GET of `target` on the admin socket `socket`.
pub fn admin_get(socket: &Path, target: &str) -> String {
    admin_request(socket, "GET", target)
}

/// The whole answer (head and body) to a `method` request of `target` without a body on the
/// admin socket `socket` (60 s at most: a POST may send mail).
pub fn admin_request(socket: &Path, method: &str, target: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("admin socket");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
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
    /// The listeners' names and TLS modes, in config order.
    names: Vec<(String, String)>,
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
        let names: Vec<(String, String)> = cfg
            .listeners
            .iter()
            .map(|l| (l.name.clone(), l.tls.clone()))
            .collect();
        let (child, listeners) = spawn_listening(&config, &stderr, &names);
        Floodgate {
            child,
            listeners,
            stderr,
            config,
            names,
            dir,
        }
    }

    /// Kills floodgate at once (SIGKILL), as a crash or the OOM killer would: no session
    /// is told, nothing is flushed.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts floodgate again on the same config file (so the same ports when the config
    /// names them, the same spool, state and admin socket), appending to the same log, and
    /// waits (bounded) for its `listening` lines. The running process, if any, is killed
    /// first.
    pub fn restart(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill_hard();
        }
        let (child, listeners) = spawn_listening(&self.config, &self.stderr, &self.names);
        self.child = child;
        self.listeners = listeners;
    }

    /// Whether the process is running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The admin socket when the config leaves `[admin]` to the helpers.
    pub fn admin_socket(&self) -> PathBuf {
        self.dir.path().join("admin.sock")
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

    /// floodgate's stderr (its log): every line logged before the call (see [`LOG_SETTLE`]).
    pub fn stderr(&self) -> String {
        std::thread::sleep(LOG_SETTLE);
        self.stderr_now()
    }

    /// What floodgate's stderr holds at this instant (lines logged in the last moments may
    /// still be on their way).
    fn stderr_now(&self) -> String {
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

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory in KiB (`VmRSS` in /proc/PID/status), if readable.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Sends signal `name` (`TERM`, `INT`, `HUP`, ...) with `kill -s NAME`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill -s {name}: {e}"));
        assert!(status.success(), "kill -s {name} failed: {status}");
    }

    /// Waits (bounded by `limit`) until floodgate's stderr contains `needle`; panics with
    /// the log so far when time runs out.
    pub fn wait_stderr(&self, needle: &str, limit: Duration) {
        self.wait_stderr_count(needle, 1, limit);
    }

    /// Waits (bounded by `limit`) until `needle` occurs at least `n` times in stderr.
    pub fn wait_stderr_count(&self, needle: &str, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            // Polled until it shows up: no need to let the log settle first.
            let log = self.stderr_now();
            if log.matches(needle).count() >= n {
                return;
            }
            if Instant::now() >= deadline {
                panic!("timed out after {limit:?} waiting for {n} x {needle:?} in floodgate's log:\n{log}");
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Replaces the config file's text (for a reload test; listeners are not re-bound).
    pub fn write_config(&self, text: &str) {
        fs::write(&self.config, text).expect("rewrite config");
    }

    /// Waits (bounded by `limit`) for floodgate to exit on its own; `None` if it did not.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, limit)
    }

    /// Sends SIGHUP (reload the config file).
    pub fn sighup(&self) {
        let _ = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        sigterm(&self.child);
        wait_exit(&mut self.child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("floodgate did not exit within 20 s of SIGTERM"))
    }
}

/// Starts `floodgate run --config CONFIG` with its stderr appended to `stderr`, and waits
/// (bounded) for one `listening` line per entry of `names` (name, TLS mode), in that order.
/// Panics with the config and the log when floodgate exits or stays silent.
fn spawn_listening(
    config: &Path,
    stderr: &Path,
    names: &[(String, String)],
) -> (Child, Vec<Listening>) {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr)
        .expect("stderr file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("run")
        .arg("--config")
        .arg(config)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start floodgate");
    let lines = stdout_lines(&mut child);
    let deadline = Instant::now() + START_TIMEOUT;
    let mut listeners = Vec::new();
    let mut seen = Vec::new();
    while listeners.len() < names.len() {
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
                    names.len(),
                    fs::read_to_string(config).unwrap_or_default(),
                    seen.join("\n"),
                    fs::read_to_string(stderr).unwrap_or_default()
                );
            }
        }
    }
    for ((name, tls), got) in names.iter().zip(&listeners) {
        assert_eq!(
            (name, tls),
            (&got.name, &got.tls),
            "listening lines must come in config order"
        );
    }
    (child, listeners)
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
