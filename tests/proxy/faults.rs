//! Faults around floodgate, each with a legitimate session that must still work:
//!
//! * an upstream that misbehaves per session (picked by the MAIL sender): non-SMTP bytes,
//!   a multi-line reply with mixed codes, a multi-line reply that never ends, an over-long
//!   reply line, an answer slower than `[timeouts] upstream_reply`, a close at MAIL, a reset
//!   in the middle of DATA, garbage or a late answer after the end of data;
//! * the state snapshot cannot be written: disk full (`/dev/full`) and a file the kernel
//!   refuses to open for writing even for root (a sysfs attribute);
//! * Redis hanging (SIGSTOP) beyond the per-decision timeout.
//!
//! Each shows: no panic, no hang (every read is bounded), nothing relayed twice, nothing
//! acknowledged that upstream did not accept.

use crate::common;
use crate::common::redis as redis_server;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;

// ---------------------------------------------------------------------------------------
// A misbehaving upstream
// ---------------------------------------------------------------------------------------

/// One message the faulty upstream acknowledged with 250.
#[derive(Debug, Clone)]
struct Accepted {
    sender: String,
    rcpts: Vec<String>,
}

/// An SMTP upstream on 127.0.0.1 that behaves well except for the fault named by the
/// local part of the MAIL sender.
struct FaultyUpstream {
    addr: SocketAddr,
    accepted: Arc<Mutex<Vec<Accepted>>>,
}

impl FaultyUpstream {
    fn start() -> FaultyUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let acc = accepted.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let acc = acc.clone();
                thread::spawn(move || {
                    let _ = serve(conn, &acc);
                });
            }
        });
        FaultyUpstream { addr, accepted }
    }

    fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock().expect("accepted").clone()
    }
}

/// How long the slow faults wait: well past floodgate's `upstream_reply` of 1 s.
const SLOW: Duration = Duration::from_secs(4);

fn serve(conn: TcpStream, accepted: &Mutex<Vec<Accepted>>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    w.write_all(b"220 faulty.test ESMTP\r\n")?;
    let mut tag = String::new();
    let mut sender = String::new();
    let mut rcpts = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let verb = text.split(' ').next().unwrap_or("").to_ascii_uppercase();
        match verb.as_str() {
            "EHLO" => w.write_all(
                b"250-faulty.test\r\n250-PIPELINING\r\n250-ENHANCEDSTATUSCODES\r\n250 8BITMIME\r\n",
            )?,
            "MAIL" => {
                sender = text
                    .split(['<', '>'])
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                tag = sender.split('@').next().unwrap_or_default().to_string();
                rcpts.clear();
                match tag.as_str() {
                    "garbage" => w.write_all(b"\x00\xff\xfeHTTP/1.1 400 Bad Request\r\n\r\n")?,
                    "mixed" => w.write_all(b"250-first line\r\n550 5.0.0 second line\r\n")?,
                    "unterminated" => w.write_all(b"250-more to come\r\n")?,
                    "longline" => {
                        let mut l = b"250 ".to_vec();
                        l.resize(100_000, b'x');
                        w.write_all(&l)?;
                    }
                    "slow" => {
                        thread::sleep(SLOW);
                        w.write_all(b"250 2.1.0 Ok, eventually\r\n")?;
                    }
                    "closemail" => return Ok(()),
                    _ => w.write_all(b"250 2.1.0 Ok\r\n")?,
                }
            }
            "RCPT" => {
                rcpts.push(
                    text.split(['<', '>'])
                        .nth(1)
                        .unwrap_or_default()
                        .to_string(),
                );
                w.write_all(b"250 2.1.5 Ok\r\n")?;
            }
            "DATA" => {
                w.write_all(b"354 go ahead\r\n")?;
                let mut seen = 0;
                loop {
                    line.clear();
                    if r.read_until(b'\n', &mut line)? == 0 {
                        return Ok(());
                    }
                    seen += line.len();
                    if tag == "diemid" && seen > 100 {
                        // Drop the connection with most of the message unread (a reset).
                        return Ok(());
                    }
                    if line == b".\r\n" {
                        break;
                    }
                }
                match tag.as_str() {
                    "garbagedata" => w.write_all(b"\x00\x01garbage\r\n")?,
                    "slowdata" => {
                        // Accepted, but too late: floodgate has given up (the classic
                        // duplicate-delivery window of RFC 1047).
                        thread::sleep(SLOW);
                        let _ = w.write_all(b"250 2.0.0 queued late\r\n");
                    }
                    _ => {
                        accepted.lock().expect("accepted").push(Accepted {
                            sender: sender.clone(),
                            rcpts: rcpts.clone(),
                        });
                        w.write_all(b"250 2.0.0 queued\r\n")?;
                    }
                }
            }
            "RSET" | "NOOP" | "HELO" => w.write_all(b"250 2.0.0 Ok\r\n")?,
            "QUIT" => {
                w.write_all(b"221 2.0.0 Bye\r\n")?;
                return Ok(());
            }
            _ => w.write_all(b"502 5.5.1 Not here\r\n")?,
        }
    }
}

/// The first reply that is not 2xx/354 in a one-message session from `tag@client.test`,
/// or the final reply; then the connection must close after a 421.
fn attempt(addr: SocketAddr, tag: &str) -> Reply {
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo(&format!("{tag}.client.test"));
    let steps = [
        format!("MAIL FROM:<{tag}@client.test>"),
        format!("RCPT TO:<{tag}-rcpt@dest.test>"),
        "DATA".to_string(),
    ];
    for s in &steps {
        let r = c.cmd(s);
        if r.class() >= 4 {
            return closes_after(c, r);
        }
    }
    let mut body = format!("Subject: {tag}\r\n\r\n").into_bytes();
    for _ in 0..40 {
        body.extend_from_slice(b"a line of the message body, long enough to cross 100 octets\r\n");
    }
    body.extend_from_slice(b".\r\n");
    c.send(&body);
    let r = c.reply();
    if r.class() >= 4 {
        return closes_after(c, r);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    r
}

fn closes_after(mut c: RawClient, r: Reply) -> Reply {
    if r.code == 421 {
        let rest = c.drain_until_close();
        assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
    }
    r
}

#[test]
fn a_misbehaving_upstream_costs_only_that_session_a_421() {
    let up = FaultyUpstream::start();
    let fg = Floodgate::start(
        &FloodgateConfig::new(up.addr)
            .listeners(vec![ListenerSpec::new("plain", "none")])
            .log_level("info")
            .timeout("upstream_reply", "1s"),
    );
    let addr = fg.addr("plain");
    // An honest session spans every fault.
    let mut honest = RawClient::connect_greeted(addr);
    honest.ehlo("honest.client.test");
    assert_eq!(honest.cmd("MAIL FROM:<honest@client.test>").code, 250);
    assert_eq!(honest.cmd("RCPT TO:<h@dest.test>").code, 250);

    let faults = [
        "garbage",
        "mixed",
        "unterminated",
        "longline",
        "slow",
        "closemail",
        "diemid",
        "garbagedata",
        "slowdata",
    ];
    let mut answers = BTreeMap::new();
    for tag in faults {
        let r = attempt(addr, tag);
        eprintln!("{tag}: {}", r.text());
        assert_eq!(
            (r.code, r.enhanced().as_deref()),
            (421, Some("4.4.2")),
            "{tag}: want 421 4.4.2, got {r:?}"
        );
        answers.insert(tag, r.text());
    }
    // Timeouts say so; broken connections and garbage say the connection was lost.
    for tag in ["unterminated", "slow", "slowdata"] {
        assert!(
            answers[tag].contains("did not answer"),
            "{tag}: {}",
            answers[tag]
        );
    }
    for tag in [
        "garbage",
        "mixed",
        "longline",
        "closemail",
        "diemid",
        "garbagedata",
    ] {
        assert!(
            answers[tag].contains("connection lost"),
            "{tag}: {}",
            answers[tag]
        );
    }
    // A healthy session after all that, and the honest one that waited.
    assert_eq!(attempt(addr, "after").code, 250);
    assert_eq!(honest.cmd("DATA").code, 354);
    honest.send(b"Subject: honest\r\n\r\nstill here\r\n.\r\n");
    assert_eq!(honest.reply().code, 250);
    assert_eq!(honest.cmd("QUIT").code, 221);

    let acc = up.accepted();
    let senders: Vec<&str> = acc.iter().map(|a| a.sender.as_str()).collect();
    assert_eq!(
        senders,
        ["after@client.test", "honest@client.test"],
        "upstream acknowledged exactly these, once each"
    );
    assert_eq!(acc[1].rcpts, ["h@dest.test"]);
    fg.wait_stderr("upstream failed", Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------
// State snapshot faults
// ---------------------------------------------------------------------------------------

/// A floodgate with a memory store saved to `dir/state` every 200 ms and a limit that
/// counts messages (so every message changes the state).
fn snapshot_floodgate(rec: &Recorder, dir: &Path) -> Floodgate {
    let extra = format!(
        "[store]\nbackend = \"memory\"\npath = \"{}\"\nsnapshot_interval = \"200ms\"\n\n\
         [[limit]]\nname = \"per-ip\"\ncount = \"messages\"\nrate = \"1000 / 1h\"\n\
         burst = \"1000\"\naction = \"defer\"\n",
        dir.join("state").display()
    );
    Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .listeners(vec![ListenerSpec::new("plain", "none")])
            .log_level("info")
            .extra(&extra),
    )
}

fn send_one(addr: SocketAddr, tag: &str) {
    let r = attempt(addr, tag);
    assert_eq!(r.code, 250, "{tag}: {r:?}");
}

/// Records in a snapshot file, loaded the way floodgate loads it at start.
fn snapshot_records(path: &Path) -> Result<usize, String> {
    let store = floodgate::store::MemoryStore::new(floodgate::store::MemoryConfig::default());
    store.load_snapshot(path).map_err(|e| e.to_string())
}

/// Keeps `link` a symlink to `target` (floodgate removes its temporary file after a failed
/// write) until dropped; then removes it.
struct Fault {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
    link: PathBuf,
}

impl Fault {
    fn hold(link: PathBuf, target: &'static str) -> Fault {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let l = link.clone();
        let handle = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if std::fs::symlink_metadata(&l).is_err() {
                    let _ = std::os::unix::fs::symlink(target, &l);
                }
                thread::sleep(Duration::from_millis(2));
            }
        });
        Fault {
            stop,
            handle: Some(handle),
            link,
        }
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.link);
    }
}

/// The shared scenario: a good snapshot, then `target` in place of floodgate's temporary
/// file: saves fail with `error`, logged; the good snapshot stays; sessions go on; once the
/// fault is gone the next save holds the new state.
fn snapshot_cannot_be_written(target: &'static str, error: &str) {
    let rec = Recorder::plain();
    let dir = tempfile::TempDir::new().expect("tempdir");
    let state = dir.path().join("state");
    let fg = snapshot_floodgate(&rec, dir.path());
    let addr = fg.addr("plain");
    send_one(addr, "before");
    let good = wait_until(Duration::from_secs(10), "a snapshot with state", || {
        snapshot_records(&state).ok().filter(|n| *n > 0)
    });
    let before = std::fs::read(&state).expect("snapshot");

    // floodgate writes `.state.tmp.<pid>` next to the state file, then renames it.
    let tmp = dir.path().join(format!(".state.tmp.{}", fg.pid()));
    let fault = Fault::hold(tmp.clone(), target);
    fg.wait_stderr_count("periodic state snapshot failed", 2, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("periodic state snapshot failed"))
        .expect("failure line");
    assert!(
        line.contains(error) && line.contains(&state.display().to_string()),
        "the failure names the file and the reason: {line}"
    );
    // The previous snapshot is intact, and floodgate keeps serving.
    assert_eq!(std::fs::read(&state).expect("snapshot"), before);
    send_one(addr, "during");
    assert_eq!(snapshot_records(&state), Ok(good));
    fg.wait_stderr_count("periodic state snapshot failed", 4, Duration::from_secs(10));
    assert_eq!(std::fs::read(&state).expect("snapshot"), before);

    drop(fault);
    // The next save after the fault holds the new state (the message sent during it).
    wait_until(
        Duration::from_secs(10),
        "a snapshot after the fault",
        || {
            let now = std::fs::read(&state).ok()?;
            (now != before).then_some(())
        },
    );
    assert!(snapshot_records(&state).is_ok());
    assert!(
        std::fs::symlink_metadata(&tmp).is_err(),
        "temporary file left behind"
    );
    send_one(addr, "after");
    assert!(["before", "during", "after"].iter().all(|t| rec
        .messages()
        .iter()
        .filter(|m| m.mail_from == format!("{t}@client.test"))
        .count()
        == 1));
}

#[test]
fn disk_full_snapshot_keeps_the_old_one_and_recovers() {
    // Writes to /dev/full fail with ENOSPC, as on a full disk.
    snapshot_cannot_be_written("/dev/full", "No space left on device");
}

#[test]
fn unwritable_snapshot_keeps_the_old_one_and_recovers() {
    // We run as root, so file modes do not stop writes. A sysfs attribute without a write
    // handler is refused by the kernel even for root (EACCES), like a read-only file.
    let target = "/sys/kernel/notes";
    if std::fs::metadata(target).is_err() {
        eprintln!("note: {target} is missing here (no sysfs); skipping");
        return;
    }
    snapshot_cannot_be_written(target, "Permission denied");
}

// ---------------------------------------------------------------------------------------
// Redis hanging
// ---------------------------------------------------------------------------------------

/// Continues a SIGSTOPped process when dropped (so a failing test never leaves it frozen).
struct Frozen(u32);

impl Frozen {
    fn freeze(pid: u32) -> Frozen {
        let ok = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot SIGSTOP redis-server {pid}");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn redis_pid(port: u16) -> u32 {
    let info = redis_server::raw_command(port, "INFO server").expect("INFO server");
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no process_id in {info}"))
}

#[test]
fn redis_hanging_beyond_the_decision_timeout() {
    let redis = redis_server::RedisServer::start();
    let rec = Recorder::plain();
    let start = |mode: &str| {
        let extra = format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"200ms\"\n\
             connect_timeout = \"500ms\"\nprobe_interval = \"100ms\"\nfailure_mode = \"{mode}\"\n\n\
             [[limit]]\nname = \"per-ip\"\ncount = \"messages\"\nrate = \"1000 / 1h\"\n\
             burst = \"1000\"\naction = \"defer\"\n",
            redis.url()
        );
        Floodgate::start(
            &FloodgateConfig::new(rec.addr())
                .listeners(vec![ListenerSpec::new("plain", "none")])
                .log_level("info")
                .extra(&extra),
        )
    };
    let closed = start("closed");
    let local = start("local");
    send_one(closed.addr("plain"), "c-before");
    send_one(local.addr("plain"), "l-before");

    let frozen = Frozen::freeze(redis_pid(redis.port));
    // closed: the MAIL is deferred with 451 4.3.0 after the decision timeout, no hang.
    let mut c = RawClient::connect_greeted(closed.addr("plain"));
    c.ehlo("c-during.client.test");
    let r = c.cmd("MAIL FROM:<c-during@client.test>");
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (451, Some("4.3.0")),
        "closed mode with Redis hung: {r:?}"
    );
    assert_eq!(c.cmd("QUIT").code, 221);
    // local: the legitimate session is decided in memory and delivered.
    send_one(local.addr("plain"), "l-during");
    for fg in [&closed, &local] {
        fg.wait_stderr("Redis unavailable", Duration::from_secs(10));
    }

    drop(frozen);
    // Once Redis answers again, closed mode relays again (bounded retries while the
    // store notices).
    let mut n = 0;
    wait_until(
        Duration::from_secs(20),
        "closed mode to relay again",
        || {
            n += 1;
            let tag = format!("c-after{n}");
            (attempt(closed.addr("plain"), &tag).code == 250).then_some(())
        },
    );
    let senders: Vec<String> = rec.messages().iter().map(|m| m.mail_from.clone()).collect();
    assert!(!senders.iter().any(|s| s == "c-during@client.test"));
    for tag in ["c-before", "l-before", "l-during"] {
        let s = format!("{tag}@client.test");
        assert_eq!(
            senders.iter().filter(|x| **x == s).count(),
            1,
            "{senders:?}"
        );
    }
}
