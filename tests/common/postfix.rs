//! A private, real Postfix as floodgate's smart host (Debian's `postfix` package), with an
//! optional private Dovecot for SASL.
//!
//! Everything lives in one temporary directory: `conf/` (main.cf, master.cf: Postfix's
//! `config_directory`, started with `-c`), `queue/`, `data/`, `mail/inbox/` (a maildir that
//! receives every message for every recipient, through the `virtual` delivery agent),
//! `maillog` (Postfix's own log file, no syslog), `tls/` (certificates) and `dovecot/`.
//! Postfix's master runs in the foreground in its own process group and is stopped by
//! that group's id (see [`super::daemon`]).
//!
//! Listeners ([`PfListener`]), all on free ports of 127.0.0.1, all with the same main.cf:
//!
//! | listener | what |
//! |---|---|
//! | `Plain` | no TLS offered |
//! | `StartTls` | STARTTLS with `certs/dev/upstream.crt` (names `localhost`, `127.0.0.1`) |
//! | `Implicit` | TLS from the first byte (`smtpd_tls_wrappermode`), same certificate |
//! | `WrongName` | STARTTLS with a certificate signed by the dev CA for `wrong-name.test` only |
//! | `Untrusted` | STARTTLS with a self-signed certificate for `localhost` (unknown CA) |
//! | `Proxy` | expects a PROXY v1/v2 header (`smtpd_upstream_proxy_protocol = haproxy`), STARTTLS offered |
//!
//! Every domain is a virtual mailbox domain here (`virtual_mailbox_domains = static:all`),
//! so no relay permission is needed and nothing ever leaves the machine (`default_transport`
//! is `error:`).
//!
//! Tests that share one instance call [`Postfix::shared`]; messages are told apart by a
//! unique token (in the subject, say) with [`Postfix::wait_messages`]. A test that needs
//! another configuration starts its own with [`Postfix::start`] (stopped on drop):
//!
//! ```text
//! static PF: OnceLock<Postfix> = OnceLock::new();
//! let pf = Postfix::shared(&PF, || PostfixConfig::default().sasl());
//! let _log = pf.log_on_panic();                  // Postfix's and Dovecot's logs on failure
//! // XCLIENT (PROXY v2 for PfListener::Proxy), the listener's TLS, AUTH without TLS allowed:
//! let fg = Floodgate::start(&pf.floodgate_config(PfListener::Plain).extra("[smtp]\n..."));
//! let tok = token("what");
//! let mut c = RawClient::connect_greeted(fg.addr("plain"));
//! c.ehlo("client.example");
//! assert_eq!(send_small_message(&mut c, &tok), [250, 250, 354, 250]);
//! let m = &pf.wait_messages(&tok, 1)[0];
//! assert!(m.postfix_received().contains("[127.0.0.1]"));
//! pf.settle();                                    // queue empty: every accepted message is in
//! assert_eq!(pf.messages_with(&tok).len(), 1);    // the maildir, so counting is exact
//!
//! let own = Postfix::start(&PostfixConfig::default().xclient_hosts("").inet_protocols("ipv4"));
//! ```

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use tempfile::TempDir;

use super::daemon::{self, Daemon};
use super::dovecot::{self, Dovecot};
use super::{FloodgateConfig, RawClient};

mod config;
pub mod local;
mod maildir;

use super::delivered::find;
use config::{master_cf_text, postfix_owner, write_certs};
pub use config::{PfListener, PostfixConfig};
pub use maildir::Delivered;

/// How long Postfix and Dovecot may take to start.
const PF_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a message accepted by Postfix may take to reach the maildir.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Postfix's `postfix` command (`POSTFIX` overrides; `.ci/install.sh` installs `postfix`).
fn postfix_bin() -> String {
    std::env::var("POSTFIX").unwrap_or_else(|_| "/usr/sbin/postfix".into())
}

/// One free port on 127.0.0.1 (bound, then released for Postfix to bind).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// A running private Postfix (and Dovecot when configured), stopped on drop.
pub struct Postfix {
    cfg: PostfixConfig,
    ports: Vec<(PfListener, u16)>,
    master: Daemon,
    dovecot: Option<Dovecot>,
    dir: TempDir,
}

impl Postfix {
    /// Starts Postfix (and Dovecot if `cfg.sasl`), waiting (bounded) until every listener
    /// accepts connections and the plain one greets. Panics with Postfix's and Dovecot's
    /// logs when either cannot start; a master that exits at start (a port taken
    /// meanwhile) is tried again with new ports, three times in all.
    pub fn start(cfg: &PostfixConfig) -> Postfix {
        assert!(
            daemon::is_root(),
            "the Postfix smart-host tests must run as root (Postfix's master and Dovecot \
             start as root and drop privileges themselves)"
        );
        let bin = postfix_bin();
        assert!(
            Path::new(&bin).exists() && Path::new("/usr/lib/postfix/sbin/master").exists(),
            "{bin} or /usr/lib/postfix/sbin/master is missing: the smart-host tests need \
             Debian's postfix package (run .ci/install.sh)"
        );
        let mut last = String::new();
        for _attempt in 0..3 {
            match Postfix::try_start(cfg) {
                Ok(pf) => return pf,
                Err(why) => last = why,
            }
        }
        panic!("{last}");
    }

    /// One start attempt; `Err` when the master exited before every listener was ready
    /// (a port taken meanwhile, most likely: worth retrying with new ports).
    fn try_start(cfg: &PostfixConfig) -> Result<Postfix, String> {
        let dir = TempDir::new().expect("tempdir");
        let root = dir.path();
        // Postfix's daemons run as `postfix` and must reach the queue, the maildir and the
        // Dovecot socket inside this directory.
        fs::set_permissions(root, fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
        let owner = postfix_owner();
        for sub in ["conf", "queue", "data", "mail", "dovecot"] {
            fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        for sub in ["data", "mail"] {
            std::os::unix::fs::chown(root.join(sub), Some(owner.0), Some(owner.1))
                .expect("chown to postfix");
        }
        write_certs(&root.join("tls"));

        let dovecot = cfg.sasl.then(|| {
            let users: Vec<(&str, &str)> = cfg
                .users
                .iter()
                .map(|(u, p)| (u.as_str(), p.as_str()))
                .collect();
            Dovecot::start(&root.join("dovecot"), &root.join("auth"), &users)
        });

        let ports: Vec<(PfListener, u16)> =
            PfListener::ALL.iter().map(|&l| (l, free_port())).collect();
        let conf = root.join("conf");
        fs::write(conf.join("main.cf"), cfg.main_cf_text(root, owner)).expect("write main.cf");
        fs::write(
            conf.join("master.cf"),
            master_cf_text(&ports, &root.join("tls")),
        )
        .expect("write master.cf");

        // postconf reports a main.cf it cannot parse on stderr (`postfix check` would log
        // it where no one reads it: to syslog, before maillog_file is known).
        let postconf = Command::new("/usr/sbin/postconf")
            .arg("-c")
            .arg(&conf)
            .arg("-n")
            .stdin(Stdio::null())
            .output()
            .expect("run postconf");
        let postconf_err = String::from_utf8_lossy(&postconf.stderr);
        if !postconf.status.success() || postconf_err.contains("fatal") {
            panic!(
                "postconf refused {}/main.cf ({}):\n{postconf_err}\n--- main.cf ---\n{}",
                conf.display(),
                postconf.status,
                cfg.main_cf_text(root, owner)
            );
        }
        // `postfix check` validates the rest and creates the queue directories with their
        // owners and modes.
        let check = Command::new(postfix_bin())
            .arg("-c")
            .arg(&conf)
            .arg("check")
            .stdin(Stdio::null())
            .output()
            .expect("run postfix check");
        let maillog = root.join("maillog");
        if !check.status.success() {
            panic!(
                "`postfix -c {} check` failed ({}):\n{}{}\n--- maillog ---\n{}\n--- main.cf ---\n{}",
                conf.display(),
                check.status,
                String::from_utf8_lossy(&check.stdout),
                String::from_utf8_lossy(&check.stderr),
                fs::read_to_string(&maillog).unwrap_or_default(),
                cfg.main_cf_text(root, owner)
            );
        }

        let master = spawn_master(root);
        let pf = Postfix {
            cfg: cfg.clone(),
            ports,
            master,
            dovecot,
            dir,
        };
        pf.wait_ready()?;
        Ok(pf)
    }

    /// Waits until every listener accepts and the plain listener greets with 220.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + PF_START_TIMEOUT;
        for &(l, port) in &self.ports {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            loop {
                let ready = match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    Ok(mut s) if l == PfListener::Plain => greeting(&mut s).starts_with("220 "),
                    Ok(_) => true,
                    Err(_) => false,
                };
                if ready {
                    break;
                }
                if let Some(status) = self.master.exited() {
                    // The master reports startup errors (a port taken, above all) to
                    // syslog only: name the ports someone else holds instead.
                    let taken: Vec<String> = self
                        .ports
                        .iter()
                        .filter(|(_, p)| TcpListener::bind(("127.0.0.1", *p)).is_err())
                        .map(|(l, p)| format!("{} ({p})", l.name()))
                        .collect();
                    return Err(format!(
                        "postfix master exited ({status}) before listener {} (port {port}) \
                         was ready; ports now in use by another process: {taken:?} \
                         (the master logs its own startup errors to syslog only)\n{}",
                        l.name(),
                        self.logs()
                    ));
                }
                if Instant::now() >= deadline {
                    panic!(
                        "postfix listener {} on port {port} was not ready within \
                         {PF_START_TIMEOUT:?}\n{}",
                        l.name(),
                        self.logs()
                    );
                }
                thread::sleep(Duration::from_millis(25));
            }
        }
        Ok(())
    }

    /// The instance shared by every test of one binary: started on first use (with
    /// `make()`'s config), stopped and removed when the test process exits.
    pub fn shared(
        slot: &'static OnceLock<Postfix>,
        make: impl FnOnce() -> PostfixConfig,
    ) -> &'static Postfix {
        slot.get_or_init(|| {
            let pf = Postfix::start(&make());
            daemon::stop_group_at_exit(pf.master.pid());
            if let Some(d) = &pf.dovecot {
                dovecot::stop_at_exit(d);
            }
            daemon::remove_dir_at_exit(pf.dir.path().to_path_buf());
            pf
        })
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &PostfixConfig {
        &self.cfg
    }

    /// The address of listener `l`.
    pub fn addr(&self, l: PfListener) -> SocketAddr {
        let port = self
            .ports
            .iter()
            .find(|(x, _)| *x == l)
            .map(|(_, p)| *p)
            .expect("every listener has a port");
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A floodgate config in front of listener `l`: the client identity and upstream TLS
    /// that listener expects (XCLIENT, or PROXY v2 for [`PfListener::Proxy`]; STARTTLS for
    /// the STARTTLS listeners, implicit TLS for [`PfListener::Implicit`]), AUTH allowed on
    /// floodgate's plain listener so raw clients can authenticate without TLS.
    pub fn floodgate_config(&self, l: PfListener) -> FloodgateConfig {
        let (identity, tls) = match l {
            PfListener::Plain => ("xclient", "none"),
            PfListener::StartTls | PfListener::WrongName | PfListener::Untrusted => {
                ("xclient", "starttls")
            }
            PfListener::Implicit => ("xclient", "implicit"),
            PfListener::Proxy => ("proxy-v2", "none"),
        };
        FloodgateConfig::new(self.addr(l))
            .identity(identity)
            .upstream_tls(tls)
            .auth_without_tls(true)
    }

    /// The instance's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The maildir every message is delivered to.
    pub fn maildir(&self) -> PathBuf {
        self.dir.path().join("mail").join("inbox")
    }

    /// Postfix's log so far (`maillog_file`).
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&fs::read(self.dir.path().join("maillog")).unwrap_or_default())
            .into_owned()
    }

    /// Waits (bounded by [`DELIVERY_TIMEOUT`]) until a line of Postfix's log satisfies
    /// `pred` and returns it; panics with the logs, naming `what`, when time runs out.
    /// (Postfix writes its log through postlogd, a little after the fact.)
    pub fn wait_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        loop {
            if let Some(line) = self.log().lines().find(|l| pred(l)) {
                return line.to_string();
            }
            if Instant::now() >= deadline {
                panic!(
                    "no line in Postfix's log {what} within {DELIVERY_TIMEOUT:?}\n{}",
                    self.logs()
                );
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Postfix's log, master's stderr and Dovecot's logs, for failure messages.
    pub fn logs(&self) -> String {
        let stderr = fs::read_to_string(self.dir.path().join("master.stderr")).unwrap_or_default();
        let mut s = format!(
            "--- postfix maillog ({}) ---\n{}\n--- postfix master stderr ---\n{stderr}",
            self.dir.path().join("maillog").display(),
            self.log()
        );
        if let Some(d) = &self.dovecot {
            s.push('\n');
            s.push_str(&d.logs());
        }
        s
    }

    /// A guard that prints [`Postfix::logs`] if the test panics while it is alive (for a
    /// shared instance, which is never dropped).
    pub fn log_on_panic(&self) -> LogOnPanic<'_> {
        LogOnPanic(self)
    }

    /// Every message delivered so far, oldest file name first.
    pub fn messages(&self) -> Vec<Delivered> {
        let new = self.maildir().join("new");
        let mut paths: Vec<PathBuf> = match fs::read_dir(&new) {
            Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
            Err(_) => Vec::new(),
        };
        paths.sort();
        paths
            .into_iter()
            .filter_map(|path| {
                let raw = fs::read(&path).ok()?;
                Some(Delivered { path, raw })
            })
            .collect()
    }

    /// The delivered messages whose bytes contain `token`.
    pub fn messages_with(&self, token: &str) -> Vec<Delivered> {
        self.messages()
            .into_iter()
            .filter(|m| find(&m.raw, token.as_bytes()).is_some())
            .collect()
    }

    /// Waits (bounded by [`DELIVERY_TIMEOUT`]) until at least `n` delivered messages
    /// contain `token`; returns them. Panics with the log when time runs out.
    pub fn wait_messages(&self, token: &str, n: usize) -> Vec<Delivered> {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        loop {
            let got = self.messages_with(token);
            if got.len() >= n {
                return got;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} of {n} message(s) with {token:?} delivered within {DELIVERY_TIMEOUT:?}\n{}",
                    got.len(),
                    self.logs()
                );
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// The number of files in the queue (incoming, active, deferred, hold, maildrop).
    pub fn queued(&self) -> usize {
        fn count(p: &Path) -> usize {
            match fs::read_dir(p) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok())
                    .map(|e| {
                        let p = e.path();
                        if p.is_dir() {
                            count(&p)
                        } else {
                            1
                        }
                    })
                    .sum(),
                Err(_) => 0,
            }
        }
        let q = self.dir.path().join("queue");
        ["incoming", "active", "deferred", "hold", "maildrop"]
            .iter()
            .map(|d| count(&q.join(d)))
            .sum()
    }

    /// Waits (bounded) until Postfix's queue is empty: every message it accepted (every
    /// 250 after DATA a client has seen) is then in the maildir or was bounced (logged).
    /// Panics with the log if the queue does not empty.
    pub fn settle(&self) {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        while self.queued() > 0 {
            if Instant::now() >= deadline {
                panic!(
                    "postfix's queue still holds {} file(s) after {DELIVERY_TIMEOUT:?}\n{}",
                    self.queued(),
                    self.logs()
                );
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Stops Postfix's master and every daemon it started (Dovecot keeps running), as an
    /// outage of the smart host would: its ports refuse connections until
    /// [`Postfix::start_master`]. The queue and the maildir stay.
    pub fn stop_master(&mut self) {
        self.master.stop();
    }

    /// Starts the master again on the same configuration, queue and ports, and waits
    /// (bounded) until every listener is ready again. A master that exits at start (a
    /// port not yet free after the stop) is tried again, for at most [`PF_START_TIMEOUT`].
    pub fn start_master(&mut self) {
        let deadline = Instant::now() + PF_START_TIMEOUT;
        loop {
            self.master = spawn_master(self.dir.path());
            match self.wait_ready() {
                Ok(()) => return,
                Err(why) if Instant::now() >= deadline => panic!("{why}"),
                Err(_) => thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Stops Postfix and Dovecot now (also done on drop).
    pub fn stop(&mut self) {
        self.master.stop();
        if let Some(d) = self.dovecot.as_mut() {
            d.stop();
        }
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}

/// Prints the Postfix logs when dropped during a panic (see [`Postfix::log_on_panic`]).
pub struct LogOnPanic<'a>(&'a Postfix);

impl Drop for LogOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.0.logs());
        }
    }
}

/// A token unique in this test process, for telling apart the messages of tests that
/// share one Postfix; it ends in `z` so that no token is a prefix of another.
pub fn token(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{what}-{}-{}z",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Base64 of `s` (AUTH exchanges).
pub fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// Sends a small message with subject `tok` to `rcpt-TOK@dest.test` on an open session
/// (after EHLO, and AUTH if wanted); returns the reply codes to MAIL, RCPT, DATA and, if
/// DATA got 354, the end of data.
pub fn send_small_message(c: &mut RawClient, tok: &str) -> Vec<u16> {
    c.send(
        format!("MAIL FROM:<sender@client.test>\r\nRCPT TO:<rcpt-{tok}@dest.test>\r\nDATA\r\n")
            .as_bytes(),
    );
    let mut codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    if codes[2] == 354 {
        c.send(format!("Subject: {tok}\r\n\r\nhello from {tok}\r\n.\r\n").as_bytes());
        codes.push(c.reply().code);
    }
    codes
}

/// Starts Postfix's master in the foreground on the configuration in `root/conf`.
fn spawn_master(root: &Path) -> Daemon {
    let mut cmd = Command::new("/usr/lib/postfix/sbin/master");
    // -d: stay in the foreground with stdio kept (it does not fork or call setsid).
    cmd.arg("-d").arg("-c").arg(root.join("conf"));
    Daemon::spawn("postfix master", cmd, &root.join("master.stderr"))
}

/// Reads a greeting line (bounded); empty on error.
fn greeting(s: &mut TcpStream) -> String {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; 512];
    let mut got = Vec::new();
    while !got.ends_with(b"\n") && got.len() < 4096 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let _ = s.write_all(b"QUIT\r\n");
    String::from_utf8_lossy(&got).into_owned()
}
