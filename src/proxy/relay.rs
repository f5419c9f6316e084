//! A message spooled whole, relayed on the client's own upstream session: floodgate's lines
//! on top (its Received line, the policy's header lines), then the message as one
//! `BDAT n LAST` when upstream takes it, else DATA with floodgate's own dot-stuffing and
//! end-of-data; and the RSETs that end upstream's transaction when it must not deliver.

use std::borrow::Cow;

use tracing::warn;

use crate::smtp::data::{encode_data, unstuffed, Wire};
use crate::smtp::reply::Reply;

use super::upstream::{Upstream, UpstreamError};

/// A message spooled whole, as it is relayed.
pub(super) enum Spooled {
    /// From DATA: its dot-stuffed wire form with the end-of-data line.
    Data(Wire),
    /// From BDAT: the message itself, canonical line ends, not stuffed.
    Chunked(Vec<u8>),
}

impl AsRef<[u8]> for Spooled {
    /// The message as the policy reads it (dot-stuffed as it came with DATA).
    fn as_ref(&self) -> &[u8] {
        match self {
            Spooled::Data(wire) => wire.message(),
            Spooled::Chunked(body) => body,
        }
    }
}

/// How a message goes upstream.
pub(super) struct Relay<'a> {
    /// floodgate's Received line (CRLF-ended, never beginning with '.').
    pub received: Option<&'a [u8]>,
    /// The policy's header lines, without CRLF.
    pub headers: &'a [String],
    /// As one `BDAT n LAST` (upstream offered CHUNKING and `[upstream] chunking` allows it).
    pub bdat: bool,
}

/// floodgate's lines on top of a message: its Received line and the policy's header lines,
/// each kept to one line, with a leading '.' stuffed when the message goes as DATA.
pub(super) fn top_lines(received: Option<&[u8]>, headers: &[String], stuffed: bool) -> Vec<u8> {
    let mut top = Vec::with_capacity(received.map_or(0, <[u8]>::len) + 256 * headers.len());
    top.extend_from_slice(received.unwrap_or_default());
    for h in headers {
        // Header lines from the policy are floodgate's own text; keep them single lines.
        let start = top.len();
        top.extend(h.bytes().filter(|b| *b != b'\r' && *b != b'\n'));
        if stuffed && top.get(start) == Some(&b'.') {
            top.insert(start, b'.');
        }
        top.extend_from_slice(b"\r\n");
    }
    top
}

/// The message octets as floodgate relays them: its lines on top, CRLF lines, not
/// dot-stuffed (a message floodgate takes: held, paced or rerouted).
pub(super) fn octets(msg: &Spooled, received: Option<&[u8]>, headers: &[String]) -> Vec<u8> {
    let mut out = top_lines(received, headers, false);
    match msg {
        Spooled::Chunked(body) => out.extend_from_slice(body),
        Spooled::Data(wire) => {
            // Every line starting with '.' was stuffed: drop that one dot.
            for line in wire.message().split_inclusive(|&b| b == b'\n') {
                out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
            }
        }
    }
    out
}

/// Relays `msg` (of `size` octets as the decoder counted them) with upstream's final reply.
pub(super) async fn message(
    up: &mut Upstream,
    msg: &Spooled,
    size: u64,
    how: &Relay<'_>,
) -> Result<Reply, UpstreamError> {
    match msg {
        Spooled::Data(wire) => data_message(up, wire, size, how).await,
        Spooled::Chunked(body) => chunked_message(up, body, how).await,
    }
}

/// A message taken in BDAT chunks: `body` has canonical line ends and no stuffing.
async fn chunked_message(
    up: &mut Upstream,
    body: &[u8],
    how: &Relay<'_>,
) -> Result<Reply, UpstreamError> {
    let mut plain = top_lines(how.received, how.headers, false);
    if how.bdat {
        return bdat(up, &plain, body).await;
    }
    let message: &[u8] = if plain.is_empty() {
        body
    } else {
        plain.extend_from_slice(body);
        &plain
    };
    if let Some(refused) = open_data(up).await? {
        return Ok(refused);
    }
    let mut out = Vec::with_capacity(message.len() + message.len() / 64 + 5);
    encode_data(message, &mut out);
    up.command(&out).await
}

/// A message taken with DATA: `wire` is its dot-stuffed wire form with its end-of-data
/// line, as the decoder handed it over, and `size` the message's size as the decoder
/// counted it. As BDAT it goes unstuffed, uncopied unless a line of it begins with '.'.
async fn data_message(
    up: &mut Upstream,
    wire: &Wire,
    size: u64,
    how: &Relay<'_>,
) -> Result<Reply, UpstreamError> {
    if how.bdat {
        let top = top_lines(how.received, how.headers, false);
        // `size` counts the message without its stuffing dots: a wire form of that
        // length has none, and is not searched for them.
        let message = if wire.message().len() as u64 == size {
            Cow::Borrowed(wire.message())
        } else {
            unstuffed(wire.message())
        };
        return bdat(up, &top, &message).await;
    }
    if let Some(refused) = open_data(up).await? {
        return Ok(refused);
    }
    // floodgate's lines go on top of the message as it came: two parts of one write, so
    // the message is not copied behind them.
    let top = top_lines(how.received, how.headers, true);
    let mut parts = [
        std::io::IoSlice::new(&top),
        std::io::IoSlice::new(wire.as_bytes()),
    ];
    up.send_parts(&mut parts).await?;
    up.read_reply().await
}

/// Sends `top` and then `message` upstream as one `BDAT n LAST` chunk, in one write with
/// the command, and returns upstream's final reply. A refused chunk fails upstream's
/// transaction (RFC 3030 §4); RSET then makes sure it is over there as it is here.
async fn bdat(up: &mut Upstream, top: &[u8], message: &[u8]) -> Result<Reply, UpstreamError> {
    let command = format!("BDAT {} LAST\r\n", top.len() + message.len());
    let mut parts = [
        std::io::IoSlice::new(command.as_bytes()),
        std::io::IoSlice::new(top),
        std::io::IoSlice::new(message),
    ];
    up.send_parts(&mut parts).await?;
    let r = up.read_reply().await?;
    if !r.is_completion() {
        reset(up).await?;
    }
    Ok(r)
}

/// Sends DATA upstream; `Some(reply)` when upstream refused it (its transaction, still
/// open there, is then closed with RSET so both sides agree), `None` on 354.
async fn open_data(up: &mut Upstream) -> Result<Option<Reply>, UpstreamError> {
    let r = up.command(b"DATA\r\n").await?;
    if r.code != 354 {
        reset(up).await?;
        return Ok(Some(r));
    }
    up.recycle(r);
    Ok(None)
}

/// RSET, so upstream's transaction is over: after it refused DATA or the message's chunk,
/// or when it saw MAIL and RCPT of a message floodgate took and must never deliver it. A
/// refused RSET is only logged (the answer the client gets stands).
pub(super) async fn reset(up: &mut Upstream) -> Result<(), UpstreamError> {
    let r = up.command(b"RSET\r\n").await?;
    if !r.is_completion() {
        warn!(code = r.code, "upstream refused RSET");
    }
    up.recycle(r);
    Ok(())
}
