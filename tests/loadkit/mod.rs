//! Support for the load and soak tests (`tests/load_sessions.rs`, `tests/soak.rs`):
//! the descriptor limit, floodgate's memory and descriptors from /proc, and a small async
//! SMTP client (plain or STARTTLS) cheap enough to hold ten thousand sessions open in one
//! test process.
//!
//! Every network operation is bounded by [`OP_TIMEOUT`]; nothing here connects beyond the
//! loopback addresses the tests hand it.
#![allow(dead_code)] // each test crate uses a different subset of these helpers

use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Held by every load and soak run, so that runs measure floodgate alone, one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::common::{parse_reply, show, Reply};

/// The longest any single connect, read, write or handshake may take.
pub const OP_TIMEOUT: Duration = Duration::from_secs(60);

/// Raises this process's descriptor limit (soft, and hard when allowed: we run as root in
/// CI) to at least `want`; children started afterwards inherit it. Returns the soft limit
/// now in force, which is lower than `want` when the hard limit could not be raised.
pub fn raise_nofile(want: u64) -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read or write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return 0;
        }
        if rl.rlim_cur >= want {
            return rl.rlim_cur;
        }
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: rl.rlim_max.max(want),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            // Not allowed to raise the hard limit: take as much as it allows.
            let capped = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &capped);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl);
    }
    rl.rlim_cur
}

/// A `/proc/PID/status` value in KiB (`VmRSS`, `VmHWM`, ...).
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let prefix = format!("{key}:");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Prints a figure where the reader sees it even without `--nocapture` (straight to
/// stderr, past the test harness's capture), and appends it to
/// `target/tmp/load-figures.txt` (which `.ci/run` prints after the tests).
pub fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(io::stderr(), "{line}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("load-figures.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Resident memory of `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS").unwrap_or_else(|| panic!("cannot read VmRSS of {pid}"))
}

/// Open descriptors of `pid` (entries of /proc/PID/fd).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd: {e}"))
        .count()
}

/// `pid`'s descriptor count once it has stopped changing: two equal readings 200 ms apart
/// (worker threads set up, sessions that just ended closed). Bounded: panics after 20 s.
pub fn settled_fds(pid: u32) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = fd_count(pid);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = fd_count(pid);
        if now == last {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "descriptors of {pid} still changing after 20 s ({last} -> {now})"
        );
        last = now;
    }
}

/// What `pid`'s descriptors point at, one `fd -> target` a line (for failure messages).
pub fn fd_listing(pid: u32) -> String {
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            let target = std::fs::read_link(e.path()).unwrap_or_default();
            out.push(format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                target.display()
            ));
        }
    }
    out.sort();
    out.join("\n")
}

/// A TLS connector trusting `certs/dev/ca.crt` (floodgate's dev certificate's CA).
pub fn dev_connector() -> TlsConnector {
    let ca = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("certs/dev/ca.crt");
    let config = floodgate::tls::client_config(Some(&ca)).expect("client TLS config");
    TlsConnector::from(config)
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// Only while the TCP stream is inside a TLS handshake (or after it failed).
    Gone,
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "connection lost in STARTTLS")
}

/// A client SMTP session over plain TCP or, after [`Smtp::starttls`], TLS.
pub struct Smtp {
    conn: Conn,
    /// Bytes read but not yet consumed (kept empty between replies, so an idle session
    /// holds no buffer).
    buf: Vec<u8>,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

impl Smtp {
    /// Connects to `addr` (the greeting is not read).
    pub async fn connect(addr: SocketAddr) -> io::Result<Smtp> {
        let tcp = timeout(OP_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out("connect"))??;
        tcp.set_nodelay(true)?;
        Ok(Smtp {
            conn: Conn::Plain(tcp),
            buf: Vec::new(),
        })
    }

    /// Whether the session is under TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.conn, Conn::Tls(_))
    }

    async fn read_some(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 2048];
        let n = match &mut self.conn {
            Conn::Plain(s) => timeout(OP_TIMEOUT, s.read(&mut chunk)).await,
            Conn::Tls(s) => timeout(OP_TIMEOUT, s.read(&mut chunk)).await,
            Conn::Gone => return Err(gone()),
        }
        .map_err(|_| timed_out("read"))??;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Writes `bytes` and flushes.
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let op = async {
            match &mut self.conn {
                Conn::Plain(s) => s.write_all(bytes).await,
                Conn::Tls(s) => {
                    s.write_all(bytes).await?;
                    s.flush().await
                }
                Conn::Gone => Err(gone()),
            }
        };
        timeout(OP_TIMEOUT, op)
            .await
            .map_err(|_| timed_out("write"))?
    }

    /// Reads one (possibly multi-line) reply (parsed by the common `parse_reply`).
    pub async fn reply(&mut self) -> io::Result<Reply> {
        loop {
            match parse_reply(&self.buf) {
                Some(Ok((reply, used))) => {
                    self.buf.drain(..used);
                    if self.buf.is_empty() {
                        self.buf = Vec::new(); // free the capacity while idle
                    }
                    return Ok(reply);
                }
                Some(Err(e)) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                None if self.buf.len() > 64 * 1024 => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "reply too long"))
                }
                None => {
                    if self.read_some().await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("connection closed; unparsed {:?}", show(&self.buf)),
                        ));
                    }
                }
            }
        }
    }

    /// Sends `line` + CRLF and reads the reply.
    pub async fn cmd(&mut self, line: &str) -> io::Result<Reply> {
        self.send(format!("{line}\r\n").as_bytes()).await?;
        self.reply().await
    }

    /// Sends STARTTLS and, on 220, does the handshake (server name `localhost`).
    /// Returns the STARTTLS reply when it was not 220 (the session stays plain).
    pub async fn starttls(&mut self, connector: &TlsConnector) -> io::Result<Option<Reply>> {
        let r = self.cmd("STARTTLS").await?;
        if r.code != 220 {
            return Ok(Some(r));
        }
        let conn = std::mem::replace(&mut self.conn, Conn::Gone);
        let Conn::Plain(tcp) = conn else {
            return Err(io::Error::other("STARTTLS inside TLS"));
        };
        let name = ServerName::try_from("localhost").expect("server name");
        let tls = timeout(OP_TIMEOUT, connector.connect(name, tcp))
            .await
            .map_err(|_| timed_out("TLS handshake"))??;
        self.conn = Conn::Tls(Box::new(tls));
        Ok(None)
    }
}
