//! The log queue through the real binary: with room, every line of every session is
//! written; with a queue of one line and a stalled stderr, mail still flows, the lines that
//! did not fit are dropped, and `floodgate_log_lines_dropped_total` counts each one (lines
//! seen + lines dropped = lines produced). What is queued at exit is written.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;

/// Sessions driven per run; each logs a `message` and a `session` line.
const SESSIONS: usize = 40;

/// A pipe whose kernel buffer holds one page, so a reader that does not read stalls the
/// writer after a few lines. Returns (read end, write end).
fn small_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: F_SETPIPE_SZ on a pipe descriptor we own.
    let size = unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 4096) };
    assert!(size >= 4096, "F_SETPIPE_SZ failed");
    (r, w)
}

/// floodgate running with its stderr on a pipe that the test reads only when told to.
struct Running {
    child: Child,
    listen: SocketAddr,
    metrics: SocketAddr,
    stderr: Arc<Mutex<Vec<u8>>>,
    start_reading: Option<mpsc::Sender<()>>,
}

impl Running {
    fn start(
        upstream: SocketAddr,
        queue: usize,
        read_stderr_now: bool,
    ) -> (Running, tempfile::TempDir) {
        let dir = tempfile::TempDir::new().unwrap();
        let metrics = closed_port();
        let cfg = FloodgateConfig::new(upstream)
            .listeners(vec![ListenerSpec::new("plain", "none")])
            .log_level("info")
            .extra(&format!("[metrics]\naddress = \"{metrics}\"\n"));
        let text = cfg
            .toml()
            .replace("\n[log]\n", &format!("\n[log]\nqueue = {queue}\n"));
        assert!(text.contains(&format!("queue = {queue}")));
        let path = dir.path().join("floodgate.toml");
        std::fs::write(&path, text).unwrap();
        let (r, w) = small_pipe();
        let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["run", "--config"])
            .arg(&path)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(w))
            .spawn()
            .expect("start floodgate");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (go, wait_go) = mpsc::channel::<()>();
        {
            let stderr = stderr.clone();
            thread::spawn(move || {
                if wait_go.recv().is_err() {
                    return;
                }
                let mut r = std::fs::File::from(r);
                let mut buf = [0u8; 8192];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    stderr.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
        if read_stderr_now {
            go.send(()).unwrap();
        }
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut listen = None;
        let mut line = String::new();
        while listen.is_none() {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "floodgate exited");
            listen = parse_listening(&line).map(|l| l.addr);
        }
        // The rest of stdout is drained so floodgate never blocks on it.
        thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        let run = Running {
            child,
            listen: listen.unwrap(),
            metrics,
            stderr,
            start_reading: (!read_stderr_now).then_some(go),
        };
        (run, dir)
    }

    fn read_stderr(&mut self) {
        if let Some(go) = self.start_reading.take() {
            go.send(()).unwrap();
        }
    }

    fn log(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    fn metric(&self, name: &str) -> u64 {
        let mut s = TcpStream::connect(self.metrics).expect("connect metrics");
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// SIGTERM, then the exit (bounded).
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        wait_until(Duration::from_secs(20), "floodgate to exit", || {
            self.child.try_wait().unwrap()
        });
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// One session with one message from `s<i>@c.test`; the message must be accepted.
fn session(addr: SocketAddr, i: usize) {
    let mut c = RawClient::connect_greeted(addr);
    assert_eq!(c.ehlo("c.test").code, 250);
    assert_eq!(c.cmd(&format!("MAIL FROM:<s{i}@c.test>")).code, 250);
    assert_eq!(c.cmd("RCPT TO:<r@d.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: {i}\r\nMessage-ID: <{i}@c.test>\r\n\r\nbody\r\n.\r\n").as_bytes());
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
}

fn is_whole_line(l: &str) -> bool {
    l.contains(" INFO ") || l.contains(" WARN ") || l.contains(" ERROR ")
}

#[test]
fn every_line_is_written_or_counted_as_dropped() {
    let rec = Recorder::plain();
    // With room (and a reader): every line of every session, nothing dropped.
    let (mut roomy, _d1) = Running::start(rec.addr(), 65_536, true);
    for i in 0..SESSIONS {
        session(roomy.listen, i);
    }
    let produced = wait_until(Duration::from_secs(20), "every session's lines", || {
        let log = roomy.log();
        let sessions = log.lines().filter(|l| l.contains(" session ")).count();
        (sessions == SESSIONS).then(|| log.lines().count())
    });
    let log = roomy.log();
    for i in 0..SESSIONS {
        let needle = format!("sender=\"s{i}@c.test\"");
        assert_eq!(
            log.lines()
                .filter(|l| l.contains(" message ") && l.contains(&needle))
                .count(),
            1,
            "{needle} in\n{log}"
        );
    }
    assert!(log.lines().all(is_whole_line), "{log}");
    assert_eq!(roomy.metric("floodgate_log_lines_dropped_total"), 0);
    // The metric scrapes above log nothing: the count is still the count of the sessions.
    assert_eq!(roomy.log().lines().count(), produced);
    roomy.stop();
    // What was queued at exit was written.
    wait_until(Duration::from_secs(10), "the exit's log lines", || {
        roomy.log().contains("all sessions ended").then_some(())
    });

    // A queue of one line in front of a stderr nobody reads: mail flows regardless.
    let (mut tiny, _d2) = Running::start(rec.addr(), 1, false);
    for i in 0..SESSIONS {
        session(tiny.listen, i);
    }
    assert_eq!(
        tiny.metric("floodgate_messages_relayed_total"),
        SESSIONS as u64
    );
    tiny.read_stderr();
    let (seen, dropped) = wait_until(
        Duration::from_secs(20),
        "lines seen + dropped to reach the lines produced",
        || {
            let dropped = tiny.metric("floodgate_log_lines_dropped_total");
            let seen = tiny.log().lines().count();
            (seen as u64 + dropped == produced as u64).then_some((seen, dropped))
        },
    );
    eprintln!("{produced} lines produced: {seen} written, {dropped} dropped");
    assert!(
        dropped > 0,
        "the queue never overflowed ({seen} lines seen)"
    );
    let log = tiny.log();
    assert!(log.lines().all(is_whole_line), "{log}");
    assert!(log.ends_with('\n'));
    tiny.stop();
    assert_eq!(rec.messages().len(), 2 * SESSIONS);
}
