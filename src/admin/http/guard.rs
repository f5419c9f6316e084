//! What hyper's HTTP/1.1 server leaves to the admin listener: strict line endings in the
//! request head, and error answers in the API's JSON shape.
//!
//! hyper (through httparse) accepts a bare LF as a line ending, as RFC 9112 §2.2 allows; the
//! admin API refuses it, as it refuses everything loose that two HTTP parsers may read
//! differently. [`Guard`] sits between the socket and hyper: it checks each byte of the head
//! as it is read ([`HeadCheck`]) and, until the API has answered, holds back what hyper
//! writes on its own (a bodyless 400 or 431 for a request it could not parse), so that the
//! listener answers such requests itself, in JSON.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Checks, chunk by chunk, that a request head's lines end in CRLF and hold no NUL; stops
/// checking at the blank line that ends the head (what follows is the body). Blank lines
/// before the request line are skipped, as HTTP allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadCheck {
    /// The byte before the next one (`\n` at the start).
    prev: u8,
    /// The current line has had no byte but a CR.
    line_empty: bool,
    /// A line with content (the request line) was seen.
    started: bool,
    /// The blank line after the header fields was seen.
    done: bool,
}

impl Default for HeadCheck {
    fn default() -> Self {
        HeadCheck {
            prev: b'\n',
            line_empty: true,
            started: false,
            done: false,
        }
    }
}

/// Why a request head was refused.
pub const BARE_LINE_END: &str = "bare CR or LF (lines must end in CRLF), or NUL, in the head";

impl HeadCheck {
    /// Checks the next bytes read; `Err` names the fault.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), &'static str> {
        for &b in bytes {
            if self.done {
                return Ok(());
            }
            let bad = b == 0 || (self.prev == b'\r') != (b == b'\n');
            if bad {
                return Err(BARE_LINE_END);
            }
            match b {
                b'\n' => {
                    self.done = self.line_empty && self.started;
                    self.line_empty = true;
                }
                b'\r' => {}
                _ => {
                    self.line_empty = false;
                    self.started = true;
                }
            }
            self.prev = b;
        }
        Ok(())
    }

    /// The whole head was seen.
    pub fn done(&self) -> bool {
        self.done
    }
}

/// A connection as hyper sees it: reads are checked with [`HeadCheck`], and writes are
/// dropped until `answered` is set (by the service, as it hands hyper the API's answer), and
/// so are shutdowns. An interim `100 Continue` is dropped too: a client that asked for one
/// sends its body after a short wait, as it does with servers that never send one.
#[derive(Debug)]
pub struct Guard<'a, S> {
    inner: S,
    head: HeadCheck,
    refused: Option<&'static str>,
    read_any: bool,
    answered: &'a AtomicBool,
}

impl<'a, S> Guard<'a, S> {
    /// Wraps `inner`; writes pass once `answered` is set.
    pub fn new(inner: S, answered: &'a AtomicBool) -> Self {
        Guard {
            inner,
            head: HeadCheck::default(),
            refused: None,
            read_any: false,
            answered,
        }
    }

    /// Why the head was refused, if it was; hyper then saw a read error.
    pub fn refused(&self) -> Option<&'static str> {
        self.refused
    }

    /// Some bytes were read.
    pub fn read_any(&self) -> bool {
        self.read_any
    }

    fn passes_writes(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guard<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = this.refused {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let fresh = &buf.filled()[before..];
        this.read_any |= !fresh.is_empty();
        if let Err(why) = this.head.feed(fresh) {
            this.refused = Some(why);
            buf.set_filled(before);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guard<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.passes_writes() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.passes_writes() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.passes_writes() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
