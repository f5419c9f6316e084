//! A private Dovecot that does nothing but SASL for a private Postfix: no mail protocols,
//! its own base_dir, state_dir and log in the caller's directory, users from a
//! `passwd-file` with plain-text passwords (so PLAIN, LOGIN and CRAM-MD5 all work), and
//! the authentication socket Postfix's `smtpd_sasl_path` points at.
//!
//! Started in the foreground (`dovecot -F -c FILE`) in its own process group; stopped by
//! signalling that group (see [`super::daemon`]).

use std::fs;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::daemon::{self, Daemon};

/// The Dovecot binary (`DOVECOT` overrides; `.ci/install.sh` installs `dovecot-core`).
fn dovecot_bin() -> String {
    std::env::var("DOVECOT").unwrap_or_else(|_| "/usr/sbin/dovecot".into())
}

/// A running Dovecot auth service.
pub struct Dovecot {
    daemon: Daemon,
    dir: PathBuf,
    socket: PathBuf,
}

impl Dovecot {
    /// Writes `dir/dovecot.conf` and `dir/passwd` (one `user:{PLAIN}password` line per
    /// entry of `users`), starts Dovecot and waits (bounded) until its auth socket
    /// `socket` accepts connections. `dir` must exist.
    pub fn start(dir: &Path, socket: &Path, users: &[(&str, &str)]) -> Dovecot {
        let bin = dovecot_bin();
        assert!(
            Path::new(&bin).exists(),
            "{bin} is missing: the smart-host tests need Dovecot for SASL \
             (run .ci/install.sh, which installs dovecot-core, or set DOVECOT)"
        );
        let passwd = dir.join("passwd");
        let lines: String = users
            .iter()
            .map(|(u, p)| format!("{u}:{{PLAIN}}{p}\n"))
            .collect();
        fs::write(&passwd, lines).expect("write dovecot passwd");
        let log = dir.join("dovecot.log");
        let conf = dir.join("dovecot.conf");
        // Unique per process and directory: Dovecot refuses two instances with one name.
        let instance = format!(
            "fg-{}-{}",
            std::process::id(),
            dir.file_name().and_then(|n| n.to_str()).unwrap_or("x")
        );
        fs::write(
            &conf,
            format!(
                "# written by tests/common/dovecot.rs: SASL only, for a private Postfix\n\
                 base_dir = {run}\n\
                 state_dir = {state}\n\
                 instance_name = {instance}\n\
                 protocols =\n\
                 ssl = no\n\
                 log_path = {log}\n\
                 auth_mechanisms = plain login cram-md5\n\
                 disable_plaintext_auth = no\n\
                 passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {passwd}\n}}\n\
                 userdb {{\n  driver = static\n  args = uid=postfix gid=postfix home=/nonexistent\n}}\n\
                 service auth {{\n  unix_listener {socket} {{\n    mode = 0666\n  }}\n}}\n",
                run = dir.join("run").display(),
                state = dir.join("state").display(),
                log = log.display(),
                passwd = passwd.display(),
                socket = socket.display(),
            ),
        )
        .expect("write dovecot.conf");
        let stderr = dir.join("dovecot.stderr");
        let mut cmd = Command::new(&bin);
        cmd.arg("-F").arg("-c").arg(&conf);
        let daemon = Daemon::spawn("dovecot", cmd, &stderr);
        let d = Dovecot {
            daemon,
            dir: dir.to_path_buf(),
            socket: socket.to_path_buf(),
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.daemon.exited() {
                panic!(
                    "dovecot exited ({status}) before its auth socket {} was ready\n{}",
                    self.socket.display(),
                    self.logs()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "dovecot's auth socket {} did not accept connections within 20 s\n{}",
                    self.socket.display(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The authentication socket (Postfix's `smtpd_sasl_path`).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Dovecot's process id (the leader of its process group).
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// Dovecot's log file and stderr, for failure messages.
    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!(
            "--- dovecot.log ---\n{}\n--- dovecot stderr ---\n{}",
            read("dovecot.log"),
            read("dovecot.stderr")
        )
    }

    /// Stops Dovecot (SIGTERM to its process group, SIGKILL after a bounded wait).
    pub fn stop(&mut self) {
        self.daemon.stop();
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Registers an already started Dovecot's process group to be stopped when the test
/// process exits (for instances shared by every test of a binary, never dropped).
pub(super) fn stop_at_exit(d: &Dovecot) {
    daemon::stop_group_at_exit(d.daemon.pid());
}
