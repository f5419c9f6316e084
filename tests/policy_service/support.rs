//! What the policy-service tests share: a socket directory Postfix's `smtpd` can reach, a
//! floodgate with only `[[policy_service]]`, Postfix sessions, and Postfix's queue.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::postfix::{b64, PfListener, Postfix, PostfixConfig};
use crate::common::{Floodgate, FloodgateConfig, RawClient, PASSWORD, USER};

/// The second account.
pub const SECOND: (&str, &str) = ("bob", "hunter22");

/// A directory for floodgate's socket that Postfix's `smtpd` (another user) can enter.
pub fn socket_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// A Postfix with SASL (alice and bob) asking the policy service at `socket`, with
/// `default_action` when it does not answer.
pub fn postfix(socket: &Path, default_action: &str) -> Postfix {
    let mut cfg = PostfixConfig::default()
        .sasl()
        .policy_service(&format!("unix:{}", socket.display()), default_action);
    cfg.users.push((SECOND.0.into(), SECOND.1.into()));
    Postfix::start(&cfg)
}

/// floodgate with no `[[listener]]`: one `[[policy_service]]` on `socket` (mode 0666 so
/// Postfix's user can connect), `[postfix]` naming `pf`'s config directory, and `limits`.
/// Waits (bounded) until the socket accepts connections.
pub fn start_service(pf: &Postfix, socket: &Path, limits: &str) -> Floodgate {
    let cfg: FloodgateConfig = pf
        .floodgate_config(PfListener::Plain)
        .listeners(Vec::new())
        .extra(&format!(
            "[[policy_service]]\nname = \"pf\"\nlisten = \"unix:{}\"\nmode = \"0666\"\n\n\
             [postfix]\nconfig_directory = \"{}\"\nledger = \"postfix-held\"\n\n{limits}",
            socket.display(),
            pf.dir().join("conf").display()
        ));
    let fg = Floodgate::start(&cfg);
    wait_listening(socket, &fg);
    fg
}

/// Waits (bounded: 10 s) until `socket` accepts a connection.
pub fn wait_listening(socket: &Path, fg: &Floodgate) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "the policy service did not listen on {} within 10 s\n{}",
            socket.display(),
            fg.stderr()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The socket's path in `dir`.
pub fn socket_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("policy.sock")
}

/// An authenticated session on Postfix's plain listener.
pub fn login(pf: &Postfix, user: &str, password: &str) -> RawClient {
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    c.ehlo("client.example");
    let r = c.cmd(&format!(
        "AUTH PLAIN {}",
        b64(&format!("\0{user}\0{password}"))
    ));
    assert_eq!(r.code, 235, "{r:?}");
    c
}

/// alice's session.
pub fn alice(pf: &Postfix) -> RawClient {
    login(pf, USER, PASSWORD)
}

/// MAIL, the RCPTs and, when one was accepted, the message: every reply code in order.
pub fn send(c: &mut RawClient, from: &str, rcpts: &[String], subject: &str) -> Vec<u16> {
    let mut codes = vec![c.cmd(&format!("MAIL FROM:<{from}>")).code];
    for r in rcpts {
        codes.push(c.cmd(&format!("RCPT TO:<{r}>")).code);
    }
    if codes[1..].contains(&250) {
        let r = c.cmd("DATA");
        codes.push(r.code);
        if r.code == 354 {
            c.send(
                format!("From: <{from}>\r\nSubject: {subject}\r\n\r\nhello {subject}\r\n.\r\n")
                    .as_bytes(),
            );
            codes.push(c.reply().code);
        }
    } else {
        c.cmd("RSET");
    }
    codes
}

/// One message of `postqueue -j`: its queue, id and sender.
#[derive(Debug)]
pub struct Queued {
    /// `queue_name`: `hold`, `active`, `deferred`, `incoming`, `maildrop`.
    pub queue_name: String,
    /// The queue id.
    pub id: String,
    /// The sender.
    pub sender: String,
}

/// Postfix's queue as `postqueue -c CONF -j` lists it.
pub fn queue(pf: &Postfix) -> Vec<Queued> {
    let out = Command::new("/usr/sbin/postqueue")
        .arg("-c")
        .arg(pf.dir().join("conf"))
        .arg("-j")
        .output()
        .expect("run postqueue -j");
    assert!(
        out.status.success(),
        "postqueue -j: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("postqueue -j line is JSON");
            Queued {
                queue_name: v["queue_name"].as_str().unwrap_or("").into(),
                id: v["queue_id"].as_str().unwrap_or("").into(),
                sender: v["sender"].as_str().unwrap_or("").into(),
            }
        })
        .collect()
}

/// Waits (bounded: 60 s) until `pred` holds of Postfix's queue; returns it.
pub fn wait_queue(pf: &Postfix, what: &str, pred: impl Fn(&[Queued]) -> bool) -> Vec<Queued> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let q = queue(pf);
        if pred(&q) {
            return q;
        }
        assert!(
            Instant::now() < deadline,
            "Postfix's queue never {what}: {q:?}\n{}",
            pf.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `floodgate VERB… --socket SOCKET` (bounded: 60 s).
pub fn verb(fg: &Floodgate, args: &[&str]) -> crate::common::Output {
    crate::common::run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(args)
            .arg("--socket")
            .arg(fg.admin_socket()),
        Duration::from_secs(60),
    )
}
