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
//! unique token (in the subject, say) with [`Postfix::wait_messages`].

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::daemon::{self, Daemon};
use super::dovecot::{self, Dovecot};
use super::{ca_file, dev_cert, PASSWORD, USER};

/// How long Postfix and Dovecot may take to start.
const PF_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a message accepted by Postfix may take to reach the maildir.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Postfix's `postfix` command (`POSTFIX` overrides; `.ci/install.sh` installs `postfix`).
fn postfix_bin() -> String {
    std::env::var("POSTFIX").unwrap_or_else(|_| "/usr/sbin/postfix".into())
}

/// One listener of the private Postfix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PfListener {
    /// No TLS offered.
    Plain,
    /// STARTTLS with a certificate the dev CA signed for `localhost`.
    StartTls,
    /// TLS on connect with the same certificate.
    Implicit,
    /// STARTTLS with a dev-CA certificate for `wrong-name.test` only.
    WrongName,
    /// STARTTLS with a self-signed certificate for `localhost`.
    Untrusted,
    /// A PROXY v1/v2 header is expected before SMTP; STARTTLS offered.
    Proxy,
}

impl PfListener {
    /// Every listener, in master.cf order.
    pub const ALL: [PfListener; 6] = [
        PfListener::Plain,
        PfListener::StartTls,
        PfListener::Implicit,
        PfListener::WrongName,
        PfListener::Untrusted,
        PfListener::Proxy,
    ];

    /// The listener's `syslog_name` suffix (`postfix/NAME/smtpd` in the log).
    pub fn name(self) -> &'static str {
        match self {
            PfListener::Plain => "plain",
            PfListener::StartTls => "starttls",
            PfListener::Implicit => "implicit",
            PfListener::WrongName => "wrongname",
            PfListener::Untrusted => "untrusted",
            PfListener::Proxy => "proxy",
        }
    }

    /// The `-o` overrides of its master.cf line.
    fn overrides(self, tls: &Path) -> Vec<String> {
        let cert = |name: &str| {
            vec![
                format!(
                    "smtpd_tls_cert_file={}",
                    tls.join(format!("{name}.crt")).display()
                ),
                format!(
                    "smtpd_tls_key_file={}",
                    tls.join(format!("{name}.key")).display()
                ),
            ]
        };
        let mut o = vec![format!("syslog_name=postfix/{}", self.name())];
        match self {
            PfListener::Plain => o.push("smtpd_tls_security_level=none".into()),
            PfListener::StartTls => o.push("smtpd_tls_security_level=may".into()),
            PfListener::Implicit => {
                o.push("smtpd_tls_wrappermode=yes".into());
                o.push("smtpd_tls_security_level=encrypt".into());
            }
            PfListener::WrongName => {
                o.push("smtpd_tls_security_level=may".into());
                o.extend(cert("wrong-name"));
            }
            PfListener::Untrusted => {
                o.push("smtpd_tls_security_level=may".into());
                o.extend(cert("untrusted"));
            }
            PfListener::Proxy => {
                o.push("smtpd_upstream_proxy_protocol=haproxy".into());
                o.push("smtpd_tls_security_level=may".into());
            }
        }
        o
    }
}

/// How the private Postfix is configured.
#[derive(Debug, Clone)]
pub struct PostfixConfig {
    /// `myhostname` (named in the `Received:` headers Postfix adds).
    pub hostname: String,
    /// Start a private Dovecot and offer AUTH (`smtpd_sasl_type = dovecot`) on every
    /// listener, TLS or not (`smtpd_tls_auth_only = no`).
    pub sasl: bool,
    /// Dovecot's users and passwords (default: [`USER`] / [`PASSWORD`]).
    pub users: Vec<(String, String)>,
    /// `smtpd_authorized_xclient_hosts` (empty: XCLIENT is not authorised for anyone).
    pub xclient_hosts: String,
    /// `mynetworks` (empty by default: floodgate's address is not trusted to relay).
    pub mynetworks: String,
    /// `inet_protocols` (`all` by default; `ipv4` refuses an IPv6 XCLIENT ADDR).
    pub inet_protocols: String,
    /// `smtpd_forbid_bare_newline` when set (Postfix 3.7.11's default is `no`).
    pub forbid_bare_newline: Option<String>,
    /// `message_size_limit` when set (Postfix's default is 10240000).
    pub message_size_limit: Option<u64>,
    /// More main.cf lines, written last (so they override the lines above).
    pub main_cf: Vec<String>,
}

impl Default for PostfixConfig {
    fn default() -> Self {
        PostfixConfig {
            hostname: "smarthost.test".into(),
            sasl: false,
            users: vec![(USER.into(), PASSWORD.into())],
            xclient_hosts: "127.0.0.0/8, [::1]/128".into(),
            mynetworks: String::new(),
            inet_protocols: "all".into(),
            forbid_bare_newline: None,
            message_size_limit: None,
            main_cf: Vec::new(),
        }
    }
}

impl PostfixConfig {
    /// With Dovecot SASL.
    pub fn sasl(mut self) -> Self {
        self.sasl = true;
        self
    }

    /// Sets `smtpd_authorized_xclient_hosts` (`""`: nobody).
    pub fn xclient_hosts(mut self, hosts: &str) -> Self {
        self.xclient_hosts = hosts.into();
        self
    }

    /// Sets `mynetworks`.
    pub fn mynetworks(mut self, nets: &str) -> Self {
        self.mynetworks = nets.into();
        self
    }

    /// Sets `inet_protocols`.
    pub fn inet_protocols(mut self, protocols: &str) -> Self {
        self.inet_protocols = protocols.into();
        self
    }

    /// Sets `smtpd_forbid_bare_newline` (`yes`, `no`, `normalize` on newer Postfix).
    pub fn forbid_bare_newline(mut self, value: &str) -> Self {
        self.forbid_bare_newline = Some(value.into());
        self
    }

    /// Sets `message_size_limit`.
    pub fn message_size_limit(mut self, bytes: u64) -> Self {
        self.message_size_limit = Some(bytes);
        self
    }

    /// Adds a main.cf line (`key = value`).
    pub fn main_cf(mut self, line: &str) -> Self {
        self.main_cf.push(line.into());
        self
    }

    /// main.cf for an instance rooted at `dir`.
    fn main_cf_text(&self, dir: &Path, owner: (u32, u32)) -> String {
        let d = |p: &str| dir.join(p).display().to_string();
        let mut t = format!(
            "# written by tests/common/postfix.rs: a private smart host for floodgate's tests\n\
             compatibility_level = 3.6\n\
             queue_directory = {queue}\n\
             data_directory = {data}\n\
             maillog_file = {maillog}\n\
             maillog_file_prefixes = {root}\n\
             myhostname = {host}\n\
             mydomain = {host}\n\
             myorigin = $myhostname\n\
             mydestination =\n\
             relay_domains =\n\
             local_recipient_maps =\n\
             inet_interfaces = loopback-only\n\
             inet_protocols = {protocols}\n\
             mynetworks = {mynetworks}\n\
             smtpd_authorized_xclient_hosts = {xclient}\n\
             smtpd_relay_restrictions = permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination\n\
             virtual_mailbox_domains = static:all\n\
             virtual_mailbox_base = {mail}\n\
             virtual_mailbox_maps = static:inbox/\n\
             virtual_uid_maps = static:{uid}\n\
             virtual_gid_maps = static:{gid}\n\
             virtual_mailbox_limit = 0\n\
             default_transport = error:the test smart host delivers nothing outside\n\
             relay_transport = error:the test smart host delivers nothing outside\n\
             smtp_dns_support_level = disabled\n\
             biff = no\n\
             smtpd_error_sleep_time = 0\n\
             smtpd_soft_error_limit = 100\n\
             smtpd_hard_error_limit = 200\n\
             smtpd_junk_command_limit = 1000\n\
             smtpd_tls_cert_file = {tls}/upstream.crt\n\
             smtpd_tls_key_file = {tls}/upstream.key\n\
             smtpd_tls_security_level = none\n\
             smtpd_tls_received_header = yes\n\
             smtpd_tls_loglevel = 1\n\
             smtpd_sasl_authenticated_header = yes\n",
            queue = d("queue"),
            data = d("data"),
            maillog = d("maillog"),
            root = dir.display(),
            host = self.hostname,
            protocols = self.inet_protocols,
            mynetworks = self.mynetworks,
            xclient = self.xclient_hosts,
            mail = d("mail"),
            uid = owner.0,
            gid = owner.1,
            tls = d("tls"),
        );
        if self.sasl {
            t.push_str(&format!(
                "smtpd_sasl_auth_enable = yes\n\
                 smtpd_sasl_type = dovecot\n\
                 smtpd_sasl_path = {}\n\
                 smtpd_tls_auth_only = no\n",
                d("auth")
            ));
        }
        if let Some(v) = &self.forbid_bare_newline {
            t.push_str(&format!("smtpd_forbid_bare_newline = {v}\n"));
        }
        if let Some(n) = self.message_size_limit {
            t.push_str(&format!("message_size_limit = {n}\n"));
        }
        for line in &self.main_cf {
            t.push_str(line);
            t.push('\n');
        }
        t
    }
}

/// master.cf: one smtpd per listener, then Postfix's own services (none chrooted).
fn master_cf_text(ports: &[(PfListener, u16)], tls: &Path) -> String {
    let mut t = String::from("# written by tests/common/postfix.rs\n");
    for (l, port) in ports {
        t.push_str(&format!("127.0.0.1:{port} inet n - n - - smtpd\n"));
        for o in l.overrides(tls) {
            t.push_str(&format!("  -o {o}\n"));
        }
    }
    t.push_str(
        "pickup    unix  n - n 60    1 pickup\n\
         cleanup   unix  n - n -     0 cleanup\n\
         qmgr      unix  n - n 300   1 qmgr\n\
         tlsmgr    unix  - - n 1000? 1 tlsmgr\n\
         rewrite   unix  - - n -     - trivial-rewrite\n\
         bounce    unix  - - n -     0 bounce\n\
         defer     unix  - - n -     0 bounce\n\
         trace     unix  - - n -     0 bounce\n\
         verify    unix  - - n -     1 verify\n\
         flush     unix  n - n 1000? 0 flush\n\
         proxymap  unix  - - n -     - proxymap\n\
         proxywrite unix - - n -     1 proxymap\n\
         smtp      unix  - - n -     - smtp\n\
         relay     unix  - - n -     - smtp\n\
         showq     unix  n - n -     - showq\n\
         error     unix  - - n -     - error\n\
         retry     unix  - - n -     - error\n\
         discard   unix  - - n -     - discard\n\
         local     unix  - n n -     - local\n\
         virtual   unix  - n n -     - virtual\n\
         lmtp      unix  - - n -     - lmtp\n\
         anvil     unix  - - n -     1 anvil\n\
         scache    unix  - - n -     1 scache\n\
         postlog   unix-dgram n - n - 1 postlogd\n",
    );
    t
}

/// The uid and gid of the `postfix` user (from /etc/passwd).
fn postfix_owner() -> (u32, u32) {
    let passwd = fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postfix") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .expect("no `postfix` user in /etc/passwd: is Debian's postfix package installed? (run .ci/install.sh)")
}

/// Runs `openssl` with `args` in `dir`, panicking with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the listeners' certificates into `tls`: the dev upstream certificate, one signed
/// by the dev CA for the wrong name, and a self-signed one from an unknown CA.
fn write_certs(tls: &Path) {
    fs::create_dir_all(tls).expect("mkdir tls");
    fs::copy(dev_cert("upstream.crt"), tls.join("upstream.crt")).expect("copy upstream.crt");
    fs::copy(dev_cert("upstream.key"), tls.join("upstream.key")).expect("copy upstream.key");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    // Signed by the dev CA, but for a name floodgate does not ask for.
    let mut args = vec!["req", "-new"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "wrong-name.key",
        "-out",
        "wrong-name.csr",
        "-subj",
        "/CN=wrong-name.test",
    ]);
    openssl(tls, &args);
    fs::write(
        tls.join("wrong-name.ext"),
        "subjectAltName=DNS:wrong-name.test\n",
    )
    .expect("ext");
    let ca = ca_file();
    let ca_key = dev_cert("ca.key");
    openssl(
        tls,
        &[
            "x509",
            "-req",
            "-in",
            "wrong-name.csr",
            "-CA",
            ca.to_str().expect("utf-8 path"),
            "-CAkey",
            ca_key.to_str().expect("utf-8 path"),
            "-set_serial",
            "4242",
            "-days",
            "7",
            "-extfile",
            "wrong-name.ext",
            "-out",
            "wrong-name.crt",
        ],
    );
    // The right names, but self-signed: no CA floodgate trusts.
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "untrusted.key",
        "-out",
        "untrusted.crt",
        "-days",
        "7",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1",
    ]);
    openssl(tls, &args);
}

/// One free port on 127.0.0.1 (bound, then released for Postfix to bind).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// A message Postfix delivered to the maildir.
#[derive(Clone)]
pub struct Delivered {
    /// The maildir file.
    pub path: PathBuf,
    /// The file's bytes (Postfix's `Return-Path:`, `Delivered-To:` and `Received:`
    /// headers first, line ends as LF).
    pub raw: Vec<u8>,
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:\n{}", self.path.display(), self.head())
    }
}

impl Delivered {
    /// The whole message as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// The header section as text (up to the first empty line).
    pub fn head(&self) -> String {
        let end = find(&self.raw, b"\n\n").unwrap_or(self.raw.len());
        String::from_utf8_lossy(&self.raw[..end]).into_owned()
    }

    /// The body (after the first empty line).
    pub fn body(&self) -> &[u8] {
        match find(&self.raw, b"\n\n") {
            Some(i) => &self.raw[i + 2..],
            None => &[],
        }
    }

    /// The values of every header called `name` (case-insensitive), unfolded, in order.
    pub fn headers(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut current: Option<String> = None;
        for line in self.head().lines() {
            if line.starts_with([' ', '\t']) {
                if let Some(c) = current.as_mut() {
                    c.push(' ');
                    c.push_str(line.trim());
                }
                continue;
            }
            if let Some(c) = current.take() {
                out.push(c);
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case(name) {
                    current = Some(v.trim().to_string());
                }
            }
        }
        out.extend(current);
        out
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers(name).into_iter().next()
    }

    /// The `Received:` header Postfix's smtpd added (the first one in the file).
    pub fn postfix_received(&self) -> String {
        self.header("Received")
            .unwrap_or_else(|| panic!("no Received header in {self:?}"))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
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
    /// logs when either cannot start; a port taken meanwhile is retried with new ports.
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

    /// One start attempt; `Err` only when a listener's port was taken (worth retrying).
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

        let mut cmd = Command::new("/usr/lib/postfix/sbin/master");
        // -d: stay in the foreground with stdio kept (it does not fork or call setsid).
        cmd.arg("-d").arg("-c").arg(&conf);
        let master = Daemon::spawn("postfix master", cmd, &root.join("master.stderr"));
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
                    let why = format!(
                        "postfix master exited ({status}) before listener {} (port {port}) \
                         was ready\n{}",
                        l.name(),
                        self.logs()
                    );
                    if why.contains("Address already in use") {
                        return Err(why);
                    }
                    panic!("{why}");
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
