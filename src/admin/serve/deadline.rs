//! The write deadline of an admin connection: a client that does not take its answer must
//! not hold the connection (and its descriptor) for long.
//!
//! [`Timed`] sits under everything else (TLS, hyper): once a write, flush or shutdown has to
//! wait (the socket's send buffer is full), the wait may last `limit`. Before the answer
//! (the TLS handshake's few writes) each completed write starts the count afresh; once the
//! answer is being written (`answering`, set by the listener) it never does: the rest of
//! the answer must be taken within `limit` of the first stall, however slowly the client
//! reads. Past it, every write fails with `TimedOut` and `timed_out` is set.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What the listener and [`Timed`] share about one connection.
#[derive(Debug, Default)]
pub struct Flags {
    /// The answer is being written: the write deadline is no longer renewed.
    pub answering: AtomicBool,
    /// A write waited past the deadline.
    pub timed_out: AtomicBool,
}

/// A stream whose writes wait at most `limit` (see the module).
#[derive(Debug)]
pub struct Timed<'a, S> {
    inner: S,
    limit: Duration,
    flags: &'a Flags,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<'a, S> Timed<'a, S> {
    /// Wraps `inner`.
    pub fn new(inner: S, limit: Duration, flags: &'a Flags) -> Self {
        Timed {
            inner,
            limit,
            flags,
            stalled: None,
        }
    }

    /// Runs one write-side operation under the deadline.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>>
    where
        S: Unpin,
    {
        if self.flags.timed_out.load(Ordering::Relaxed) {
            return Poll::Ready(Err(timed_out()));
        }
        match op(Pin::new(&mut self.inner), cx) {
            Poll::Ready(r) => {
                if !self.flags.answering.load(Ordering::Acquire) {
                    self.stalled = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = self.limit;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if sleep.as_mut().poll(cx).is_ready() {
                    self.flags.timed_out.store(true, Ordering::Relaxed);
                    return Poll::Ready(Err(timed_out()));
                }
                Poll::Pending
            }
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the client did not take the answer in time",
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Timed<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Timed<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().bounded(cx, |s, cx| s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().bounded(cx, |s, cx| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().bounded(cx, |s, cx| s.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn an_answer_nobody_reads_fails_after_the_limit() {
        let flags = Flags::default();
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut t = Timed::new(ours, Duration::from_millis(200), &flags);
        flags.answering.store(true, Ordering::Release);
        let started = tokio::time::Instant::now();
        let e = t.write_all(&[b'x'; 64 * 1024]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(flags.timed_out.load(Ordering::Relaxed));
        // Everything after fails at once.
        assert!(t.flush().await.is_err());
        let mut got = vec![0; 4096];
        assert_eq!(theirs.read(&mut got).await.unwrap(), 1024);
    }

    #[tokio::test]
    async fn a_reader_in_time_gets_everything() {
        let flags = Flags::default();
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut t = Timed::new(ours, Duration::from_secs(5), &flags);
        flags.answering.store(true, Ordering::Release);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            theirs.read_to_end(&mut all).await.unwrap();
            all.len()
        });
        t.write_all(&[b'x'; 64 * 1024]).await.unwrap();
        t.shutdown().await.unwrap();
        assert_eq!(reader.await.unwrap(), 64 * 1024);
        assert!(!flags.timed_out.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn before_the_answer_each_write_gets_the_whole_limit() {
        let flags = Flags::default();
        let (ours, mut theirs) = tokio::io::duplex(16);
        let mut t = Timed::new(ours, Duration::from_millis(1000), &flags);
        // Three stalls of 500 ms each (each under the limit, 1.5 s in all) before the
        // answer: each write that completes starts the count afresh.
        let reader = tokio::spawn(async move {
            let mut got = [0u8; 16];
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                theirs.read_exact(&mut got).await.unwrap();
            }
            theirs
        });
        for _ in 0..4 {
            t.write_all(&[b'h'; 16]).await.unwrap();
        }
        let mut theirs = reader.await.unwrap();
        // The answer: its stalls add up; the same pace now fails.
        flags.answering.store(true, Ordering::Release);
        let slow = tokio::spawn(async move {
            let mut got = [0u8; 16];
            let _ = theirs.read_exact(&mut got).await;
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if theirs.read_exact(&mut got).await.is_err() {
                    break;
                }
            }
        });
        let mut result = Ok(());
        for _ in 0..4 {
            result = t.write_all(&[b'a'; 16]).await;
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
        drop(t);
        slow.await.unwrap();
    }
}
