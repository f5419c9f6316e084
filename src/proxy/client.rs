//! The client side of a session: buffered reads with timeouts and shutdown, queued replies
//! flushed before every blocking read (RFC 2920), and the STARTTLS upgrade.

use std::time::Duration;

use std::future::poll_fn;
use std::task::{ready, Poll};

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::time::{timeout, Instant};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::smtp::reply::Reply;

use super::deadline::{Deadline, StopWatch, WaitError};
use super::stream::{ReadInto, Stream};

/// Why no more client input came.
#[derive(Debug)]
pub enum ReadEnd {
    /// The client closed the connection.
    Eof,
    /// The idle timeout passed.
    Idle,
    /// The whole-session deadline passed.
    SessionDeadline,
    /// floodgate is stopping.
    Shutdown,
    /// The connection broke.
    Io(std::io::Error),
}

/// The bounds of one wait for client input that may take several reads (a command line, a
/// message): each read may last `idle`, and all of them together must end `total` after the
/// first read began. The clock is read once per read, and not at all while the input is
/// already buffered.
#[derive(Debug)]
pub struct Wait {
    idle: Duration,
    total: Duration,
    until: Option<Instant>,
}

impl Wait {
    /// Reads of at most `idle` each, all of them within `total`.
    pub fn new(idle: Duration, total: Duration) -> Self {
        Wait {
            idle,
            total,
            until: None,
        }
    }
}

/// Read buffer room for commands: most sessions are idle between commands, so this is kept
/// small.
const COMMAND_READ: usize = 8192;

/// Read buffer room while a message comes in: the message arrives as a stream of segments,
/// and a larger buffer takes it in fewer reads (a 20 KB message in one read instead of
/// three). Held only during DATA: see [`ClientConn::set_bulk`].
const BULK_READ: usize = 64 * 1024;

/// The client connection with its input buffer and queued output.
pub struct ClientConn {
    stream: Option<Stream>,
    /// Bytes read from the client and not yet parsed.
    pub rbuf: BytesMut,
    wbuf: Vec<u8>,
    deadline: Instant,
    /// The one timer of every read and write wait.
    timer: Deadline,
    /// The shutdown token of [`fill`](Self::fill), watched from the session's task.
    stop: Option<StopWatch>,
    /// Reading a message: [`fill`](Self::fill) reads up to [`BULK_READ`] at a time.
    bulk: bool,
    /// TLS version and cipher, noted when TLS is established: the session's log line is
    /// written after the stream is closed and gone.
    tls_info: Option<String>,
}

impl ClientConn {
    /// Wraps an accepted (and, for implicit TLS, already encrypted) connection.
    pub fn new(stream: Stream, session_deadline: Instant) -> Self {
        ClientConn {
            tls_info: stream.tls_info(),
            stream: Some(stream),
            rbuf: BytesMut::with_capacity(4096),
            wbuf: Vec::with_capacity(1024),
            deadline: session_deadline,
            timer: Deadline::new(),
            stop: None,
            bulk: false,
        }
    }

    /// Switches reads to message size (`true`, at the start of DATA) or back to command
    /// size (`false`, once the message is in), when the large buffer is given back so an
    /// idle session keeps only a small one.
    pub fn set_bulk(&mut self, on: bool) {
        self.bulk = on;
        if !on && self.rbuf.capacity() > 2 * COMMAND_READ {
            let mut small = BytesMut::with_capacity(COMMAND_READ.max(self.rbuf.len()));
            small.extend_from_slice(&self.rbuf);
            self.rbuf = small;
        }
    }

    /// TLS version and cipher, for logs: those of the session's TLS, also after
    /// [`close`](Self::close).
    pub fn tls_info(&self) -> Option<&str> {
        self.tls_info.as_deref()
    }

    /// Queues a reply; it is sent at the next flush.
    pub fn queue(&mut self, reply: &Reply) {
        reply.write_to(&mut self.wbuf);
    }

    /// Sends everything queued.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        let res = self
            .timer
            .write_all(stream, &self.wbuf, Duration::from_secs(60))
            .await
            .map_err(|e| match e {
                WaitError::Io(e) => e,
                WaitError::TimedOut => std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "client does not read its replies",
                ),
            });
        self.wbuf.clear();
        res
    }

    /// Flushes, then waits for more input (within the bounds of `wait`, the session deadline,
    /// or until `stop` fires). Returns the number of new bytes (never 0: end of input is
    /// `Eof`).
    pub async fn fill(
        &mut self,
        wait: &mut Wait,
        stop: &CancellationToken,
    ) -> Result<usize, ReadEnd> {
        self.flush().await.map_err(ReadEnd::Io)?;
        let now = Instant::now();
        if now >= self.deadline {
            return Err(ReadEnd::SessionDeadline);
        }
        let whole = *wait.until.get_or_insert(now + wait.total);
        let until = whole.min(now + wait.idle);
        let session_end = self.deadline < until;
        let until = if session_end { self.deadline } else { until };
        let Some(stream) = self.stream.as_mut() else {
            return Err(ReadEnd::Eof);
        };
        let room = if self.bulk { BULK_READ } else { COMMAND_READ };
        if self.rbuf.capacity() - self.rbuf.len() < room / 8 {
            self.rbuf.reserve(room);
        }
        let watch = match &mut self.stop {
            Some(w) if w.token() == stop => w,
            slot => slot.insert(StopWatch::new(stop.clone())),
        };
        let timer = &mut self.timer;
        timer.arm(until);
        let rbuf = &mut self.rbuf;
        poll_fn(|cx| {
            // A stop wins over input that keeps coming (fast stop must be prompt).
            if watch.poll(cx).is_ready() {
                return Poll::Ready(Err(ReadEnd::Shutdown));
            }
            if let Poll::Ready(r) = stream.poll_read_into(cx, rbuf) {
                return Poll::Ready(match r {
                    Err(e) => Err(ReadEnd::Io(e)),
                    Ok(0) => Err(ReadEnd::Eof),
                    Ok(n) => Ok(n),
                });
            }
            ready!(timer.poll_expired(cx, until));
            Poll::Ready(Err(if session_end {
                ReadEnd::SessionDeadline
            } else {
                ReadEnd::Idle
            }))
        })
        .await
    }

    /// Upgrades to TLS after a 220 to STARTTLS: every byte the client sent after the
    /// STARTTLS line is discarded first (CVE-2011-0411). Returns how many were discarded.
    pub async fn starttls(
        &mut self,
        acceptor: &TlsAcceptor,
        handshake: Duration,
    ) -> Result<usize, std::io::Error> {
        self.flush().await?;
        let discarded = self.rbuf.len();
        self.rbuf.clear();
        let Some(Stream::Plain(tcp)) = self.stream.take() else {
            return Err(std::io::Error::other(
                "STARTTLS on a stream that is not plain TCP",
            ));
        };
        let tls = timeout(handshake, acceptor.accept(tcp))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })??;
        let stream = Stream::ServerTls(Box::new(tls));
        self.tls_info = stream.tls_info();
        self.stream = Some(stream);
        Ok(discarded)
    }

    /// Flushes and closes the connection.
    pub async fn close(&mut self) {
        let _ = self.flush().await;
        if let Some(mut s) = self.stream.take() {
            // TLS ends with close_notify. Plain TCP needs nothing: dropping the socket sends
            // the FIN a shutdown would (and a client that already left made that fail).
            if s.is_tls() {
                let _ = timeout(Duration::from_secs(2), s.shutdown()).await;
            }
        }
    }
}
