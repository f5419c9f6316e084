//! A byte-exact SMTP client over plain TCP with bounded reads.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use super::*;

/// Bytes as an escaped string for assertion messages (`b"a\r\n"` shows as `a\r\n`).
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().to_string()
}

/// One complete SMTP reply.
#[derive(Clone, PartialEq, Eq)]
pub struct Reply {
    /// The three-digit code (of the last line).
    pub code: u16,
    /// Text of each line after `code` and the separator.
    pub lines: Vec<String>,
    /// The bytes as received, CRLFs included.
    pub raw: Vec<u8>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", show(&self.raw))
    }
}

impl Reply {
    /// The enhanced status code (`4.4.1`) at the start of the last line, if any.
    pub fn enhanced(&self) -> Option<String> {
        let first = self.lines.last()?.split(' ').next()?;
        let parts: Vec<&str> = first.split('.').collect();
        let ok = parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        ok.then(|| first.to_string())
    }

    /// `code` is in the given class (2, 3, 4 or 5).
    pub fn class(&self) -> u16 {
        self.code / 100
    }

    /// The first word of each line after the first, upper-cased (EHLO keywords).
    pub fn keywords(&self) -> Vec<String> {
        self.lines
            .iter()
            .skip(1)
            .filter_map(|l| l.split(' ').next())
            .map(str::to_ascii_uppercase)
            .collect()
    }

    /// The whole reply as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}

/// Finds one complete reply at the start of `buf`; returns it and its length.
pub fn parse_reply(buf: &[u8]) -> Option<Result<(Reply, usize), String>> {
    let mut pos = 0;
    let mut lines = Vec::new();
    loop {
        let end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let line = &buf[pos..end];
        let next = end + 2;
        if line.len() < 3 || !line[..3].iter().all(u8::is_ascii_digit) {
            return Some(Err(format!(
                "not an SMTP reply line: {:?}",
                String::from_utf8_lossy(line)
            )));
        }
        let code: u16 = std::str::from_utf8(&line[..3]).ok()?.parse().ok()?;
        let sep = line.get(3).copied();
        lines.push(String::from_utf8_lossy(line.get(4..).unwrap_or_default()).into_owned());
        match sep {
            None | Some(b' ') => {
                return Some(Ok((
                    Reply {
                        code,
                        lines,
                        raw: buf[..next].to_vec(),
                    },
                    next,
                )))
            }
            Some(b'-') => pos = next,
            Some(_) => {
                return Some(Err(format!(
                    "bad reply separator: {:?}",
                    String::from_utf8_lossy(line)
                )))
            }
        }
    }
}

/// A byte-exact SMTP client over plain TCP; every read is bounded by [`REPLY_TIMEOUT`].
pub struct RawClient {
    stream: TcpStream,
    buf: Vec<u8>,
    eof: bool,
}

impl RawClient {
    /// Connects (bounded) to `addr`.
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        RawClient {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Connects and reads the greeting, which must be 220.
    pub fn connect_greeted(addr: SocketAddr) -> RawClient {
        let mut c = RawClient::connect(addr);
        let g = c.reply();
        assert_eq!(g.code, 220, "greeting: {}", g.text());
        c
    }

    /// Writes `bytes` in one write call.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap_or_else(|e| {
            panic!(
                "send {:?}: {e}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )
        });
    }

    /// Writes `bytes` in one write call; an error (peer gone) is returned, not fatal.
    pub fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one reply: `Ok`, or `Err` describing EOF / reset / timeout / garbage.
    pub fn try_reply(&mut self) -> Result<Reply, String> {
        loop {
            if let Some(r) = parse_reply(&self.buf) {
                let (reply, n) = r?;
                self.buf.drain(..n);
                return Ok(reply);
            }
            if self.eof {
                return Err(format!(
                    "connection closed; unparsed bytes {:?}",
                    String::from_utf8_lossy(&self.buf)
                ));
            }
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(format!(
                        "no complete reply within {REPLY_TIMEOUT:?}; have {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ))
                }
                Err(e) => return Err(format!("read error: {e}")),
            }
        }
    }

    /// Reads one reply or fails the test.
    pub fn reply(&mut self) -> Reply {
        self.try_reply().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Reads `n` replies.
    pub fn replies(&mut self, n: usize) -> Vec<Reply> {
        (0..n).map(|_| self.reply()).collect()
    }

    /// Sends `line` + CRLF and reads the reply.
    pub fn cmd(&mut self, line: &str) -> Reply {
        self.send(format!("{line}\r\n").as_bytes());
        self.reply()
    }

    /// Reads replies until the server closes the connection (bounded per read).
    /// A read timeout fails the test: the server was expected to close.
    pub fn replies_until_close(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        loop {
            match self.try_reply() {
                Ok(r) => out.push(r),
                Err(e) if self.eof || e.starts_with("read error") => {
                    assert!(
                        self.buf.is_empty(),
                        "trailing bytes before close: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                    return out;
                }
                Err(e) => panic!("server did not close: {e}; replies so far: {out:?}"),
            }
        }
    }

    /// True if the server has closed (or reset) the connection; reads are bounded.
    pub fn is_closed(&mut self) -> bool {
        if self.eof {
            return true;
        }
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => {
                self.buf.push(b[0]);
                false
            }
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }

    /// Sends EHLO and returns the reply (asserting 250).
    pub fn ehlo(&mut self, name: &str) -> Reply {
        let r = self.cmd(&format!("EHLO {name}"));
        assert_eq!(r.code, 250, "EHLO: {}", r.text());
        r
    }

    /// Changes the bound on each read (default [`REPLY_TIMEOUT`]); a read that runs out
    /// makes [`RawClient::try_reply`] return `Err` without closing anything.
    pub fn set_read_timeout(&mut self, limit: Duration) {
        self.stream
            .set_read_timeout(Some(limit))
            .expect("set_read_timeout");
    }

    /// Whether the server closed the connection (seen by an earlier read).
    pub fn saw_eof(&self) -> bool {
        self.eof
    }

    /// The client's own address (what floodgate sees as the peer).
    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr().expect("local_addr")
    }

    /// Reads and discards everything until the server closes the connection; returns the
    /// bytes received. A read that times out ([`REPLY_TIMEOUT`]) fails the test.
    pub fn drain_until_close(&mut self) -> Vec<u8> {
        let mut all = std::mem::take(&mut self.buf);
        if self.eof {
            return all;
        }
        let mut chunk = [0u8; 16384];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    panic!(
                        "server did not close within {REPLY_TIMEOUT:?}; received {:?}",
                        show(&all)
                    )
                }
                // A reset also ends the connection.
                Err(_) => break,
            }
        }
        self.eof = true;
        all
    }

    /// Half-closes the sending side.
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}
