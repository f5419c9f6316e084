//! What the milter tests share: a free port for floodgate's milter, a floodgate with only
//! `[[milter]]`, and Postfix's hold queue as `postqueue -j` lists it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::postfix::{PfListener, Postfix};
use crate::common::{Floodgate, FloodgateConfig};

/// A free port on 127.0.0.1 for floodgate's milter (bound, then released).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// floodgate with no `[[listener]]`: one `[[milter]]` named `pf` on `port`, `[postfix]`
/// naming `pf`'s config directory (its ledger beside the config file), and `limits`.
/// Waits (bounded) until the milter accepts connections.
pub fn start_milter(pf: &Postfix, port: u16, limits: &str) -> Floodgate {
    let cfg: FloodgateConfig = pf
        .floodgate_config(PfListener::Plain)
        .listeners(Vec::new())
        .extra(&format!(
            "[[milter]]\nname = \"pf\"\nlisten = \"127.0.0.1:{port}\"\n\n\
             [postfix]\nconfig_directory = \"{}\"\nledger = \"postfix-held\"\n\n{limits}",
            pf.dir().join("conf").display()
        ));
    let fg = Floodgate::start(&cfg);
    wait_accepting(SocketAddr::from(([127, 0, 0, 1], port)), &fg);
    fg
}

/// Waits (bounded: 10 s) until `addr` accepts a connection.
pub fn wait_accepting(addr: SocketAddr, fg: &Floodgate) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "floodgate's milter did not listen on {addr} within 10 s\n{}",
            fg.stderr()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// One message of `postqueue -j`: its queue, id and recipients.
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
