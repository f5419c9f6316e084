//! One connection from Postfix: requests read line by line, each answered in turn, many
//! per connection (Postfix keeps it for `smtpd_policy_service_max_idle` and `max_ttl`).

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::postfix::policy::{PolicyAction, PolicyError, RequestReader, MAX_LINE};

use super::judge::{judge, Sessions};
use super::Context;

/// How long a connection may stay without a request: longer than Postfix's own
/// `smtpd_policy_service_max_idle` (300s by default), so Postfix is the one that closes
/// an idle connection.
pub const IDLE: std::time::Duration = std::time::Duration::from_secs(900);

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

/// Serves one connection until Postfix closes it, it stays idle for [`IDLE`], or `stop`
/// fires (then after the request being answered).
pub async fn serve<S>(mut stream: S, ctx: Context, sessions: Sessions, stop: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(4096);
    let mut reader = RequestReader::default();
    let mut reading = Reading::Request;
    loop {
        while let Some(line) = next_line(&mut buf, &mut reading) {
            let Some(action) = take_line(&ctx, &sessions, &mut reader, &mut reading, &line).await
            else {
                continue;
            };
            if stream.write_all(action.encode().as_bytes()).await.is_err() {
                return;
            }
        }
        if stop.is_cancelled() {
            return;
        }
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

/// The next whole line of `buf` (without its LF); a line that grows past [`MAX_LINE`]
/// without one is dropped as it comes and makes the request bad.
fn next_line(buf: &mut BytesMut, reading: &mut Reading) -> Option<BytesMut> {
    loop {
        match memchr::memchr(b'\n', buf) {
            Some(i) => {
                let mut line = buf.split_to(i + 1);
                line.truncate(i);
                if matches!(reading, Reading::LongLine) {
                    *reading = Reading::Skipping(PolicyError::LineTooLong);
                    continue;
                }
                return Some(line);
            }
            None if buf.len() >= MAX_LINE => {
                buf.clear();
                *reading = Reading::LongLine;
                return None;
            }
            None => return None,
        }
    }
}

/// Takes one line; the action when it ended a request.
async fn take_line(
    ctx: &Context,
    sessions: &Sessions,
    reader: &mut RequestReader,
    reading: &mut Reading,
    line: &[u8],
) -> Option<PolicyAction> {
    let end = line.is_empty() || line == b"\r";
    if let Reading::Skipping(e) = reading {
        if !end {
            return None;
        }
        warn!(service = %ctx.name, error = %e, "bad policy request: answered DUNNO (Postfix goes on as if floodgate were not asked)");
        *reading = Reading::Request;
        return Some(PolicyAction::Dunno);
    }
    match reader.line(line) {
        Ok(None) => None,
        Ok(Some(req)) => Some(judge(ctx, sessions, &req).await),
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

    fn lines(input: &[u8], chunk: usize) -> (Vec<Vec<u8>>, bool) {
        let mut buf = BytesMut::new();
        let mut reading = Reading::Request;
        let mut out = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(c);
            while let Some(l) = next_line(&mut buf, &mut reading) {
                out.push(l.to_vec());
            }
        }
        (
            out,
            matches!(reading, Reading::Skipping(PolicyError::LineTooLong)),
        )
    }

    #[test]
    fn a_long_line_is_dropped_and_marks_the_request() {
        let mut input = b"a=1\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE * 3));
        input.extend_from_slice(b"\nb=2\n");
        let (got, bad) = lines(&input, 1000);
        assert_eq!(got, vec![b"a=1".to_vec(), b"b=2".to_vec()]);
        assert!(bad);
    }

    proptest! {
        /// Lines under the cap come out whole and in order however the input is cut.
        #[test]
        fn lines_survive_any_cut(ls in proptest::collection::vec("[a-z=]{0,40}", 0..20), chunk in 1usize..64) {
            let mut input = Vec::new();
            for l in &ls {
                input.extend_from_slice(l.as_bytes());
                input.push(b'\n');
            }
            let (got, bad) = lines(&input, chunk);
            let want: Vec<Vec<u8>> = ls.iter().map(|l| l.as_bytes().to_vec()).collect();
            prop_assert_eq!(got, want);
            prop_assert!(!bad);
        }
    }
}
