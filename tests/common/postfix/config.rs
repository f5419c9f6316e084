//! The private Postfix's configuration: its listeners, main.cf and master.cf, and the
//! certificates its TLS listeners present.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use super::super::{ca_file, dev_cert, PASSWORD, USER};

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
    pub(super) fn overrides(self, tls: &Path) -> Vec<String> {
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
    /// floodgate as a milter ([`PostfixConfig::milters`]); none by default.
    pub milters: Option<Milters>,
    /// More main.cf lines, written last (so they override the lines above).
    pub main_cf: Vec<String>,
    /// floodgate as a policy service ([`PostfixConfig::policy_service`]); none by default.
    pub policy_service: Option<PolicyService>,
}

/// `check_policy_service` in `smtpd_recipient_restrictions` and
/// `smtpd_end_of_data_restrictions` (and `smtpd_data_restrictions` with `at_data`), with
/// its `default_action` and `timeout`.
#[derive(Debug, Clone)]
pub struct PolicyService {
    /// `unix:/path` or `inet:127.0.0.1:PORT`.
    pub address: String,
    /// What Postfix answers when the service is down or slow (`DUNNO`, `DEFER_IF_PERMIT`).
    pub default_action: String,
    /// Also asked at DATA (`smtpd_data_restrictions`), for limits at the `data` stage.
    pub at_data: bool,
}

/// The milter lines of main.cf: `smtpd_milters`, `non_smtpd_milters`,
/// `milter_default_action`, with `milter_protocol = 6`.
#[derive(Debug, Clone)]
pub struct Milters {
    /// `smtpd_milters` (`inet:127.0.0.1:PORT`, `unix:/path`; empty: none).
    pub smtpd: String,
    /// `non_smtpd_milters` (empty: none).
    pub non_smtpd: String,
    /// `milter_default_action`: what Postfix does when the milter is down or slow.
    pub default_action: String,
    /// `milter_connect_timeout`, `milter_command_timeout`, `milter_content_timeout`.
    pub timeout: String,
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
            milters: None,
            main_cf: Vec::new(),
            policy_service: None,
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

    /// floodgate as a milter: `smtpd` for `smtpd_milters`, `non_smtpd` for
    /// `non_smtpd_milters` (empty: none), Postfix's `milter_default_action` when the milter
    /// does not answer, and 10 s milter timeouts.
    pub fn milters(mut self, smtpd: &str, non_smtpd: &str, default_action: &str) -> Self {
        self.milters = Some(Milters {
            smtpd: smtpd.into(),
            non_smtpd: non_smtpd.into(),
            default_action: default_action.into(),
            timeout: "10s".into(),
        });
        self
    }

    /// floodgate as Postfix's policy service at `address`, asked at RCPT and END-OF-MESSAGE
    /// (the two lists the book's policy page names), with `default_action` when it does not
    /// answer (10 s timeout).
    pub fn policy_service(mut self, address: &str, default_action: &str) -> Self {
        self.policy_service = Some(PolicyService {
            address: address.into(),
            default_action: default_action.into(),
            at_data: false,
        });
        self
    }

    /// The policy service of [`PostfixConfig::policy_service`] asked at DATA too.
    pub fn policy_at_data(mut self) -> Self {
        if let Some(p) = &mut self.policy_service {
            p.at_data = true;
        }
        self
    }

    /// Adds a main.cf line (`key = value`).
    pub fn main_cf(mut self, line: &str) -> Self {
        self.main_cf.push(line.into());
        self
    }

    /// main.cf for an instance rooted at `dir`.
    pub(super) fn main_cf_text(&self, dir: &Path, owner: (u32, u32)) -> String {
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
        if let Some(m) = &self.milters {
            t.push_str(&format!(
                "smtpd_milters = {}\n\
                 non_smtpd_milters = {}\n\
                 milter_default_action = {}\n\
                 milter_protocol = 6\n\
                 milter_connect_timeout = {t}\n\
                 milter_command_timeout = {t}\n\
                 milter_content_timeout = {t}\n",
                m.smtpd,
                m.non_smtpd,
                m.default_action,
                t = m.timeout
            ));
        }
        if let Some(p) = &self.policy_service {
            let check = format!(
                "check_policy_service {{ {}, default_action={}, timeout=10s }}",
                p.address, p.default_action
            );
            t.push_str(&format!(
                "smtpd_recipient_restrictions = {check}\n\
                 smtpd_end_of_data_restrictions = {check}\n"
            ));
            if p.at_data {
                t.push_str(&format!("smtpd_data_restrictions = {check}\n"));
            }
        }
        for line in &self.main_cf {
            t.push_str(line);
            t.push('\n');
        }
        t
    }
}

/// master.cf: one smtpd per listener, then Postfix's own services (none chrooted).
pub(super) fn master_cf_text(ports: &[(PfListener, u16)], tls: &Path) -> String {
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
pub(super) fn postfix_owner() -> (u32, u32) {
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
pub(super) fn write_certs(tls: &Path) {
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
