//! Cheap waits with deadlines for the hot path: one timer per connection, re-armed lazily,
//! and a shutdown watch that registers its waker once per session.
//!
//! `tokio::time::timeout` around every read and write creates, registers and cancels a timer
//! entry each time (and reads the clock for each); the relay does that several times per
//! command. Here each connection keeps one [`Deadline`] timer. A wait only moves it when it
//! would fire too late; when it fires early (the deadline was pushed back since it was
//! armed) it is re-armed to the real deadline. So a timer is touched about once per idle
//! period instead of once per read, and every wait still ends exactly at its deadline.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::stream::ReadInto;

/// Why a wait ended without its result.
#[derive(Debug)]
pub(super) enum WaitError {
    /// The deadline passed.
    TimedOut,
    /// The connection failed.
    Io(io::Error),
}

/// One reusable timer; see the module documentation.
pub(super) struct Deadline {
    sleep: Pin<Box<Sleep>>,
}

impl Deadline {
    /// A timer not armed for any wait yet.
    pub(super) fn new() -> Self {
        // Far enough that it never fires before the first wait arms it.
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        Deadline {
            sleep: Box::pin(tokio::time::sleep_until(far)),
        }
    }

    /// Prepares a wait that must end at `until`: the timer is moved only if it would fire
    /// after `until`.
    pub(super) fn arm(&mut self, until: Instant) {
        if self.sleep.deadline() > until {
            self.sleep.as_mut().reset(until);
        }
    }

    /// Ready once `until` has passed (the wait must have been [`arm`](Self::arm)ed with an
    /// instant no later than `until`). Registers the task's waker otherwise.
    pub(super) fn poll_expired(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            if Instant::now() >= until {
                return Poll::Ready(());
            }
            // Armed for an earlier wait: wait on for this one.
            self.sleep.as_mut().reset(until);
        }
    }

    /// Reads once into `buf` (returns the count, 0 at end of input) unless `until` passes
    /// first.
    pub(super) async fn read_buf<R: ReadInto>(
        &mut self,
        r: &mut R,
        buf: &mut bytes::BytesMut,
        until: Instant,
    ) -> Result<usize, WaitError> {
        self.arm(until);
        poll_fn(|cx| {
            if let Poll::Ready(r) = r.poll_read_into(cx, buf) {
                return Poll::Ready(r.map_err(WaitError::Io));
            }
            ready!(self.poll_expired(cx, until));
            Poll::Ready(Err(WaitError::TimedOut))
        })
        .await
    }

    /// Writes all of `buf` and flushes, unless that takes longer than `limit`. The clock is
    /// read and the timer armed only if the peer does not take the bytes at once.
    pub(super) async fn write_all<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        buf: &[u8],
        limit: Duration,
    ) -> Result<(), WaitError> {
        self.write_all_parts(w, &mut [io::IoSlice::new(buf)], limit)
            .await
    }

    /// Writes all of `parts`, one after the other, and flushes, as
    /// [`write_all`](Self::write_all) does: the parts go out together (one `writev` on
    /// plain TCP when the socket takes them), without being copied into one buffer first.
    pub(super) async fn write_all_parts<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        parts: &mut [io::IoSlice<'_>],
        limit: Duration,
    ) -> Result<(), WaitError> {
        let mut parts = parts;
        io::IoSlice::advance_slices(&mut parts, 0);
        let mut until: Option<Instant> = None;
        poll_fn(|cx| loop {
            let step = if !parts.is_empty() {
                let p = Pin::new(&mut *w);
                if parts.len() == 1 {
                    p.poll_write(cx, &parts[0]).map_ok(Some)
                } else {
                    p.poll_write_vectored(cx, parts).map_ok(Some)
                }
            } else {
                Pin::new(&mut *w).poll_flush(cx).map_ok(|()| None)
            };
            match step {
                Poll::Ready(Ok(Some(0))) => {
                    return Poll::Ready(Err(WaitError::Io(io::ErrorKind::WriteZero.into())))
                }
                Poll::Ready(Ok(Some(n))) => io::IoSlice::advance_slices(&mut parts, n),
                Poll::Ready(Ok(None)) => return Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(WaitError::Io(e))),
                Poll::Pending => {
                    let u = *until.get_or_insert_with(|| {
                        let u = Instant::now() + limit;
                        self.arm(u);
                        u
                    });
                    ready!(self.poll_expired(cx, u));
                    return Poll::Ready(Err(WaitError::TimedOut));
                }
            }
        })
        .await
    }
}

/// Watches a cancellation token from one task: the waker is registered with the token once
/// (again only if the task's waker changes); later polls only ask whether it is cancelled
/// (one uncontended lock: each worker's sessions share a token of their own, see
/// `server::worker`), not a re-registration in the token's waiter list.
pub(super) struct StopWatch {
    token: CancellationToken,
    wait: Pin<Box<WaitForCancellationFutureOwned>>,
    registered: Option<Waker>,
}

impl StopWatch {
    /// Watches `token`.
    pub(super) fn new(token: CancellationToken) -> Self {
        StopWatch {
            wait: Box::pin(token.clone().cancelled_owned()),
            token,
            registered: None,
        }
    }

    /// The token watched.
    pub(super) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Ready once the token is cancelled.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        if self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            // Still registered with this task's waker: the cancellation will wake it.
            return Poll::Pending;
        }
        if self.wait.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        self.registered = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    impl ReadInto for tokio::io::DuplexStream {
        fn poll_read_into(
            &mut self,
            cx: &mut Context<'_>,
            buf: &mut bytes::BytesMut,
        ) -> Poll<io::Result<usize>> {
            tokio_util::io::poll_read_buf(Pin::new(self), cx, buf)
        }
    }

    #[tokio::test]
    async fn deadline_fires_at_the_latest_until_not_the_first() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let mut d = Deadline::new();
        let mut buf = bytes::BytesMut::new();
        let t0 = Instant::now();
        // First wait: data arrives before its deadline.
        b.write_all(b"x").await.unwrap();
        let n = d
            .read_buf(&mut a, &mut buf, t0 + Duration::from_millis(20))
            .await
            .unwrap();
        assert_eq!(n, 1);
        // Second wait with a later deadline: the timer armed at 10 s must not end it early.
        let until = t0 + Duration::from_millis(60);
        let r = d.read_buf(&mut a, &mut buf, until).await;
        assert!(matches!(r, Err(WaitError::TimedOut)));
        assert!(Instant::now() >= until);
        // A fresh timer (armed a year away) is moved earlier, or this would hang.
        let mut d = Deadline::new();
        let until = Instant::now() + Duration::from_millis(20);
        let r = d.read_buf(&mut a, &mut buf, until).await;
        assert!(matches!(r, Err(WaitError::TimedOut)));
        assert!(Instant::now() >= until);
        // Data still wins over an armed timer.
        b.write_all(b"yz").await.unwrap();
        let n = d
            .read_buf(&mut a, &mut buf, Instant::now() + Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!((n, &buf[..]), (2, &b"xyz"[..]));
    }

    #[tokio::test]
    async fn write_times_out_when_the_peer_does_not_read() {
        let (mut a, _b) = tokio::io::duplex(8);
        let mut d = Deadline::new();
        let t0 = Instant::now();
        let r = d
            .write_all(&mut a, &[0; 64], Duration::from_millis(30))
            .await;
        assert!(matches!(r, Err(WaitError::TimedOut)));
        assert!(Instant::now() >= t0 + Duration::from_millis(30));
        let (mut a, mut b) = tokio::io::duplex(64);
        d.write_all(&mut a, b"hello", Duration::from_secs(5))
            .await
            .unwrap();
        let mut got = [0; 5];
        tokio::io::AsyncReadExt::read_exact(&mut b, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"hello");
    }

    #[tokio::test]
    async fn parts_are_written_whole_and_in_order_across_short_writes() {
        // A pipe of 4 octets takes each part in several writes, and an empty part in the
        // middle or at the start is skipped, not taken for a peer that accepts nothing.
        let (mut a, mut b) = tokio::io::duplex(4);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut b, &mut got)
                .await
                .unwrap();
            got
        });
        let mut d = Deadline::new();
        let mut parts = [
            io::IoSlice::new(b""),
            io::IoSlice::new(b"Received: by floodgate\r\n"),
            io::IoSlice::new(b""),
            io::IoSlice::new(b"Subject: hi\r\n\r\nbody\r\n.\r\n"),
        ];
        d.write_all_parts(&mut a, &mut parts, Duration::from_secs(5))
            .await
            .unwrap();
        drop(a);
        assert_eq!(
            reader.await.unwrap(),
            b"Received: by floodgate\r\nSubject: hi\r\n\r\nbody\r\n.\r\n"
        );
    }

    #[tokio::test]
    async fn stop_watch_wakes_a_registered_task() {
        let token = CancellationToken::new();
        let mut w = StopWatch::new(token.clone());
        let mut polls = 0;
        let cancel = token.clone();
        let waiter = async {
            poll_fn(|cx| {
                polls += 1;
                if polls == 2 {
                    // Registered by the first poll: this one must not need the lock path.
                    assert!(w.registered.is_some());
                }
                w.poll(cx)
            })
            .await
        };
        let canceller = async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            cancel.cancel();
        };
        tokio::join!(waiter, canceller);
        assert!(w.token().is_cancelled());
    }
}
