//! One connection from Postfix: requests read line by line, each answered in turn, many
//! per connection (Postfix keeps it for `smtpd_policy_service_max_idle` and `max_ttl`).

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::postfix::policy::{PolicyAction, PolicyError, PolicyRequest, RequestReader, MAX_LINE};

use super::judge::{judge, Sessions};
use super::Context;

/// How long a connection may stay without a request: longer than Postfix's own
/// `smtpd_policy_service_max_idle` (300s by default), so Postfix is the one that closes
/// an idle connection.
pub const IDLE: std::time::Duration = std::time::Duration::from_secs(900);

/// Free room in the read buffer before each read: more than a request of Postfix's.
const READ_ROOM: usize = 4096;

/// Where the connection stands in the request it reads.
enum Reading {
    /// Lines go to the request reader.
    Request,
    /// The request is bad: its lines are skipped up to the empty line that ends it, which
    /// is then answered.
    Skipping(PolicyError),
    /// A line longer than [`MAX_LINE`]: skipped up to its LF, then the request as above.
    LongLine,
}

/// What the lines read so far end in.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// A whole request, to judge.
    Request(PolicyRequest),
    /// A bad request, up to its empty line: answered `DUNNO`.
    Bad(PolicyError),
}

/// Serves one connection until Postfix closes it, it stays idle for [`IDLE`], or `stop`
/// fires (then after the request being answered).
pub async fn serve<S>(mut stream: S, ctx: Context, sessions: Sessions, stop: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(READ_ROOM);
    let mut reader = RequestReader::default();
    let mut reading = Reading::Request;
    loop {
        while let Some(next) = next_request(&mut buf, &mut reader, &mut reading) {
            let action = match next {
                Next::Request(req) => judge(&ctx, &sessions, &req).await,
                Next::Bad(e) => {
                    warn!(service = %ctx.name, error = %e, "bad policy request: answered DUNNO (Postfix goes on as if floodgate were not asked)");
                    PolicyAction::Dunno
                }
            };
            if stream.write_all(action.encode().as_bytes()).await.is_err() {
                return;
            }
        }
        if stop.is_cancelled() {
            return;
        }
        // Room for a whole request, so that one read takes it (the room before the lines
        // already taken is reused).
        buf.reserve(READ_ROOM);
        let read = tokio::select! {
            r = tokio::time::timeout(IDLE, stream.read_buf(&mut buf)) => r,
            _ = stop.cancelled() => return,
        };
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
            Err(_) => {
                debug!(service = %ctx.name, "policy connection idle: closed");
                return;
            }
        }
    }
}

/// Reads the whole lines of `buf` (each without its LF) into `reader` up to the one that
/// ends a request, and takes them out of `buf`; `None` when the lines there end none. A
/// line that grows past [`MAX_LINE`] without its LF is dropped as it comes and makes the
/// request bad.
fn next_request(
    buf: &mut BytesMut,
    reader: &mut RequestReader,
    reading: &mut Reading,
) -> Option<Next> {
    let mut at = 0;
    loop {
        let Some(i) = memchr::memchr(b'\n', &buf[at..]) else {
            buf.advance(at);
            if buf.len() >= MAX_LINE {
                buf.clear();
                // The request's lines so far are dropped with it.
                *reader = RequestReader::default();
                *reading = Reading::LongLine;
            }
            return None;
        };
        let line = &buf[at..at + i];
        at += i + 1;
        if matches!(reading, Reading::LongLine) {
            *reading = Reading::Skipping(PolicyError::LineTooLong);
            continue;
        }
        if let Some(next) = take_line(reader, reading, line) {
            buf.advance(at);
            return Some(next);
        }
    }
}

/// Takes one line; what it ends, when it ends a request.
fn take_line(reader: &mut RequestReader, reading: &mut Reading, line: &[u8]) -> Option<Next> {
    let end = line.is_empty() || line == b"\r";
    if let Reading::Skipping(_) = reading {
        if !end {
            return None;
        }
        let Reading::Skipping(e) = std::mem::replace(reading, Reading::Request) else {
            return None;
        };
        return Some(Next::Bad(e));
    }
    match reader.line(line) {
        Ok(None) => None,
        Ok(Some(req)) => Some(Next::Request(req)),
        Err(e) => {
            // The reader starts afresh; the rest of this request is skipped.
            *reading = Reading::Skipping(e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `input` cut in chunks of `chunk` octets reads as: each request's attributes as
    /// `name=value` lines, or the error of a bad one.
    fn requests(input: &[u8], chunk: usize) -> Vec<Result<Vec<String>, PolicyError>> {
        let mut buf = BytesMut::new();
        let mut reader = RequestReader::default();
        let mut reading = Reading::Request;
        let mut out = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(c);
            while let Some(next) = next_request(&mut buf, &mut reader, &mut reading) {
                out.push(match next {
                    Next::Request(r) => {
                        Ok(r.attributes().map(|(n, v)| format!("{n}={v}")).collect())
                    }
                    Next::Bad(e) => Err(e),
                });
            }
        }
        out
    }

    #[test]
    fn a_long_line_is_dropped_and_marks_the_request() {
        let mut input = b"a=1\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE * 3));
        input.extend_from_slice(b"\nb=2\n\nc=3\n\n");
        let got = requests(&input, 1000);
        assert_eq!(
            got,
            vec![Err(PolicyError::LineTooLong), Ok(vec!["c=3".to_string()])]
        );
    }

    #[test]
    fn a_line_without_equals_makes_the_request_bad_up_to_its_end() {
        let got = requests(b"a=1\nnonsense\nb=2\n\nc=3\n\n", 7);
        assert_eq!(
            got,
            vec![
                Err(PolicyError::NoEquals("nonsense".into())),
                Ok(vec!["c=3".to_string()])
            ]
        );
    }

    proptest! {
        /// Requests of lines under the cap come out whole and in order however the input
        /// is cut.
        #[test]
        fn requests_survive_any_cut(
            reqs in proptest::collection::vec(proptest::collection::vec("[a-z]{1,8}=[a-z=]{0,30}", 1..8), 0..6),
            chunk in 1usize..64,
        ) {
            let mut input = Vec::new();
            for r in &reqs {
                for l in r {
                    input.extend_from_slice(l.as_bytes());
                    input.push(b'\n');
                }
                input.push(b'\n');
            }
            let want: Vec<Result<Vec<String>, PolicyError>> = reqs.iter().map(|r| Ok(r.clone())).collect();
            prop_assert_eq!(requests(&input, chunk), want);
        }
    }
}
