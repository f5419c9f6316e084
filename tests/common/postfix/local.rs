//! Mail handed to the private Postfix's `sendmail` by a local user, as a web application
//! or a cron job hands it: without `-f`, the envelope sender is the user's login at
//! `$myorigin`, and `non_smtpd_milters` see it.
//!
//! The user runs `sendmail` with the private config directory (`MAIL_CONFIG`). Postfix's
//! set-group-id `postdrop` trusts another config directory from an unprivileged caller
//! only when the default `main.cf` lists it (`alternate_config_directories`); a caller
//! whose real group is already `postdrop` is not such a caller. So the user runs with
//! `postdrop` as its group: Postfix records its user id all the same.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Postfix;

/// A local user of this machine (from /etc/passwd).
#[derive(Debug, Clone)]
pub struct LocalUser {
    /// Its name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
}

/// The local user `name` (an existing system user such as `nobody` or `daemon`).
pub fn local_user(name: &str) -> LocalUser {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let uid = passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name) && f.len() > 3).then(|| f[2].parse().ok())?
        })
        .unwrap_or_else(|| panic!("no user {name} in /etc/passwd"));
    LocalUser {
        name: name.into(),
        uid,
    }
}

/// The gid of the `postdrop` group.
fn postdrop_gid() -> u32 {
    let group = std::fs::read_to_string("/etc/group").expect("read /etc/group");
    group
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postdrop") && f.len() > 2).then(|| f[2].parse().ok())?
        })
        .expect("no postdrop group: is Debian's postfix package installed?")
}

impl Postfix {
    /// `user` hands a message with subject `subject` to `to` to `sendmail`, with `-f from`
    /// when given (bounded: 30 s); panics with sendmail's output when it fails.
    pub fn sendmail_as(&self, user: &LocalUser, from: Option<&str>, to: &str, subject: &str) {
        let mut cmd = Command::new("/usr/sbin/sendmail");
        if let Some(from) = from {
            cmd.arg("-f").arg(from);
        }
        // With a uid to change to, root's supplementary groups are dropped first (std).
        let mut child = cmd
            .arg("--")
            .arg(to)
            .env("MAIL_CONFIG", self.dir().join("conf"))
            .current_dir("/")
            .uid(user.uid)
            .gid(postdrop_gid())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sendmail");
        let text = format!("To: {to}\nSubject: {subject}\n\nhello from {subject}\n");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to sendmail");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait sendmail") {
                let out = child.wait_with_output().expect("sendmail output");
                assert!(
                    status.success(),
                    "sendmail as {} failed ({status}):\n{}{}",
                    user.name,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sendmail as {} did not end within 30 s",
                user.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
